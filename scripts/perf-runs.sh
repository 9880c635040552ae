#!/usr/bin/env bash
# Run-engine figures on `serve` (embedded backend, release build): engine overhead per
# node of a 200-node chain, a 60 s 1080p edit chain against one hand-written ffmpeg
# command, and the time from POST run to the first task running. Each against a floor
# measured in the same run; prints markdown for docs/performance.md. Options go to
# scripts/perf_runs.py (e.g. --repeats 3 --starts 20).
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/perf-serve.sh
start_perf_serve 3902
echo "machine: $(nproc) cores, $(uname -m), $(ffmpeg -version | head -1)"
python3 scripts/perf_runs.py "http://$ADDR" "$KEY" "$WORK" "$@"
