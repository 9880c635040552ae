#!/usr/bin/env bash
# Webhook figures on `serve` (embedded backend, release build) with a receiver on this
# machine: time from a node finishing to its RUN_PROGRESS arriving (p50, p99), and the
# deliveries per second one serve process's senders sustain; each beside a floor
# measured in the same run (the same POSTs sent straight to the receiver). Prints
# markdown for docs/performance.md. Options go to scripts/perf_webhooks.py
# (e.g. --runs 100 --deliveries 1000).
set -euo pipefail
cd "$(dirname "$0")/.."

infra/ffmpeg.sh
cargo build --release --bin serve
WORK="$(mktemp -d)"
SERVE_PID=0
trap 'kill "$SERVE_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
KEY="perf-$(date +%s%N)"
cat >"$WORK/seed.json" <<JSON
{"organizations": [{"id": "$(cat /proc/sys/kernel/random/uuid)", "name": "Perf", "slug": "perf", "api_keys": ["$KEY"]}]}
JSON
ADDR="127.0.0.1:${PERF_PORT:-3903}"
RUST_LOG="${SERVE_LOG:-warn}" target/release/serve --addr "$ADDR" --seed "$WORK/seed.json" --data-dir "$WORK/data" &
SERVE_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://$ADDR/whoami" && break; sleep 0.1; done
echo "machine: $(nproc) cores, $(uname -m)"
python3 scripts/perf_webhooks.py "http://$ADDR" "$KEY" "$WORK" "$@"
