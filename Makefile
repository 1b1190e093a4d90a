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

test: ## every test, with what they need installed: the README's test command, which CI runs
	bash hack/test-all.sh

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

# Throughput ratios that survive a noisy machine: the test cases of RATIOS
# interleaved over ROUNDS rounds, one process per run, each ratio's median
# and spread, with the machine's load during every run (test/perf/ratios).
WORKLOAD ?= 5000Nodes
ROUNDS ?= 5
RATIOS ?=
bench-ratios: bin/etcd bin/perf.test ## the headline throughput ratios of docs/benchmarks.md
	$(GO) run ./test/perf/ratios -binary bin/perf.test -workload $(WORKLOAD) -rounds $(ROUNDS) $(if $(RATIOS),-ratios $(RATIOS))

bench-ratios-smoke: bin/etcd bin/perf.test ## bench-ratios at 100 nodes, two rounds: that it produces its table
	$(GO) run ./test/perf/ratios -binary bin/perf.test -workload 100Nodes -rounds 2

.PHONY: bench-ratios bench-ratios-smoke bin/perf.test
bin/perf.test: ## test/perf's benchmark binary (the go command rebuilds only what changed)
	$(GO) test -c -tags perf -o bin/perf.test ./test/perf

bin/etcd: ## etcd for scheduler_perf, from the module's own etcd version
	$(GO) build -o bin/etcd go.etcd.io/etcd/server/v3

fuzz: ## each fuzz target for 30s; new findings land in the Go cache, add them to testdata/fuzz
	for t in gpu:FuzzDemandFromPod gpu:FuzzParseAssignment gpu:FuzzInventoryFromNode \
		extender:FuzzFilterRequest extender:FuzzDecodeArgs \
		telemetry/prometheus:FuzzParse simulator:FuzzLoadTelemetry \
		agent/nri:FuzzNRIDecide agent/nri:FuzzNRIConfine; do \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime 30s ./pkg/$${t%%:*}/ || exit 1; \
	done

.PHONY: demo playground playground-kueue kueue tools image agent-image

demo: ## the playground's demo: places a sample GPU workload on simulated nodes and prints every placement
	$(GO) run ./cmd/gpusched-playground --demo

playground: ## a local control plane with simulated GPU nodes and gpusched, for kubectl (docs/playground.md)
	$(GO) run ./cmd/gpusched-playground

kueue: ## Kueue's manager, CRDs and webhooks built from its Go module into bin/kueue-<version>/
	bash hack/install-kueue.sh

playground-kueue: ## the playground with Kueue admitting and gpusched placing (docs/quotas.md)
	$(GO) run "$$(bash hack/version-ldflags.sh)" ./cmd/gpusched-playground --kueue "$$(bash hack/install-kueue.sh)"

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

# The policy service's generated code (docs/policy-service.md): Go in
# pkg/policyservice/v1alpha1, Python in python/gpusched_policy. Needs protoc
# (Debian's protobuf-compiler); the Go plugins are installed into bin/ at the
# versions pinned here.
PROTOC_GEN_GO_VERSION ?= v1.36.11
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.0
.PHONY: proto
proto: bin/protoc-gen-go bin/protoc-gen-go-grpc ## regenerate the policy service's Go and Python code from proto/
	protoc -I proto --plugin=protoc-gen-go=bin/protoc-gen-go --plugin=protoc-gen-go-grpc=bin/protoc-gen-go-grpc \
		--go_out=. --go_opt=module=github.com/gpusched/gpusched \
		--go-grpc_out=. --go-grpc_opt=module=github.com/gpusched/gpusched \
		proto/gpusched/policy/v1alpha1/policy.proto
	protoc -I proto/gpusched/policy/v1alpha1 --python_out=python/gpusched_policy policy.proto

bin/protoc-gen-go:
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

bin/protoc-gen-go-grpc:
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
