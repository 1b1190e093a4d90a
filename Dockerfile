# The gpusched scheduler's image: a static binary on distroless, as a
# non-root user.
#
#   docker build -t registry.example/gpusched:0.1.0 .
#
# KUBE_VERSION is the Kubernetes release the scheduler is built from (go.mod);
# it is what the scheduler reports as its version.

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

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gpusched /gpusched
USER 65532:65532
ENTRYPOINT ["/gpusched"]
