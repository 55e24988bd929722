#!/usr/bin/env bash
# e2e-otel: the seed workflow against a real OpenTelemetry backend. Builds
# Jaeger (tools/jaeger), runs it on loopback with in-memory storage, runs
# `avfs demo` exporting OTLP/HTTP to it, then checks through Jaeger's query
# API that the failed attempt's trace and the rollback's link are there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ -x bin/avfs ] || go build -o bin/avfs ./cmd/avfs
(cd tools/jaeger && go build -o "$root/bin/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
work="$(mktemp -d)"
jpid=""
cleanup() {
  if [ -n "$jpid" ]; then
    kill "$jpid" 2>/dev/null || true
    wait "$jpid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
"$root/bin/jaeger" > "$work/jaeger.log" 2>&1 &
jpid=$!
for _ in $(seq 1 120); do
  curl -sf http://127.0.0.1:16686/api/services >/dev/null 2>&1 && break
  sleep 0.5
done
curl -sf http://127.0.0.1:16686/api/services >/dev/null || { echo "e2e-otel: jaeger did not start"; tail -20 "$work/jaeger.log"; exit 1; }
service="avfs-e2e-$$"
AVFS_HOME="$work/home" OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME="$service" \
  "$root/bin/avfs" demo --json > "$work/demo.json"
go run scripts/otelcheck.go http://127.0.0.1:16686 "$service"
echo "e2e-otel: 1 passed, 0 failed"
