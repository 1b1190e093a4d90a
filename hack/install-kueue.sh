#!/usr/bin/env bash
# Installs Kueue for the playground's --kueue and its tests into
# bin/kueue-<version>/: the manager built from Kueue's Go module (never a
# prebuilt download, and never an import of gpusched's module), its CRDs
# (crd/) and its webhook configurations (webhook/manifests.yaml), both from
# the same module version. Idempotent: skipped when the binary is there and
# was built from that version.
#
#   bash hack/install-kueue.sh        # prints the directory
#   gpusched-playground --kueue "$(bash hack/install-kueue.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
mod=sigs.k8s.io/kueue
dest="$PWD/bin/kueue-$KUEUE_VERSION"

have="$(go version -m "$dest/kueue" 2>/dev/null | awk -v m="$mod" '$1 == "mod" && $2 == m {print $3}')" || true
if [ "$have" != "$KUEUE_VERSION" ] || [ ! -f "$dest/webhook/manifests.yaml" ]; then
  echo "install-kueue.sh: building Kueue $KUEUE_VERSION into $dest" >&2
  mkdir -p "$dest/crd" "$dest/webhook"
  GOBIN="$dest" GOFLAGS="-buildvcs=false" GOTOOLCHAIN=local go install "$mod/cmd/kueue@$KUEUE_VERSION" >&2
  # The module's source, for its manifests: outside any module, so that
  # gpusched's go.mod is left alone.
  tmp="$(mktemp -d)"
  src="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod@$KUEUE_VERSION" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  rmdir "$tmp"
  cp "$src"/config/components/crd/bases/*.yaml "$dest/crd/"
  cp "$src/config/components/webhook/manifests.yaml" "$dest/webhook/manifests.yaml"
  chmod -R u+w "$dest"
fi

# Kueue's manager without its internal certificate management (the
# playground has no Service for it to name) reads a metrics serving
# certificate from this fixed path at start, even with metrics off, and
# exits without one. The playground turns metrics off, so a self-signed
# placeholder does; it needs root once.
metrics_certs=/etc/kueue/metrics/certs
if [ ! -f "$metrics_certs/tls.crt" ]; then
  if [ "$(id -u)" = 0 ]; then
    go run ./cmd/gpusched-extender certificates --dir "$metrics_certs" --server-name 127.0.0.1
    # Kueue runs as whoever runs the playground; the placeholder guards
    # nothing (metrics are off).
    chmod -R a+rX /etc/kueue
  else
    echo "install-kueue.sh: Kueue needs a certificate in $metrics_certs even with its metrics off; run this script once as root to write a placeholder" >&2
  fi
fi
echo "$dest"
