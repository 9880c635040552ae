#!/usr/bin/env bash
# Webhook figures on `serve` (embedded backend, `serve` profile) with a receiver on this
# machine: time from a node finishing to its RUN_PROGRESS arriving (p50, p99), and the
# deliveries per second one serve process's senders sustain; each beside a floor
# measured in the same run (the same POSTs sent straight to the receiver). Prints
# markdown for docs/performance.md. Options go to scripts/perf_webhooks.py
# (e.g. --runs 100 --deliveries 1000).
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/perf-serve.sh
start_perf_serve 3903
echo "machine: $(nproc) cores, $(uname -m)"
python3 scripts/perf_webhooks.py "http://$ADDR" "$KEY" "$WORK" "$@"
