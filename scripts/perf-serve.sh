# Sourced by the perf scripts: installs ffmpeg when missing, builds `serve` with the `serve` profile (optimized, no LTO)
# and starts it on 127.0.0.1:$PERF_PORT (default: the port given) with a new data folder
# and a seeded organization; arguments after the port go to serve (e.g. --backend aws);
# PERF_TASKSET pins it to CPUs.
# PERF_SERVE_BIN measures another build instead (e.g. the commit before a change, built
# and measured in the same session).
# Sets WORK, KEY, ADDR and SERVE_PID; stop_perf_serve (or the script's exit) stops serve
# and removes the folder.
start_perf_serve() {
  local port="$1"
  shift
  infra/ffmpeg.sh
  local serve="${PERF_SERVE_BIN:-target/serve/serve}"
  [ -n "${PERF_SERVE_BIN:-}" ] || cargo build --profile serve --bin serve
  WORK="$(mktemp -d)"
  SERVE_PID=0
  trap stop_perf_serve EXIT
  KEY="perf-$(date +%s%N)"
  cat >"$WORK/seed.json" <<JSON
{"organizations": [{"id": "$(cat /proc/sys/kernel/random/uuid)", "name": "Perf", "slug": "perf", "credits": 100000000, "api_keys": ["$KEY"]}]}
JSON
  ADDR="127.0.0.1:${PERF_PORT:-$port}"
  # PERF_TASKSET pins serve and its ffmpeg children to those CPUs (e.g. 0).
  RUST_LOG="${SERVE_LOG:-warn}" ${PERF_TASKSET:+taskset -c "$PERF_TASKSET"} "$serve" --addr "$ADDR" --seed "$WORK/seed.json" --data-dir "$WORK/data" "$@" &
  SERVE_PID=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://$ADDR/whoami" && break; sleep 0.1; done
}

stop_perf_serve() {
  kill "$SERVE_PID" 2>/dev/null || true
  wait "$SERVE_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
