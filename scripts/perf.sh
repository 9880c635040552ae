#!/usr/bin/env bash
# Measures GET entry and bulk upsert through `serve --backend aws` against raw SDK calls,
# both on DynamoDB Local, in one run (release build). Prints a markdown table for
# docs/performance.md. Options after the script name go to the perf binary
# (e.g. --gets 4000 --bulk-runs 5).
set -euo pipefail
cd "$(dirname "$0")/.."

infra/emulators.sh install
infra/emulators.sh start
[ "${KEEP_EMULATORS:-0}" = 1 ] || trap 'kill "${SERVE_PID:-0}" 2>/dev/null || true; infra/emulators.sh stop' EXIT
eval "$(infra/emulators.sh env)"
export TABLE_NAME="perf-$(date +%s)"

cargo build --release --bin serve --bin perf
KEY="perf-$(date +%s%N)"
SEED="$(mktemp)"
cat >"$SEED" <<JSON
{"organizations": [{"id": "$(cat /proc/sys/kernel/random/uuid)", "name": "Perf", "slug": "perf", "api_keys": ["$KEY"]}]}
JSON
ADDR="127.0.0.1:${PERF_PORT:-3900}"
RUST_LOG="${SERVE_LOG:-warn}" target/release/serve --backend aws --addr "$ADDR" --seed "$SEED" --data-dir "$(mktemp -d)" &
SERVE_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://$ADDR/whoami" && break; sleep 0.1; done

echo "machine: $(nproc) cores, $(uname -m), $(java -version 2>&1 | head -1)"
target/release/perf --url "http://$ADDR" --key "$KEY" "$@"
