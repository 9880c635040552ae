#!/usr/bin/env bash
# Measures GET entry and bulk upsert through `serve` against their raw storage floor, in
# one run per backend (`serve` profile): `serve --backend aws` against raw SDK calls to
# the same DynamoDB Local, then `serve` on SQLite against raw rusqlite calls on the same
# database file. Prints markdown tables for docs/performance.md. Options after the script
# name go to the perf binary (e.g. --gets 4000 --bulk-runs 5).
set -euo pipefail
cd "$(dirname "$0")/.."

infra/emulators.sh install
# DynamoDB Local at its peak speed (the tests' quick-start JVM options would lower the floor).
DYNAMODB_JAVA_OPTS="" infra/emulators.sh start
SERVE_PID=0
[ "${KEEP_EMULATORS:-0}" = 1 ] || trap 'kill "$SERVE_PID" 2>/dev/null || true; infra/emulators.sh stop' EXIT
eval "$(infra/emulators.sh env)"
export TABLE_NAME="perf-$(date +%s)"

cargo build --profile serve --bin serve --bin perf
KEY="perf-$(date +%s%N)"
SEED="$(mktemp)"
cat >"$SEED" <<JSON
{"organizations": [{"id": "$(cat /proc/sys/kernel/random/uuid)", "name": "Perf", "slug": "perf", "api_keys": ["$KEY"]}]}
JSON

# Starts serve with the given flags on $ADDR and waits until it answers (at most 10 s).
start_serve() {
  RUST_LOG="${SERVE_LOG:-warn}" target/serve/serve --addr "$ADDR" --seed "$SEED" "$@" &
  SERVE_PID=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://$ADDR/whoami" && return; sleep 0.1; done
  echo "serve did not start" >&2; exit 1
}

echo "machine: $(nproc) cores, $(uname -m), $(java -version 2>&1 | head -1)"

ADDR="127.0.0.1:${PERF_PORT:-3900}"
start_serve --backend aws --data-dir "$(mktemp -d)"
echo; echo "### serve --backend aws (DynamoDB Local) against raw SDK calls"; echo
target/serve/perf --url "http://$ADDR" --key "$KEY" "$@"
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true

DATA="$(mktemp -d)"
ADDR="127.0.0.1:${PERF_SQLITE_PORT:-3901}"
start_serve --data-dir "$DATA"
echo; echo "### serve (SQLite, $DATA/state.sqlite) against raw rusqlite on the same file"; echo
target/serve/perf --url "http://$ADDR" --key "$KEY" --sqlite "$DATA/state.sqlite" "$@"
