# Everything here is a thin wrapper over the go command; `go test ./...` alone
# runs every test.
GO ?= go

.PHONY: build test vet bench bench-engine bench-scheduler fuzz

build: ## the scheduler, extender and kubectl plugin binaries in bin/
	$(GO) build -o bin/gpusched ./cmd/gpusched
	$(GO) build -o bin/gpusched-extender ./cmd/gpusched-extender
	$(GO) build -o bin/kubectl-gpusched ./cmd/kubectl-gpusched

VERSION ?= v0.0.0-dev
BASE_URL ?= https://github.com/gpusched/gpusched/releases/download
.PHONY: krew
krew: ## kubectl-gpusched archives per platform and their krew manifest in bin/krew/
	deploy/krew/release.sh $(VERSION) $(BASE_URL)

test: ## every test: engine, plugins, and end to end against a real API server
	$(GO) test -timeout 30m ./...

vet:
	$(GO) vet ./...

bench: bench-engine bench-scheduler ## every benchmark in docs/benchmarks.md

bench-engine: ## engine benchmarks: Fit + Score per node, ledger rebuild
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/gpu/

# scheduler_perf workloads (test/perf/performance-config.yaml); LABELS=short
# for a quick run of every workload on 10 nodes. Results: test/perf/*.json.
LABELS ?= performance
bench-scheduler: bin/etcd
	cd test/perf && PATH=$(CURDIR)/bin:$$PATH $(GO) test -tags perf -run '^$$' -bench BenchmarkPerfScheduling \
		-benchtime 1x -timeout 120m . -args -perf-scheduling-label-filter=$(LABELS)

bin/etcd: ## etcd for scheduler_perf, from the module's own etcd version
	$(GO) build -o bin/etcd go.etcd.io/etcd/server/v3

fuzz: ## each fuzz target for 30s; new findings land in the Go cache, add them to testdata/fuzz
	for t in gpu:FuzzDemandFromPod gpu:FuzzParseAssignment gpu:FuzzInventoryFromNode \
		extender:FuzzFilterRequest extender:FuzzDecodeArgs \
		telemetry/prometheus:FuzzParse simulator:FuzzLoadTelemetry; do \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime 30s ./pkg/$${t%%:*}/ || exit 1; \
	done

.PHONY: demo playground tools image agent-image

demo: ## the playground's demo: places a sample GPU workload on simulated nodes and prints every placement
	$(GO) run ./cmd/gpusched-playground --demo

playground: ## a local control plane with simulated GPU nodes and gpusched, for kubectl (docs/playground.md)
	$(GO) run ./cmd/gpusched-playground

HELM_VERSION ?= v3.22.0
tools: bin/helm ## helm, which the chart test needs (as .ci/run installs it)

bin/helm:
	GOBIN=$(CURDIR)/bin $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

IMAGE ?= gpusched:dev
AGENT_IMAGE ?= gpusched-agent:dev
image: ## the scheduler's container image (Dockerfile)
	docker build -t $(IMAGE) .

agent-image: ## the node agent's container image (Dockerfile, target agent: built with cgo for NVML)
	docker build --target agent -t $(AGENT_IMAGE) .
