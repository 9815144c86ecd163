# The two commands: `make demo` runs the example service on the embedded
# in-memory store; `make test` checks formatting, vets, checks that the
# generated code matches its annotations, and runs every test under -race
# against throwaway PostgreSQL and Redis servers (scripts/with-services.sh).

GO ?= go
PKGS := ./...

.PHONY: demo test generate check fmt-check vet staticcheck lint fuzz bench stress \
	demo-grpc demo-consumer test-nested

# Nested modules: each has its own go.mod, so that grpc-go and NATS stay out
# of the dependencies of a service that only uses the core runtime. ./...
# in the root module does not reach them; the targets below loop over them.
NESTED := runtime/idemgrpc examples/grpcapi examples/consumer

demo:
	$(GO) run ./examples/orders

test: fmt-check vet staticcheck check
	scripts/with-services.sh $(GO) test -race -count=1 -timeout 12m $(PKGS)
	$(MAKE) test-nested

# vet and test every nested module under -race, against the same throwaway
# PostgreSQL and Redis servers (the gRPC tests run on pgstore and redisstore).
test-nested:
	scripts/with-services.sh sh -c 'set -e; for d in $(NESTED); do \
		echo "== $$d"; (cd $$d && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 8m ./...); done'

# checkout (gRPC service A) calls payments (B) through idemgrpc.
demo-grpc:
	cd examples/grpcapi && $(GO) run .

# a JetStream consumer (in-process nats-server), with and without idemgen.
demo-consumer:
	cd examples/consumer && $(GO) run .

generate:
	$(GO) generate ./examples/...

# Fails when a committed idem_gen.go is stale or missing.
check:
	$(GO) run ./cmd/idemgen -check ./examples/...
	cd examples/grpcapi && $(GO) tool idemgen -check ./...
	cd examples/consumer && $(GO) tool idemgen -check ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^testdata/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# staticcheck runs in every `make test`; golangci-lint (slower to build) in
# `make lint`. Both are pinned as tool directives in tools/go.mod.
staticcheck:
	$(GO) tool -modfile=tools/go.mod staticcheck $(PKGS)
	for d in $(NESTED); do (cd $$d && $(GO) tool -modfile=$(CURDIR)/tools/go.mod staticcheck ./...) || exit 1; done

lint: staticcheck
	$(GO) tool -modfile=tools/go.mod golangci-lint run $(PKGS)

fuzz:
	$(GO) test ./annotations -run '^$$' -fuzz=FuzzParse -fuzztime=60s

bench:
	scripts/with-services.sh sh -c '$(GO) run ./internal/cmd/bench && cd bench && $(GO) run ./cmd/peers'

# The duplicate storm with faults, full size, on every store.
stress:
	scripts/with-services.sh $(GO) run ./internal/cmd/stress
