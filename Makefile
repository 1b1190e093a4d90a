# Everything here is a thin wrapper over the go command; `go test ./...` alone
# runs every test.
GO ?= go

.PHONY: build test vet bench fuzz

build: ## the gpusched scheduler binary in bin/
	$(GO) build -o bin/gpusched ./cmd/gpusched

test: ## every test: engine, plugins, and end to end against a real API server
	$(GO) test ./...

vet:
	$(GO) vet ./...

bench: ## engine benchmarks (see docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/gpu/

fuzz: ## each fuzz target for 30s; new findings land in the Go cache, add them to testdata/fuzz
	for f in FuzzDemandFromPod FuzzParseAssignment FuzzInventoryFromNode; do \
		$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime 30s ./pkg/gpu/ || exit 1; \
	done
