#!/usr/bin/env bash
# Run-engine figures on `serve` (embedded backend, release build): engine overhead per
# node of a 200-node chain, a 60 s 1080p edit chain against one hand-written ffmpeg
# command, and the time from POST run to the first task running. Each against a floor
# measured in the same run; prints markdown for docs/performance.md. Options go to
# scripts/perf_runs.py (e.g. --repeats 3 --starts 20).
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
ADDR="127.0.0.1:${PERF_PORT:-3902}"
RUST_LOG="${SERVE_LOG:-warn}" target/release/serve --addr "$ADDR" --seed "$WORK/seed.json" --data-dir "$WORK/data" &
SERVE_PID=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://$ADDR/whoami" && break; sleep 0.1; done
echo "machine: $(nproc) cores, $(uname -m), $(ffmpeg -version | head -1)"
python3 scripts/perf_runs.py "http://$ADDR" "$KEY" "$WORK" "$@"
