#!/usr/bin/env bash
# Every test of the repository, with what the tests need installed first:
#
#   bash hack/test-all.sh
#
# It installs what is missing: helm and Kueue into bin/ (from the Go module
# proxy);
# as root on Debian, also Chromium (the simulator's report and the
# dashboard render in it), Prometheus (the telemetry test), the policy
# service's Python packages, and containerd with runc (the node agent's
# runtime tests, .ci/containerd.sh). Without root it names what is missing
# and runs the rest; the tests that need a missing tool skip, unless CI is
# set, which makes each a failure. Then it runs `go test ./...`, the
# Python package's tests, which drive bin/gpusched, and the throughput
# ratios at 100 nodes (make bench-ratios-smoke).
set -euo pipefail
cd "$(dirname "$0")/.."

go version
go mod download

# helm for the chart's lint and render tests (test/e2e finds bin/helm).
GOBIN="$PWD/bin" go install helm.sh/helm/v3/cmd/helm@v3.22.0

# Kueue's manager, CRDs and webhooks, built from its Go module into
# bin/kueue-<version>/ (cached), for the playground's Kueue test.
GPUSCHED_KUEUE_DIR="$(bash hack/install-kueue.sh)"
export GPUSCHED_KUEUE_DIR

root=0
[ "$(id -u)" = 0 ] && root=1

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v prometheus >/dev/null || missing+=(prometheus)
for pkg in python3-numpy python3-grpcio python3-protobuf; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$root" = 1 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "test-all: not root, so not installing ${missing[*]}; as root: apt-get install --no-install-recommends ${missing[*]}" >&2
  fi
fi

# A real containerd (built from its Go module into bin/) and Debian's runc,
# which test/runtime drives through CRI with the node agent as its NRI
# plugin. They run as root only.
if [ "$root" = 1 ]; then
  bash .ci/containerd.sh
else
  echo "test-all: not root, so the node agent's runtime tests (test/runtime) skip" >&2
fi

# Binaries built with go build or go test report the API server version
# "v0.0.0-master+$Format:%H$", which Kueue's manager refuses: link the tests
# with the version of k8s.io/kubernetes they run, as Kubernetes' own builds
# do (link only: compiled packages stay cached).
GOFLAGS="${GOFLAGS:+$GOFLAGS }$(bash hack/version-ldflags.sh)"
export GOFLAGS

go test -timeout 30m ./...
go build -o bin/gpusched ./cmd/gpusched
(cd python && GPUSCHED_BIN="$PWD/../bin/gpusched" /usr/bin/python3 -m unittest discover)

# The scheduler_perf ratios command at 100 nodes, twice each test case
# interleaved: a smoke test that it runs the benchmark and prints its table.
# The measurement itself (5000 nodes, 5 rounds) is make bench-ratios.
make -s bench-ratios-smoke
