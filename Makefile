# avfs: see README.md. Every install step the project needs lives here.
GO      ?= go
BIN     := bin/avfs
PKGS    := ./...
# Stamped into `avfs version`: the nearest tag (or 0.0.0-dev) and the commit.
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || echo 0.0.0-dev)
COMMIT  ?= $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$c || echo $$c-dirty; } || echo unknown)
LDFLAGS := -X github.com/avfs/avfs/cli.Version=$(VERSION) -X github.com/avfs/avfs/cli.Commit=$(COMMIT)
# Two cores here: one package at a time keeps FUSE and process tests calm.
TESTFLAGS ?= -p 2 -count=1 -timeout 12m

.PHONY: all setup build test fuzz fuzz-all bench demo lint fmt clean schema e2e-otel posix

all: build

setup:
	$(GO) mod download

# -v names each package as it compiles: the first build compiles every
# dependency (SQLite, nats-server, OpenTelemetry) and takes minutes.
# CGO_ENABLED=0: avfs calls no C, and a static binary starts about 1 ms
# sooner on every command (no dynamic loader, no libc to map and relocate;
# BENCHMARKS.md "exec through the CLI, traced").
build:
	@echo "building $(BIN) $(VERSION) (commit $(COMMIT)); a first build compiles every dependency and takes a few minutes" >&2
	CGO_ENABLED=0 $(GO) build -v -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/avfs

# gotestsum (a tool in go.mod) runs go test and gives a test that failed
# one more run on its own: a test that passes only on its rerun is named
# as flaky at the end (and in .test-reruns); one that fails twice, or more
# than three failures at once, fails the run. CI machines have two cores
# and FUSE, NATS and process tests share them.
RERUNS ?= 1
test:
	@rm -f .test-reruns
	$(GO) tool gotestsum --format pkgname --rerun-fails=$(RERUNS) --rerun-fails-max-failures=3 \
		--rerun-fails-run-root-test --rerun-fails-report .test-reruns --packages '$(PKGS)' -- $(TESTFLAGS)
	@if [ -s .test-reruns ]; then echo "flaky: these failed once and passed on their rerun:"; cat .test-reruns; fi
	$(MAKE) fuzz

# The wire decoder (request bodies on worker subjects, and the UTF-8 check
# that keeps names from folding), fuzzed for a bounded time on every
# `make test`. `go test` alone runs every fuzz target's seed corpus,
# including the path validation and the handler's args decoding;
# fuzz-all fuzzes those too (their packages take SQLite, whose fuzzing
# build is slow: run it on a quiet machine, e.g. FUZZTIME=1m).
FUZZTIME ?= 10s
fuzz:
	GO=$(GO) ./scripts/fuzz.sh $(FUZZTIME) FuzzDecodeWork ./messages
	GO=$(GO) ./scripts/fuzz.sh $(FUZZTIME) FuzzValidJSONText ./messages

fuzz-all: fuzz
	GO=$(GO) ./scripts/fuzz.sh $(FUZZTIME) FuzzCleanPath ./vault
	GO=$(GO) ./scripts/fuzz.sh $(FUZZTIME) FuzzRequestArgs ./handler

# The seed workflow against a real trace backend (Jaeger, built from
# tools/jaeger): the failed attempt's trace and the rollback's link.
e2e-otel: build
	./scripts/e2e-otel.sh

# pjdfstest on a fresh mount, built from PJDFSTEST_TARBALL (default
# ../shared/pjdfstest/pjdfstest-85a8aea.tar.gz); needs root. POSIX_DIRS
# picks syscall directories (default: all).
posix: build
	./scripts/posix.sh $(POSIX_DIRS)

bench: build
	./scripts/bench.sh

demo: build
	@echo "running ./$(BIN) demo" >&2
	./$(BIN) demo

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	./scripts/importrules.sh

# Regenerates docs/schema and the op table of docs/protocol.md from the
# Go types; a test fails when they are stale.
schema:
	$(GO) run ./internal/schemagen -out docs/schema -doc docs/protocol.md

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin .bench
