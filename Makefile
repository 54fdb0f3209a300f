# Lifeline's build. Every tool it needs beyond Go is installed into ./bin at a
# pinned version, from the Go module proxy.

GO        ?= go
BIN       := $(CURDIR)/bin
BUF_VERSION                := v1.59.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
STATICCHECK_VERSION        := v0.8.2

export PATH := $(BIN):$(PATH)

# What the binaries say they are (ctl version, --version,
# lifeline_build_info): the nearest tag (or devel), the commit and when
# it was built, stamped into internal/version. Override VERSION to name a
# release.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null | grep '^v' || echo devel)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
BUILDDATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
VERSION_PKG := github.com/lifelinehq/lifeline/internal/version
LDFLAGS   := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).date=$(BUILDDATE)
PREFIX    ?= /usr/local

.PHONY: all build install man test test-faults lint vet deps-check staticcheck fmt-check buf-lint proto proto-check tools bench charms demo bench-scale clean

all: build

## build: ctl and lifelined into ./bin
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/ctl ./cmd/lifelined

## install: ctl and lifelined into $(PREFIX)/bin (PREFIX=/usr/local unless
## given; DESTDIR is prepended, for packagers)
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/ctl $(BIN)/lifelined $(DESTDIR)$(PREFIX)/bin/

## man: the manual pages of ctl and lifelined into ./man (generated, not
## committed)
man: build
	$(BIN)/ctl gen-man $(CURDIR)/man
	$(BIN)/lifelined gen-man $(CURDIR)/man

## test: vet, staticcheck, gofmt, buf lint, generated-code freshness, what ctl links, then every test with
## the race detector (end-to-end tests included), package state's again with a plain
## clientv3 client over etcd's socket instead of the member's in-process one (etcdtest),
## and the race tests 20 times. A package may take TEST_TIMEOUT (the end-to-end one runs
## several minutes on 2 cores).
TEST_TIMEOUT ?= 30m
test: lint proto-check
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./state/... -args -etcdtest.backend=client
	$(GO) test -race -count=20 -run '^TestRace' ./state/

## test-faults: the fault suite (faults/, docs/RELIABILITY.md) at full
## size: a 3-member etcd cluster (its server built from tools/etcd) whose
## leader is killed during a deploy of 200 units and a destroy of 100, machine
## agents killed during a 300-unit workload, agents partitioned, 60 s of random
## API requests, 50 random topologies of the demo charms torn down (the
## teardown soak, over 2 hours of it on a loaded 2-core machine). make test
## runs its short form.
## SOAK=30m loops the scenarios for that long instead (short sizes; FULL=1
## for full ones), within FAULTS_TIMEOUT; the figures go to SUMMARY as JSON.
FAULTS_TIMEOUT ?= 4h
SUMMARY        ?= $(BIN)/faults-summary.json
test-faults:
	@mkdir -p $(dir $(SUMMARY))
	$(GO) test -count=1 -v -timeout $(FAULTS_TIMEOUT) ./faults/ \
		$(if $(SOAK),-faults.soak $(SOAK) $(if $(FULL),-faults.full),-faults.full) \
		-faults.summary $(SUMMARY)
	@echo "figures: $(SUMMARY)"

## lint: go vet, staticcheck, gofmt and buf lint
lint: vet staticcheck fmt-check buf-lint deps-check

vet:
	$(GO) vet ./...

## deps-check: ctl, the operator's client, reaches the model only through
## the controller's API: it links neither package state nor etcd
deps-check:
	@bad=$$($(GO) list -deps ./cmd/ctl | grep -E '^go\.etcd\.io/etcd/|^github\.com/lifelinehq/lifeline/state$$'); \
	if [ -n "$$bad" ]; then echo "cmd/ctl links packages it must not (it reaches the model through the controller's API):"; echo "$$bad"; exit 1; fi

staticcheck: $(BIN)/.staticcheck-$(STATICCHECK_VERSION)
	staticcheck ./...

fmt-check:
	@bad=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi

buf-lint: tools
	buf lint

## proto: regenerate the Go code beside the .proto files
proto: tools
	buf generate

## proto-check: fail when the committed generated code is not what the
## .proto files generate
proto-check: tools
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	buf generate -o $$tmp && \
	if ! diff -r -x '*.proto' $$tmp/proto proto >/dev/null; then \
		echo "generated code is stale: run 'make proto' and commit the result"; \
		diff -r -x '*.proto' $$tmp/proto proto | head -20; exit 1; \
	fi

tools: $(BIN)/.buf-$(BUF_VERSION) $(BIN)/.protoc-gen-go-$(PROTOC_GEN_GO_VERSION) $(BIN)/.protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)

$(BIN)/.buf-$(BUF_VERSION):
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@touch $@

$(BIN)/.protoc-gen-go-$(PROTOC_GEN_GO_VERSION):
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@touch $@

$(BIN)/.protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION):
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@touch $@

$(BIN)/.staticcheck-$(STATICCHECK_VERSION):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@touch $@

## bench: benchmarks of the core state operations beside raw etcd
## put-if-absent transactions at the same concurrency, against embedded etcd
## with fsync on (docs/PERFORMANCE.md records the figures)
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3s ./bench/

## bench-scale: the scale harness (cmd/lifeline-bench): N units on M
## machines through a real controller; ARGS passes flags, such as
## ARGS='-units 1000 -machines 100 -hooks none -json out.json', or
## ARGS='-scenario operations -hooks none' for an action run on every
## unit and a pause of them all, or ARGS='-scenario claims' for a config
## change to units with host claims (docs/PERFORMANCE.md)
bench-scale: build
	$(GO) run ./cmd/lifeline-bench -lifelined $(BIN)/lifelined -ctl $(BIN)/ctl $(ARGS)

## charms: build the example charms' servers into their charm directories
## (examples/charms/kv/bin/kv-server, examples/charms/app/bin/app-server)
charms:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/examples/charms/kv/bin/kv-server ./examples/kvserver
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(CURDIR)/examples/charms/app/bin/app-server ./examples/appserver

## demo: a local controller with embedded etcd, the example charms deployed
## and related, status shown, pages fetched, then everything torn down
## (KEEP=1 leaves it running)
demo: build charms
	$(GO) run ./examples/demo -ctl $(BIN)/ctl -charms examples/charms $(if $(KEEP),-keep)

clean:
	rm -rf $(BIN)
