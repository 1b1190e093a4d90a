# gpusched's images, from one Dockerfile:
#
#   docker build -t registry.example/gpusched:0.1.0 .                        # the scheduler (the default)
#   docker build --target agent -t registry.example/gpusched-agent:0.1.0 .   # the node agent
#
# KUBE_VERSION is the Kubernetes release the scheduler is built from (go.mod);
# it is what the scheduler reports as its version.

# The node agent is built with cgo on glibc. go-nvml reaches the driver's
# libnvidia-ml.so.1 with dlopen, which is C: with CGO_ENABLED=0 go-nvml does
# not even compile. So it cannot be a static binary, and it runs on a
# base with the glibc it was linked against: the build stage is Debian 12
# (bookworm), like distroless/base-debian12, because a binary linked on a
# newer glibc may ask for symbol versions an older one lacks. The library
# itself is not in the image: the NVIDIA container runtime mounts the host's
# (docs/node-agent.md). The agent runs as root, to reach the runtime's NRI
# socket and the kubelet's device-plugin directory.
FROM golang:1.26-bookworm AS build-agent
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -buildvcs=false -ldflags "-s -w" \
      -o /out/gpusched-agent ./cmd/gpusched-agent

FROM gcr.io/distroless/base-debian12 AS agent
COPY --from=build-agent /out/gpusched-agent /gpusched-agent
ENTRYPOINT ["/gpusched-agent"]

# The scheduler: a static binary on distroless, as a non-root user. It is the
# last stage, so a build without --target makes it.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
ARG KUBE_VERSION=v1.37.1
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
      -o /out/gpusched ./cmd/gpusched

FROM gcr.io/distroless/static-debian12:nonroot AS scheduler
COPY --from=build /out/gpusched /gpusched
USER 65532:65532
ENTRYPOINT ["/gpusched"]
