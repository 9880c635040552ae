#!/usr/bin/env bash
# Run-engine figures on `serve` (release build): engine overhead per node of a 200-node
# chain and of a 99-task fan-out, a 60 s 1080p edit chain against one hand-written ffmpeg
# command, the time from POST run to the first task running, and the cost per task of
# fan-outs of 10, 100 and 1,000 tasks — on SQLite, then (the wide runs) on DynamoDB Local
# with the SQS/S3 emulator (PERF_AWS=0 skips it). Each against a floor measured in the
# same run; prints markdown for docs/performance.md. Options go to scripts/perf_runs.py
# (e.g. --repeats 3 --starts 20).
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/perf-serve.sh
start_perf_serve 3902
echo "machine: $(nproc) cores, $(uname -m), $(ffmpeg -version | head -1)"
python3 scripts/perf_runs.py "http://$ADDR" "$KEY" "$WORK" --label "SQLite: " --cpu "serve=$SERVE_PID" "$@"
stop_perf_serve

if [ "${PERF_AWS:-1}" = 1 ]; then
  infra/emulators.sh install
  DYNAMODB_JAVA_OPTS="" infra/emulators.sh start
  eval "$(infra/emulators.sh env)"
  export TABLE_NAME="perf-runs-$(date +%s)" MEDIA_BUCKET="perf-runs-$(date +%s)"
  export TASK_QUEUE_URL="" WEBHOOK_QUEUE_URL=""
  unset TASK_QUEUE_URL WEBHOOK_QUEUE_URL
  start_perf_serve 3903 --backend aws
  RUN_DIR=.local/run
  python3 scripts/perf_runs.py "http://$ADDR" "$KEY" "$WORK" --label "DynamoDB: " \
    --cpu "serve=$SERVE_PID,DynamoDB Local=$(cat $RUN_DIR/dynamodb.pid),moto=$(cat $RUN_DIR/moto.pid)" "$@" --only wide
  stop_perf_serve
fi
