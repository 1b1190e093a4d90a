#!/usr/bin/env bash
# Builds kubectl-gpusched for each platform krew serves and writes the krew
# manifest with every archive's URL and sha256 (see gpusched.yaml.in).
# Usage: deploy/krew/release.sh VERSION BASE_URL (PLATFORMS="linux/amd64 ..." to build fewer)
set -euo pipefail
version=${1:?version, e.g. v0.3.0}
base=${2:?base URL the archives will be served from}
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/bin/krew"
rm -rf "$out" && mkdir -p "$out"
platforms=""
for target in ${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64}; do
  os=${target%/*} arch=${target#*/}
  bin=kubectl-gpusched
  [ "$os" = windows ] && bin=kubectl-gpusched.exe
  dir=$(mktemp -d)
  (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -ldflags "-s -w" -o "$dir/$bin" ./cmd/kubectl-gpusched)
  cp "$root/LICENSE" "$dir/" 2>/dev/null || true
  archive="kubectl-gpusched_${os}_${arch}.tar.gz"
  tar -C "$dir" -czf "$out/$archive" .
  rm -rf "$dir"
  sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)
  platforms+="  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $base/$version/$archive
    sha256: $sha
    bin: $bin
"
done
awk -v v="$version" -v p="$platforms" '/^#/ {next} {gsub("@VERSION@", v); if ($0 == "@PLATFORMS@") {printf "%s", p} else print}' \
  "$root/deploy/krew/gpusched.yaml.in" > "$out/gpusched.yaml"
echo "wrote $out/gpusched.yaml"
