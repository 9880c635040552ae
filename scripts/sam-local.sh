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
#   4. writes .local/sam-local/template.yaml: the template with each function's code the
#      folder of its bootstrap, as `sam build` leaves it;
#   5. where a Docker daemon answers: `sam local invoke` of whoami, create-agent and
#      list-agents with their events (events/) and env.json, each answer's status
#      checked, then `sam local start-api` and a curl of GET /whoami through it. Where
#      none answers it says so and exits 0: steps 1-4 are done and nothing is pretended.
#
#   usage: [SERVE=path] scripts/sam-local.sh [--no-build]
#
# The events and env.json are generated (`cargo run -q -p integration-tests --bin
# sam-events`); tests/tests/api/sam_local.rs delivers every event to its binary with
# env.json's variables. The emulators keep running afterwards (infra/emulators.sh stop);
# with Docker, moto and DynamoDB Local listen on every address of this machine and hold
# an organization whose key is in the repository: use a machine whose network you trust.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[sam-local] $*" >&2; }
build=1
case "${1:-}" in
  "") ;;
  --no-build) build=0 ;;
  *) sed -n '18p' "$0" | sed 's/^# *//' >&2; exit 2 ;;
esac
functions="${CARGO_TARGET_DIR:-target}/functions-lambda-test"
SAM=.local/venv/bin/sam
data=.local/sam-local
mkdir -p "$data"

docker_answers=0
if command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; then docker_answers=1; fi
log "Docker daemon: $([ "$docker_answers" = 1 ] && echo answers || echo 'none answers (sam local needs one; the rest is done)')"

if [ "$build" = 1 ]; then
  scripts/build-lambda.sh --profile lambda-test
fi
# SERVE names a serve binary built already (the test suite's, whose features differ
# from a build of serve alone, which would compile the SDK again).
serve="${SERVE:-}"
if [ -z "$serve" ]; then
  cargo build -q --bin serve
  serve="${CARGO_TARGET_DIR:-target}/debug/serve"
fi

infra/emulators.sh install
if [ "$docker_answers" = 1 ]; then export EMULATORS_HOST=0.0.0.0; fi
infra/emulators.sh start
eval "$(infra/emulators.sh env)"
if [ "$docker_answers" = 1 ] && ss -ltn 2>/dev/null | grep -q '127\.0\.0\.1:15000 '; then
  log "moto answers on 127.0.0.1:15000 only (started before): containers cannot reach it."
  log "Stop it (infra/emulators.sh stop) and run this script again."
  exit 1
fi

# env.json's variables of a function, as this machine reaches them.
variables() {
  .local/venv/bin/python - "$1" <<'PY'
import json, sys
for name, value in json.load(open("env.json"))[sys.argv[1]].items():
    print(f"{name}={value.replace('host.docker.internal', '127.0.0.1')}")
PY
}
seed_variables=$(variables StartRunFunction)
mapfile -t seed_env <<<"$seed_variables"
log "seeding the emulators (table, bucket, queues, the organization of the events' key)"
env "${seed_env[@]}" "$serve" --backend aws --prepare-only --addr 127.0.0.1:0 \
  --seed infra/sam-local-seed.json --data-dir "$data"

# The template as `sam build` leaves it (refused, naming them, when functions are not built).
.local/venv/bin/python scripts/deploy.py template "$functions" "$data/template.yaml"

key=$(.local/venv/bin/python -c 'import json; print(json.load(open("infra/sam-local-seed.json"))["organizations"][0]["api_keys"][0])')
region="${AWS_REGION:-us-east-1}"
local_args=(--template "$data/template.yaml" --env-vars env.json --region "$region"
  --add-host host.docker.internal:host-gateway)
if [ "$docker_answers" = 0 ]; then
  log "no Docker daemon answers here: sam local cannot run its containers on this machine."
  log "Done: every function built in $functions, $data/template.yaml, the emulators started and seeded."
  log "With Docker, this script goes on with:"
  log "  $SAM local invoke WhoamiFunction --event events/whoami.json ${local_args[*]}"
  log "  $SAM local start-api ${local_args[*]}"
  log "  curl -H 'Authorization: Bearer $key' http://127.0.0.1:3000/whoami"
  exit 0
fi

export SAM_CLI_TELEMETRY=0
# `sam local invoke` exits 0 whatever the function answers: the status is read here.
for check in WhoamiFunction:whoami:200 CreateAgentFunction:create-agent:201 ListAgentsFunction:list-agents:200; do
  IFS=: read -r logical function expected <<<"$check"
  log "sam local invoke $logical --event events/$function.json"
  answer=$("$SAM" local invoke "$logical" --event "events/$function.json" "${local_args[@]}" 2>"$data/invoke-$function.log")
  status=$(.local/venv/bin/python -c 'import json, sys; print(json.loads(sys.argv[1]).get("statusCode"))' "$answer" 2>/dev/null || echo none)
  [ "$status" = "$expected" ] || { log "$logical answered $status, not $expected: $answer ($data/invoke-$function.log)"; exit 1; }
done

log "sam local start-api on 127.0.0.1:3000"
"$SAM" local start-api --port 3000 "${local_args[@]}" >"$data/start-api.log" 2>&1 &
api_pid=$!
trap 'kill "$api_pid" 2>/dev/null || true' EXIT
started=0
for _ in $(seq 120); do
  if curl -s -o /dev/null --max-time 5 http://127.0.0.1:3000/openapi.json; then started=1; break; fi
  if ! kill -0 "$api_pid" 2>/dev/null; then break; fi
  sleep 1
done
[ "$started" = 1 ] || { log "sam local start-api did not answer within 120 s: $data/start-api.log"; exit 1; }
curl -sf --max-time 60 -H "Authorization: Bearer $key" http://127.0.0.1:3000/whoami
echo
log "sam local start-api answered GET /whoami"
