# avfs: see README.md. Every install step the project needs lives here.
GO      ?= go
BIN     := bin/avfs
PKGS    := ./...
# Two cores here: one package at a time keeps FUSE and process tests calm.
TESTFLAGS ?= -p 2 -count=1 -timeout 12m

.PHONY: all setup build test bench demo lint fmt clean schema e2e-otel

all: build

setup:
	$(GO) mod download

build:
	$(GO) build -o $(BIN) ./cmd/avfs

test:
	$(GO) test $(TESTFLAGS) $(PKGS)

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
