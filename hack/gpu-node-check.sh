#!/usr/bin/env bash
# Checks gpusched's node agent on a machine with an NVIDIA GPU and driver:
# what its discovery publishes there, and what real containers started
# through containerd and runc, with the agent as their required NRI plugin
# (cdi mode), can open of the GPU (test/runtime's
# TestContainersOpenExactlyTheirGPUs with GPUSCHED_REAL_GPU=1); and, when the
# driver has MPS, whether a share's MPS limits hold (TestMPSShareLimits, with
# python3 for its CUDA client).
#
#   hack/gpu-node-check.sh build DIR    # here: binaries into DIR (needs Go, gcc, runc)
#   hack/gpu-node-check.sh run DIR OUT  # on the GPU machine, as root; results in OUT
#
# The GPU machine needs no Go: DIR holds the agent, the test binary,
# containerd (.ci/containerd.sh's version), runc and libseccomp. It needs
# the driver's libnvidia-ml.so.1, /dev/nvidia*, cgroup v2 (or v1) and
# overlayfs (else the native snapshotter is used). docs/node-agent.md
# records a run.
set -uo pipefail
cd "$(dirname "$0")/.."

build() {
  local d="$1" ver
  set -e
  mkdir -p "$d/lib"
  ver="$(sed -n 's/^CONTAINERD_VERSION="${CONTAINERD_VERSION:-\(.*\)}"$/\1/p' .ci/containerd.sh)"
  GOBIN="$(cd "$d" && pwd)" GOFLAGS="-buildvcs=false -tags=no_btrfs" go install -ldflags="-s -w" \
    "github.com/containerd/containerd/v2/cmd/containerd@$ver" \
    "github.com/containerd/containerd/v2/cmd/ctr@$ver" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$ver"
  cp "$(command -v runc)" "$d/"
  cp "$(ldd "$(command -v runc)" | awk '/libseccomp/{print $3}')" "$d/lib/libseccomp.so.2"
  go build -trimpath -ldflags="-s -w" -o "$d/gpusched-agent" ./cmd/gpusched-agent
  go test -c -trimpath -ldflags="-s -w" -o "$d/runtime.test" ./test/runtime
  (cd test/runtime/gpuprobe && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$d/gpuprobe" .)
  (cd internal/critest/sleeper && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$d/pause" .)
}

run() {
  local d out nvml
  d="$(cd "$1" && pwd)"; out="$2"; mkdir -p "$out"
  uname -a; head -2 /etc/os-release
  nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv
  ls -la /dev/nvidia*
  nvml="$(ldconfig -p | awk '/libnvidia-ml.so.1 /{print $NF; exit}')"
  [ -n "$nvml" ] || nvml="$(find /usr/local/nvidia /usr/lib /usr/lib64 -name libnvidia-ml.so.1 2>/dev/null | head -1)"
  export LD_LIBRARY_PATH="$(dirname "${nvml:-/nonexistent/x}"):$d/lib:${LD_LIBRARY_PATH:-}"
  "$d/gpusched-agent" inventory | tee "$out/inventory.txt"
  "$d/gpusched-agent" inventory -o json > "$out/inventory.json"
  mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
  grep -q overlay /proc/filesystems || export CRITEST_SNAPSHOTTER=native
  export CRITEST_BIN_DIR="$d" CRITEST_SLEEPER="$d/pause" GPUSCHED_GPU_PROBE="$d/gpuprobe" PATH="$d:$PATH"
  # An MPS control daemon for TestMPSShareLimits, when the driver has one.
  if command -v nvidia-cuda-mps-control >/dev/null; then
    export GPUSCHED_MPS_PIPE_DIR=/tmp/gpusched-mps/pipe
    mkdir -p "$GPUSCHED_MPS_PIPE_DIR" /tmp/gpusched-mps/log
    CUDA_MPS_PIPE_DIRECTORY="$GPUSCHED_MPS_PIPE_DIR" CUDA_MPS_LOG_DIRECTORY=/tmp/gpusched-mps/log nvidia-cuda-mps-control -d
  fi
  local rc=0
  (cd test/runtime && GPUSCHED_REAL_GPU=1 timeout 300 "$d/runtime.test" -test.run 'TestContainersOpenExactlyTheirGPUs|TestMPSShareLimits' -test.v -test.count=1) > "$out/real-gpu.log" 2>&1 || rc=1
  grep -E '^(---|    ---|PASS|FAIL)|probe in|refused:|MPS client|SKIP' "$out/real-gpu.log"
  if [ -n "${GPUSCHED_MPS_PIPE_DIR:-}" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$GPUSCHED_MPS_PIPE_DIR" nvidia-cuda-mps-control
    cp /tmp/gpusched-mps/log/control.log "$out/mps-control.log" 2>/dev/null
    cp /tmp/gpusched-mps/log/server.log "$out/mps-server.log" 2>/dev/null
    unset GPUSCHED_MPS_PIPE_DIR
  fi
  (cd test/runtime && timeout 300 "$d/runtime.test" -test.v -test.count=1) > "$out/mock-gpus.log" 2>&1 || rc=1
  grep -E '^(---|    ---|PASS|FAIL)' "$out/mock-gpus.log"
  echo "gpu-node-check: rc=$rc"
  return $rc
}

case "${1:-}" in
  build) build "${2:?build DIR}" ;;
  run) run "${2:?run DIR OUT}" "${3:?run DIR OUT}" ;;
  *) echo "usage: $0 build DIR | run DIR OUT" >&2; exit 2 ;;
esac
