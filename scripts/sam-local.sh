#!/usr/bin/env bash
# Tries the functions with AWS SAM on one machine, against DynamoDB Local and the S3/SQS
# emulator instead of a stack:
#   1. builds every function for arm64 as the template runs them, unoptimized
#      (scripts/build-lambda.sh --profile lambda-test), and `serve`;
#   2. starts the emulators (infra/emulators.sh; moto on every address when Docker
#      answers, so that containers reach it as host.docker.internal);
#   3. seeds them: `serve --backend aws --prepare-only --seed infra/sam-local-seed.json`
#      with env.json's variables (host.docker.internal as 127.0.0.1 from here) makes the
#      table, the bucket, the queues and the organization whose key the events carry;
#   4. where a Docker daemon answers: `sam local invoke` of whoami, create-agent and
#      list-agents with their events (events/) and env.json, then `sam local start-api`
#      and a curl of GET /whoami through it. Where none answers it says so and exits 0:
#      steps 1-3 are done and nothing is pretended.
#
#   usage: scripts/sam-local.sh [--no-build]
#
# The events and env.json are generated (`cargo run -q -p integration-tests --bin
# sam-events`); tests/tests/api/sam_local.rs delivers every event to its binary with
# env.json's variables. The emulators keep running afterwards: infra/emulators.sh stop.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[sam-local] $*" >&2; }
build=1
case "${1:-}" in
  "") ;;
  --no-build) build=0 ;;
  *) sed -n '16p' "$0" | sed 's/^# *//' >&2; exit 2 ;;
esac
functions=target/functions-lambda-test
SAM=.local/venv/bin/sam
data=.local/sam-local
mkdir -p "$data"

docker_answers=0
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then docker_answers=1; fi

if [ "$build" = 1 ]; then
  scripts/build-lambda.sh --profile lambda-test
fi
cargo build -q --bin serve

infra/emulators.sh install
if [ "$docker_answers" = 1 ]; then export EMULATORS_HOST=0.0.0.0; fi
infra/emulators.sh start
eval "$(infra/emulators.sh env)"

# env.json's variables of a function, as this machine reaches them.
variables() {
  .local/venv/bin/python - "$1" <<'PY'
import json, sys
for name, value in json.load(open("env.json"))[sys.argv[1]].items():
    print(f"{name}={value.replace('host.docker.internal', '127.0.0.1')}")
PY
}
mapfile -t seed_env < <(variables StartRunFunction)
log "seeding the emulators (table, bucket, queues, the organization of the events' key)"
env "${seed_env[@]}" target/debug/serve --backend aws --prepare-only --addr 127.0.0.1:0 \
  --seed infra/sam-local-seed.json --data-dir "$data"

# The template as `sam build` leaves it: each function's code the folder of its bootstrap
# (refused, naming them, when functions are not built).
.local/venv/bin/python scripts/deploy.py template "$functions" "$data/template.yaml"

key=$(.local/venv/bin/python -c 'import json; print(json.load(open("infra/sam-local-seed.json"))["organizations"][0]["api_keys"][0])')
if [ "$docker_answers" = 0 ]; then
  log "no Docker daemon answers here (docker info failed): sam local cannot run its containers on this machine."
  log "Done: every function built in $functions, $data/template.yaml, the emulators started and seeded."
  log "With Docker, this script goes on with:"
  log "  $SAM local invoke WhoamiFunction --template $data/template.yaml --event events/whoami.json --env-vars env.json --add-host host.docker.internal:host-gateway"
  log "  $SAM local start-api --template $data/template.yaml --env-vars env.json --add-host host.docker.internal:host-gateway"
  log "  curl -H 'Authorization: Bearer $key' http://127.0.0.1:3000/whoami"
  exit 0
fi

export SAM_CLI_TELEMETRY=0
local_args=(--template "$data/template.yaml" --env-vars env.json --add-host host.docker.internal:host-gateway)
for pair in WhoamiFunction:whoami CreateAgentFunction:create-agent ListAgentsFunction:list-agents; do
  log "sam local invoke ${pair%%:*} --event events/${pair#*:}.json"
  "$SAM" local invoke "${pair%%:*}" --event "events/${pair#*:}.json" "${local_args[@]}"
done

log "sam local start-api on 127.0.0.1:3000"
"$SAM" local start-api --port 3000 "${local_args[@]}" >"$data/start-api.log" 2>&1 &
api_pid=$!
trap 'kill "$api_pid" 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  if curl -s -o /dev/null http://127.0.0.1:3000/openapi.json; then break; fi
  if ! kill -0 "$api_pid" 2>/dev/null; then log "sam local start-api stopped: $data/start-api.log"; exit 1; fi
  sleep 1
done
curl -sf -H "Authorization: Bearer $key" http://127.0.0.1:3000/whoami
echo
log "sam local start-api answered GET /whoami"
