# avfs: see README.md. Every install step the project needs lives here.
GO      ?= go
BIN     := bin/avfs
PKGS    := ./...
# Two cores here: one package at a time keeps FUSE and process tests calm.
TESTFLAGS ?= -p 2 -count=1 -timeout 12m

.PHONY: all setup build test fuzz fuzz-all bench demo lint fmt clean schema e2e-otel

all: build

setup:
	$(GO) mod download

build:
	$(GO) build -o $(BIN) ./cmd/avfs

test:
	$(GO) test $(TESTFLAGS) $(PKGS)
	$(MAKE) fuzz

# The wire decoder (request bodies on worker subjects, and the UTF-8 check
# that keeps names from folding), fuzzed for a bounded time on every
# `make test`. `go test` alone runs every fuzz target's seed corpus,
# including the path validation and the handler's args decoding;
# fuzz-all fuzzes those too (their packages take SQLite, whose fuzzing
# build is slow: run it on a quiet machine, e.g. FUZZTIME=1m).
FUZZTIME ?= 10s
FUZZ = $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -parallel 1
fuzz:
	$(FUZZ) -fuzz '^FuzzDecodeWork$$' ./messages
	$(FUZZ) -fuzz '^FuzzValidJSONText$$' ./messages

fuzz-all: fuzz
	$(FUZZ) -fuzz '^FuzzCleanPath$$' ./vault
	$(FUZZ) -fuzz '^FuzzRequestArgs$$' ./handler

# The seed workflow against a real trace backend (Jaeger, built from
# tools/jaeger): the failed attempt's trace and the rollback's link.
e2e-otel: build
	./scripts/e2e-otel.sh

bench: build
	./scripts/bench.sh

demo: build
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
