"""A CUDA client for TestMPSShareLimits, through the driver API alone.

Uses the primary context of device 0 (an MPS client when CUDA_MPS_PIPE_DIRECTORY
names a running control daemon), allocates ALLOC_MIB MiB and prints one JSON
object: "alloc" ("ok" or the CUDA error's name), "smCount" (the SMs the
context may use, as MPS's active thread percentage leaves them) and
"deviceSMs" (the device's).
"""

import ctypes
import json
import os
import sys

cuda = ctypes.CDLL("libcuda.so.1")


def error_name(rc):
    name = ctypes.c_char_p()
    cuda.cuGetErrorName(rc, ctypes.byref(name))
    return name.value.decode() if name.value else "CUDA error %d" % rc


def check(call, rc):
    if rc != 0:
        print(json.dumps({"error": "%s: %s" % (call, error_name(rc))}))
        sys.exit(1)


check("cuInit", cuda.cuInit(0))
dev = ctypes.c_int()
check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))

device_sms = ctypes.c_int()
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
check("cuDeviceGetAttribute", cuda.cuDeviceGetAttribute(ctypes.byref(device_sms), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))


class ExecAffinity(ctypes.Structure):
    # CUexecAffinityParam: the type, then a union whose SM-count member is
    # one unsigned int.
    _fields_ = [("type", ctypes.c_int), ("sm_count", ctypes.c_uint)]


affinity = ExecAffinity()
CU_EXEC_AFFINITY_TYPE_SM_COUNT = 0
rc = cuda.cuCtxGetExecAffinity(ctypes.byref(affinity), CU_EXEC_AFFINITY_TYPE_SM_COUNT)
sm_count = affinity.sm_count if rc == 0 else -1

ptr = ctypes.c_uint64()
rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(os.environ["ALLOC_MIB"]) << 20))
alloc = "ok" if rc == 0 else error_name(rc)
if rc == 0:
    cuda.cuMemFree_v2(ptr)
cuda.cuDevicePrimaryCtxRelease_v2(dev)
print(json.dumps({"alloc": alloc, "smCount": sm_count, "deviceSMs": device_sms.value}))
