# The two commands: `make demo` runs the example service on the embedded
# in-memory store; `make test` checks formatting, vets, checks that the
# generated code matches its annotations, and runs every test under -race
# against throwaway PostgreSQL, Redis and MariaDB servers
# (scripts/with-services.sh).

GO ?= go
PKGS := ./...
# Nested Go modules: each has its own go.mod, so that the SQLite driver, the
# migration tools (goose, golang-migrate: runtime/pgstore/migrationtest,
# runtime/mysqlstore/migrationtest),
# OpenTelemetry, grpc-go, NATS and the web frameworks (gin, echo, Fiber:
# runtime/idemgin, idemecho, idemfiber) stay out of the dependencies of a service
# that only uses the core runtime. ./... in the root module does not reach
# them; the targets below loop over them.
NESTED := runtime/sqlitestore runtime/pgstore/migrationtest runtime/mysqlstore/migrationtest runtime/idemotel runtime/idemgrpc runtime/idemgin runtime/idemecho runtime/idemfiber cmd/idemgateway examples/grpcapi examples/consumer examples/shop examples/gateway

.PHONY: test-rules demo test generate check fmt-check vet modules-listed staticcheck go-floor lint idemvet test-golangci fuzz fingerprint-gen bench bench-idemvet bench-growth stress failover sim soak-gateway \
	demo-grpc demo-consumer demo-gateway test-nested nested

demo:
	$(GO) run ./examples/orders

# The allocation pins (files built with !race): runtime/idem's, pgstore's and
# runtime/idemfiber's (a nested module).
ALLOC_TESTS := ^(TestAllocs|TestColdReplayStatements|TestRawRowMatchesScan)

# The simulator's short run is 10^4 schedules without the race detector
# (seconds); under -race, in the full run, it runs 10^3. Its stuck-schedule
# test runs without -race too (a goroutine that never yields the baton
# cannot be synchronized with). The allocation
# pins (runtime/idem and runtime/pgstore allocs_test.go) run without -race:
# the race detector drops sync.Pool values at random.
test: fmt-check vet staticcheck go-floor check test-rules
	$(GO) test -tags idemmutant -count=1 -run '^(TestSchedules|TestStuckSchedulesReported)$$' ./internal/sim/
	scripts/with-services.sh sh -c '$(GO) test -count=1 -run "$(ALLOC_TESTS)" ./runtime/idem/ ./runtime/pgstore/ && \
		(cd runtime/idemfiber && $(GO) test -count=1 -run "$(ALLOC_TESTS)" .) && \
		$(GO) test -race -tags idemmutant -count=1 -timeout 12m $(PKGS) && $(MAKE) --no-print-directory nested'
	$(MAKE) --no-print-directory test-golangci

# The idemvet golangci-lint plugin, built by golangci-lint custom (the
# version tools/go.mod pins) in a scratch module and run on one of each
# mistake: it builds golangci-lint twice, so it runs alone, with its own
# timeout (analysis/idemvet/gclplugin TestCustomGolangciLint).
test-golangci:
	IDEMVET_GOLANGCI=1 $(GO) test -count=1 -timeout 45m -run '^TestCustomGolangciLint$$' ./analysis/idemvet/gclplugin/

# The Prometheus alerting rules (deploy/prometheus) checked and unit-tested
# by promtool (scripts/promtool.sh installs Debian's prometheus package
# when promtool is missing); runtime/idemotel's TestAlertRulesMatchExporter
# checks their names against the exporter's output.
test-rules:
	scripts/promtool.sh check rules deploy/prometheus/idem-alerts.yml
	scripts/promtool.sh test rules deploy/prometheus/idem-alerts.test.yml

# vet and test every nested module under -race, against throwaway
# PostgreSQL and Redis servers (the gRPC tests run on pgstore and redisstore).
test-nested:
	scripts/with-services.sh $(MAKE) --no-print-directory nested

