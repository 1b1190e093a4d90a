#!/usr/bin/env bash
# Installs what internal/critest needs to run a real containerd in tests:
# containerd, ctr and containerd-shim-runc-v2 (built from the Go module proxy
# into bin/) and runc (Debian's package). Idempotent: each step is skipped
# when what it installs is already there at the right version. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.2.9}"
BIN="$PWD/bin"
mod=github.com/containerd/containerd/v2

# containerd's own binaries. btrfs needs C headers that Debian does not
# install by default and the tests never use it: build without it.
need_build=0
for b in containerd ctr containerd-shim-runc-v2; do
  [ -x "$BIN/$b" ] || need_build=1
done
if [ "$need_build" = 0 ]; then
  # The module version each binary was built from ("mod <path> <version> <sum>").
  for b in containerd ctr containerd-shim-runc-v2; do
    have="$(go version -m "$BIN/$b" 2>/dev/null | awk -v m="$mod" '$1 == "mod" && $2 == m {print $3}')"
    [ "$have" = "$CONTAINERD_VERSION" ] || need_build=1
  done
fi
if [ "$need_build" = 1 ]; then
  echo "containerd.sh: building containerd $CONTAINERD_VERSION into $BIN"
  GOBIN="$BIN" GOFLAGS="-buildvcs=false -tags=no_btrfs" GOTOOLCHAIN=local go install \
    "$mod/cmd/containerd@$CONTAINERD_VERSION" \
    "$mod/cmd/ctr@$CONTAINERD_VERSION" \
    "$mod/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
fi

# runc from Debian.
if ! command -v runc >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runc >/dev/null
fi

"$BIN/containerd" --version
runc --version | head -1
