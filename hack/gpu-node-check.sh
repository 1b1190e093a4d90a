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
usage() { echo "usage: $0 build DIR | run DIR OUT" >&2; exit 2; }
# DIR and OUT are the caller's, made absolute before the cd into the
# repository; abs creates the directory when mkdir is given.
abs() {
  if [ "${2:-}" = mkdir ]; then mkdir -p -- "$1" || exit 2; fi
  (CDPATH='' cd -- "$1" >/dev/null && pwd) || { echo "gpu-node-check: no directory $1" >&2; exit 2; }
}

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
  # A dynamically linked runc (Debian's) needs its libseccomp; a static one
  # (runc's own releases) needs nothing.
  local seccomp
  seccomp="$(ldd "$(command -v runc)" 2>/dev/null | awk '/libseccomp/{print $3}')"
  [ -z "$seccomp" ] || cp "$seccomp" "$d/lib/libseccomp.so.2"
  go build -trimpath -ldflags="-s -w" -o "$d/gpusched-agent" ./cmd/gpusched-agent
  go test -c -trimpath -ldflags="-s -w" -o "$d/runtime.test" ./test/runtime
  (cd test/runtime/gpuprobe && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$d/gpuprobe" .)
  (cd internal/critest/sleeper && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$d/pause" .)
}

run() {
  local d="$1" out="$2" nvml rc=0
  uname -a; head -2 /etc/os-release
  nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv
  ls -la /dev/nvidia*
  nvml="$(ldconfig -p | awk '/libnvidia-ml.so.1 /{print $NF; exit}')"
  [ -n "$nvml" ] || nvml="$(find /usr/local/nvidia /usr/lib /usr/lib64 -name libnvidia-ml.so.1 2>/dev/null | head -1)"
  export LD_LIBRARY_PATH="$(dirname "${nvml:-/nonexistent/x}"):$d/lib:${LD_LIBRARY_PATH:-}"
  "$d/gpusched-agent" inventory | tee "$out/inventory.txt" || rc=1
  "$d/gpusched-agent" inventory -o json > "$out/inventory.json" || rc=1
  mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
  grep -q overlay /proc/filesystems || export CRITEST_SNAPSHOTTER=native
  export CRITEST_BIN_DIR="$d" CRITEST_SLEEPER="$d/pause" GPUSCHED_GPU_PROBE="$d/gpuprobe" PATH="$d:$PATH"
  # An MPS control daemon for TestMPSShareLimits, when the driver has one;
  # told to quit however the script ends.
  if command -v nvidia-cuda-mps-control >/dev/null; then
    local pipe=/tmp/gpusched-mps/pipe
    mkdir -p "$pipe" /tmp/gpusched-mps/log
    if CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY=/tmp/gpusched-mps/log nvidia-cuda-mps-control -d; then
      export GPUSCHED_MPS_PIPE_DIR="$pipe"
      trap 'echo quit | CUDA_MPS_PIPE_DIRECTORY=/tmp/gpusched-mps/pipe nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
    else
      echo "gpu-node-check: the MPS control daemon did not start; TestMPSShareLimits skips" >&2
      rc=1
    fi
  fi
  (cd test/runtime && GPUSCHED_REAL_GPU=1 timeout 300 "$d/runtime.test" -test.run 'TestContainersOpenExactlyTheirGPUs|TestMPSShareLimits' -test.v -test.count=1) > "$out/real-gpu.log" 2>&1 || rc=1
  grep -E '^(---|    ---|PASS|FAIL)|probe in|refused:|MPS client|SKIP' "$out/real-gpu.log"
  if [ -n "${GPUSCHED_MPS_PIPE_DIR:-}" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$GPUSCHED_MPS_PIPE_DIR" nvidia-cuda-mps-control
    trap - EXIT
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
  build)
    [ $# -eq 2 ] || usage
    dir="$(abs "$2" mkdir)" || exit 2
    cd "$(dirname "$0")/.." && build "$dir" ;;
  run)
    [ $# -eq 3 ] || usage
    dir="$(abs "$2")" || exit 2
    out="$(abs "$3" mkdir)" || exit 2
    cd "$(dirname "$0")/.." && run "$dir" "$out" ;;
  *) usage ;;
esac