# The nested modules' tests, with the servers' addresses already exported.
nested:
	@set -e; for d in $(NESTED); do \
		echo "== $$d"; (cd $$d && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 8m ./...); done

# checkout (gRPC service A) calls payments (B) through idemgrpc.
demo-grpc:
	cd examples/grpcapi && $(GO) run .

# idemgateway in front of a service with a generated wrapper: what each
# layer catches (docs/LAYERS.md).
demo-gateway:
	cd examples/gateway && $(GO) run .

# a JetStream consumer (in-process nats-server), with and without idemgen.
demo-consumer:
	cd examples/consumer && $(GO) run .

generate:
	$(GO) generate ./examples/... ./internal/benchcmp/... ./internal/sim/simsvc ./internal/stress/stormsvc ./internal/opnames/...

# Fails when a committed generated file is stale, missing or extra, and
# prints the unified diff of what `make generate` would change.
check:
	$(GO) run ./cmd/idemgen -check -diff ./examples/... ./internal/benchcmp/... ./internal/sim/simsvc ./internal/stress/stormsvc ./internal/opnames/...
	cd examples/grpcapi && $(GO) tool idemgen -check -diff ./...
	cd examples/consumer && $(GO) tool idemgen -check -diff ./...
	cd examples/shop && $(GO) tool idemgen -check -diff ./...
	cd examples/gateway && $(GO) tool idemgen -check -diff ./...
	cd bench && $(GO) tool idemgen -check -diff ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^testdata/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every module of the repository is vetted: the root's packages here, the
# nested modules in `nested`, and the modules only README targets build
# (bench: `make bench`) here too, so that a README target cannot rot unseen.
# modules-listed fails when a go.mod is in none of these lists.
vet: modules-listed
	$(GO) vet $(PKGS)
	$(GO) vet -tags idemmutant ./runtime/idem ./runtime/memstore ./internal/mutant ./internal/sim/...
	$(GO) vet -tags failover ./internal/stress/...
	cd bench && $(GO) vet ./...

# The modules each target reaches: the root, NESTED, bench, tools (the pinned
# tools alone). A new go.mod must join one of them.
modules-listed:
	@known=" . $(NESTED) bench tools "; \
	for m in $$(git ls-files --cached --others --exclude-standard '*go.mod' | grep -v '/testdata/'); do \
		d=$$(dirname $$m); case "$$known" in *" $$d "*) ;; \
		*) echo "modules-listed: $$d/go.mod is in none of NESTED, bench, tools (Makefile)"; exit 1;; esac; done

# Every module's `go` line is the floor its dependencies force, no higher
# (docs/decisions/go-version.md): go vet's stdversion analyzer and the
# compiler's -lang then hold the code to that Go version.
go-floor:
	scripts/go-floor.sh . $(NESTED) bench

# staticcheck runs in every `make test`, every check (staticcheck.conf: checks
# = ["all"], for the nested modules too); golangci-lint (slower to build) in
# `make lint`. Both are pinned as tool directives in tools/go.mod.
staticcheck:
	$(GO) tool -modfile=tools/go.mod staticcheck $(PKGS)
	for d in $(NESTED); do (cd $$d && $(GO) tool -modfile=$(CURDIR)/tools/go.mod staticcheck ./...) || exit 1; done

lint: staticcheck idemvet
	$(GO) tool -modfile=tools/go.mod golangci-lint run $(PKGS)

# idemvet (analysis/idemvet, docs/IDEMVET.md) through go vet over the
# examples, the nested example modules too: annotation errors, stale
# generated files, calls that bypass a wrapper, executors that cannot work.
IDEMVET_NESTED := examples/grpcapi examples/consumer
idemvet:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(GO) build -o "$$tmp/idemvet" ./cmd/idemvet; \
	echo "== ./examples/..."; $(GO) vet -vettool="$$tmp/idemvet" ./examples/...; \
	for d in $(IDEMVET_NESTED); do echo "== $$d"; (cd $$d && $(GO) vet -vettool="$$tmp/idemvet" ./...); done

