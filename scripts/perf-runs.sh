#!/usr/bin/env bash
# Run-engine figures on `serve` (`serve` profile: optimized, no LTO): engine overhead per node of a 200-node
# chain and of a 99-task fan-out, a 60 s 1080p edit chain against one hand-written ffmpeg
# command, the time from POST run to the first task running, and the cost per task of
# fan-outs of 10, 100 and 1,000 tasks — on SQLite, then (the wide runs) on DynamoDB Local
# with S3 on moto and SQS on fauxqs or moto (PERF_SQS, below; PERF_AWS=0 skips it). Each against a floor measured in the
# same run; prints markdown for docs/performance.md. Options go to scripts/perf_runs.py
# (e.g. --repeats 3 --starts 20).
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/perf-serve.sh
# A second serve that charges nothing (CREDIT_PRICES=free): the floor of the charges row.
CREDIT_PRICES=free start_perf_serve 3904
FREE_ADDR="$ADDR" FREE_KEY="$KEY" FREE_PID="$SERVE_PID" FREE_WORK="$WORK"
start_perf_serve 3902
stop_free_serve() { kill "$FREE_PID" 2>/dev/null || true; wait "$FREE_PID" 2>/dev/null || true; rm -rf "$FREE_WORK"; }
trap 'stop_perf_serve; stop_free_serve' EXIT
echo "machine: $(nproc) cores, $(uname -m), $(ffmpeg -version | head -1)"
python3 scripts/perf_runs.py "http://$ADDR" "$KEY" "$WORK" --label "SQLite: " --cpu "serve=$SERVE_PID" \
  --free-base "http://$FREE_ADDR" --free-key "$FREE_KEY" --free-pid "$FREE_PID" "$@"
stop_perf_serve
stop_free_serve
trap stop_perf_serve EXIT

# The SQS emulator of the AWS rows: fauxqs (an in-memory SQS in Node, whose receive and
# delete do not walk the queue) by default, or moto (PERF_SQS=moto), the tests' emulator,
# whose every receive and delete scans all of a queue's messages: with the 990 messages a
# 1,000-task fan-out queues at once, moto's own cost per task grows with the run and
# hides the service's.
FAUXQS_VERSION=1.9.2
FAUXQS_PORT="${FAUXQS_PORT:-15100}"
start_fauxqs() {
  if [ ! -x .local/fauxqs/node_modules/.bin/fauxqs ]; then
    command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
    npm install --silent --no-audit --no-fund --prefix .local/fauxqs "fauxqs@$FAUXQS_VERSION"
  fi
  FAUXQS_PORT="$FAUXQS_PORT" FAUXQS_LOGGER=false .local/fauxqs/node_modules/.bin/fauxqs >.local/run/fauxqs.log 2>&1 &
  FAUXQS_PID=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$FAUXQS_PORT/health" && return; sleep 0.1; done
  echo "fauxqs did not start" >&2; exit 1
}

if [ "${PERF_AWS:-1}" = 1 ]; then
  infra/emulators.sh install
  DYNAMODB_JAVA_OPTS="" infra/emulators.sh start
  # A cold JVM is several times slower: the first (10-task) rows would measure its
  # warm-up, not the service.
  infra/emulators.sh warm
  eval "$(infra/emulators.sh env)"
  RUN_DIR=.local/run
  EMULATORS="DynamoDB Local=$(cat $RUN_DIR/dynamodb.pid),moto (SQS, S3)=$(cat $RUN_DIR/moto.pid)"
  if [ "${PERF_SQS:-fauxqs}" = fauxqs ]; then
    start_fauxqs
    export AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$FAUXQS_PORT"
    EMULATORS="DynamoDB Local=$(cat $RUN_DIR/dynamodb.pid),moto (S3)=$(cat $RUN_DIR/moto.pid),fauxqs (SQS)=$FAUXQS_PID"
  fi
  export TABLE_NAME="perf-runs-$(date +%s)" MEDIA_BUCKET="perf-runs-$(date +%s)"
  unset TASK_QUEUE_URL WEBHOOK_QUEUE_URL
  start_perf_serve 3903 --backend aws
  python3 scripts/perf_runs.py "http://$ADDR" "$KEY" "$WORK" --label "DynamoDB (SQS: ${PERF_SQS:-fauxqs}): " \
    --cpu "serve=$SERVE_PID,$EMULATORS" \
    "$@" --only wide
  stop_perf_serve
  [ -z "${FAUXQS_PID:-}" ] || kill "$FAUXQS_PID"
fi
