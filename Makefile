# The two commands: `make demo` runs the example service on the embedded
# in-memory store; `make test` checks formatting, vets, checks that the
# generated code matches its annotations, and runs every test under -race
# against throwaway PostgreSQL and Redis servers (scripts/with-services.sh).

GO ?= go
PKGS := ./...

.PHONY: demo test generate check fmt-check vet staticcheck lint fuzz bench stress

demo:
	$(GO) run ./examples/orders

test: fmt-check vet staticcheck check
	scripts/with-services.sh $(GO) test -race -count=1 -timeout 12m $(PKGS)

generate:
	$(GO) generate ./examples/... ./internal/benchcmp/...

# Fails when a committed generated file is stale, missing or extra, and
# prints the unified diff of what `make generate` would change.
check:
	$(GO) run ./cmd/idemgen -check -diff ./examples/... ./internal/benchcmp/...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^testdata/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# staticcheck runs in every `make test`; golangci-lint (slower to build) in
# `make lint`. Both are pinned as tool directives in tools/go.mod.
staticcheck:
	$(GO) tool -modfile=tools/go.mod staticcheck $(PKGS)

lint: staticcheck
	$(GO) tool -modfile=tools/go.mod golangci-lint run $(PKGS)

# FuzzGenerate maps seeds to random service packages (the grammar of
# internal/generate/generative_test.go) and checks that each generates and
# type-checks or is refused at a position; make test runs a fixed number of
# its seeds (TestGenerative).
fuzz:
	$(GO) test ./annotations -run '^$$' -fuzz=FuzzParse -fuzztime=60s
	$(GO) test ./internal/generate -run '^$$' -fuzz=FuzzGenerate -fuzztime=60s

# Benchmarks run on a durable PostgreSQL server (fsync, synchronous_commit
# and full_page_writes on, as in production); the tests keep the fast one.
bench:
	IDEM_PG_DURABLE=1 scripts/with-services.sh sh -c '$(GO) run ./internal/cmd/bench && cd bench && $(GO) run ./cmd/peers'

# The duplicate storm with faults, full size, on every store.
stress:
	scripts/with-services.sh $(GO) run ./internal/cmd/stress