# The fingerprint's generative test (internal/generate
# TestFingerprintGenerative) at scale: 20 programs of 72 random methods,
# 10^5 pairs each, through generated wrappers (go test runs one, 12000
# pairs). IDEM_FP_SEED picks another first seed.
fingerprint-gen:
	IDEM_FP_PROGRAMS=$${IDEM_FP_PROGRAMS:-20} IDEM_FP_PAIRS=$${IDEM_FP_PAIRS:-100000} \
		$(GO) test -count=1 -timeout 30m -run '^TestFingerprintGenerative$$' -v ./internal/generate/

# FuzzGenerate maps seeds to random service packages (the grammar of
# internal/generate/generative_test.go) and checks that each generates and
# type-checks or is refused at a position; make test runs a fixed number of
# its seeds (TestGenerative).
fuzz:
	$(GO) test ./annotations -run '^$$' -fuzz=FuzzParse -fuzztime=60s
	$(GO) test ./internal/generate -run '^$$' -fuzz=FuzzGenerate -fuzztime=60s

# Benchmarks run on a durable PostgreSQL server (fsync, synchronous_commit
# and full_page_writes on, as in production) and a durable MariaDB
# (innodb_flush_log_at_trx_commit=1); the tests keep the fast ones.
# The growth of pgstore (10^4 to 10^7 records, plain and partitioned) is
# make bench-growth: it loads 2 × 1.1×10^7 records (about 11 GB of disk).
bench: bench-idemvet
	IDEM_PG_DURABLE=1 IDEM_MYSQL_DURABLE=1 scripts/with-services.sh sh -c '$(GO) run ./internal/cmd/bench && (cd bench && $(GO) run ./cmd/peers) && \
		(cd bench && $(GO) run ./cmd/dbos) && \
		cd runtime/sqlitestore && $(GO) test -run "^$$" -bench BenchmarkSQLite -benchtime=2s .'

# idemvet under go vet against plain go vet on ./examples/..., as ratios
# (wall and CPU), both with the packages compiled and no vet result cached.
bench-idemvet:
	scripts/bench-idemvet.sh ./examples/...

bench-growth:
	IDEM_PG_DURABLE=1 scripts/with-services.sh $(GO) run ./internal/cmd/benchgrowth -max-records 10000000

# The failover scenarios (internal/stress/failover.go, docs/FAILOVER.md):
# replicated servers of their own (scripts/pg-replica.sh, ...), a primary
# killed mid-storm and a replica promoted, executions per key counted and
# the measured figures printed. Not part of make test or make stress.
failover:
	IDEM_FAILOVER=1 scripts/with-services.sh $(GO) test -tags failover -count=1 -v -timeout 60m -run '^TestFailover' ./internal/stress/...

# The duplicate storm with faults, full size, on every store.
stress:
	scripts/with-services.sh $(GO) run ./internal/cmd/stress

# The gateway soak (issue 35): idemgateway in front of a real backend on
# loopback under a bounded load (16 workers; retries; slow, failing and
# connection-breaking requests) for SOAK_DURATION; fails if a key's backend
# effects exceed one or goroutines or file descriptors grow. Not in make test.
SOAK_DURATION ?= 3m
soak-gateway:
	cd cmd/idemgateway && IDEM_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -tags soak -run '^TestSoakGateway$$' -count=1 -timeout 0 -v ./gateway

# The deterministic simulator (internal/sim): 10^6 seeded schedules of the
# real executor and memstore under every fault, durable and losing stores
# alternating by seed. Replay one: go run ./internal/sim/cmd/sim -seed N -store K -v
SIM_SEEDS ?= 1000000
sim:
	$(GO) run -tags idemmutant ./internal/sim/cmd/sim -seeds $(SIM_SEEDS)
