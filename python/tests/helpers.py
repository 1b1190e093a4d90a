"""Shared test fixtures: the gpusched binary and a small trace."""

import os
import random
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)

_binary = None


def gpusched_binary():
    """$GPUSCHED_BIN, else gpusched built once from the repository into a
    temporary directory (a minute or more the first time)."""
    global _binary
    if os.environ.get("GPUSCHED_BIN"):
        return os.environ["GPUSCHED_BIN"]
    if _binary is None:
        out = os.path.join(tempfile.mkdtemp(prefix="gpusched-test-"), "gpusched")
        subprocess.run(["go", "build", "-o", out, "./cmd/gpusched"], cwd=REPO, check=True)
        _binary = out
    return _binary


# The cluster: four T4 nodes of 2 GPUs and 32 CPUs, two V100 nodes of 8 GPUs
# and 96 CPUs.
NODES = [("t4-%d" % i, 32000, 131072, 2, "T4") for i in range(4)] + \
        [("v100-%d" % i, 96000, 393216, 8, "V100") for i in range(2)]


def write_trace(directory, pods=40, seed=1):
    """Writes nodes.csv and pods.csv (the Alibaba trace's format) into
    directory and returns their paths. Every fifth pod asks for V100s, which
    the T4 nodes cannot take."""
    rng = random.Random(seed)
    nodes_csv = os.path.join(directory, "nodes.csv")
    with open(nodes_csv, "w") as f:
        f.write("sn,cpu_milli,memory_mib,gpu,model\n")
        for row in NODES:
            f.write(",".join(map(str, row)) + "\n")
    pods_csv = os.path.join(directory, "pods.csv")
    with open(pods_csv, "w") as f:
        f.write("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n")
        for i in range(pods):
            gpus, milli = rng.choice([(1, 1000), (1, 500), (1, 250), (2, 1000), (0, 0), (4, 1000)])
            spec = "V100" if i % 5 == 0 else ""
            created = 10 * i
            deleted = created + rng.randint(50, 400)
            f.write(f"pod-{i:03d},{rng.choice([2000, 4000, 8000])},{rng.choice([4096, 16384])},{gpus},{milli},{spec},LS,Running,"
                    f"{created},{deleted},{created}\n")
    return nodes_csv, pods_csv


class TraceTestCase(unittest.TestCase):
    """A test case with the gpusched binary (cls.binary) and a small trace
    (cls.nodes, cls.pods) written once for the class; trace_pods and
    trace_seed choose the trace."""

    trace_pods, trace_seed = 40, 1

    @classmethod
    def setUpClass(cls):
        cls.binary = gpusched_binary()
        cls.dir = tempfile.TemporaryDirectory()
        cls.nodes, cls.pods = write_trace(cls.dir.name, pods=cls.trace_pods, seed=cls.trace_seed)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()
