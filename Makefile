# wahook: see README.md. Every target works on a fresh Debian machine.

GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: build test run lint fuzz bench clean

build: ## build bin/wahook
	$(GO) build -o bin/wahook ./cmd/wahook

test: ## the full test suite (installs what it needs), as CI runs it
	./scripts/test.sh

run: ## run the whole system on this machine (embedded JetStream)
	./scripts/run.sh

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

fuzz: ## fuzz every fuzz target of the module, FUZZTIME each (default 30s)
	./scripts/fuzz.sh

bench: ## loopback throughput and latency, as ratios to a bare Fiber handler
	./scripts/bench.sh

clean: ## remove build output and the local data directory
	rm -rf bin data
