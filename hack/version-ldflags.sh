#!/usr/bin/env bash
# Prints the -ldflags that make binaries and tests built here report the
# version of the k8s.io/kubernetes module in go.mod as the in-process API
# server's version (k8s.io/component-base/version), as Kubernetes' release
# builds do; without it they report "v0.0.0-master+$Format:%H$", which
# Kueue's manager refuses. For GOFLAGS or go build's -ldflags.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "-ldflags=-X=k8s.io/component-base/version.gitVersion=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
