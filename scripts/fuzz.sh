#!/usr/bin/env bash
# Checks the service description and fuzzes the API against it:
#   1. docs/openapi.json must be valid OpenAPI 3.1 (openapi-spec-validator);
#   2. Schemathesis sends every operation generated requests, valid and invalid, to a
#      `serve` on SQLite authenticated as a seeded organization, and fails on any 5xx, a
#      request the document forbids that the service accepts (so each context's
#      request schemas stay as strict as its parsers), a status or body the document
#      does not describe, a wrong content type or header, a
#      405 without `Allow`, or an answer slower than FUZZ_MAX_RESPONSE_SECONDS.
# Repeatable: the same seed each run (FUZZ_SEED to change it). Bounded: FUZZ_EXAMPLES cases per operation and phase, FUZZ_SECONDS in all (default 180).
# Installs both tools from PyPI into .local/fuzz (their own venv: Schemathesis pins
# versions that aws-sam-cli's venv does not share). Needs target/debug/serve (test.sh
# builds it). Reports go to .local/fuzz-report.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.local/fuzz
PACKAGES=("schemathesis==4.32.5" "openapi-spec-validator==0.9.0")
SECONDS_BUDGET="${FUZZ_SECONDS:-180}"
EXAMPLES="${FUZZ_EXAMPLES:-25}"
MAX_RESPONSE="${FUZZ_MAX_RESPONSE_SECONDS:-2}"
PORT="${FUZZ_PORT:-3917}"
SERVE="${SERVE_BIN:-${CARGO_TARGET_DIR:-target}/debug/serve}"

log() { echo "[fuzz] $*" >&2; }

installed() {
  "$VENV/bin/python" - "${PACKAGES[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != pinned for name, pinned in (p.split("==") for p in sys.argv[1:])))
PY
}
if ! installed; then
  log "installing ${PACKAGES[*]} into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PACKAGES[@]}"
fi

log "validating docs/openapi.json"
"$VENV/bin/openapi-spec-validator" docs/openapi.json

[ -x "$SERVE" ] || { log "$SERVE is missing: cargo build --bin serve"; exit 1; }
work="$(mktemp -d)"
serve_pid=""
cleanup() {
  if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
key="fuzz-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cat >"$work/seed.json" <<EOF
{"organizations": [{"id": "5f2d8c1e-3b7a-4c9d-8e6f-0a1b2c3d4e5f", "name": "Fuzz", "slug": "fuzz",
  "api_access": true, "plan": "free", "credits": 1000, "api_keys": ["$key"],
  "workspaces": [{"id": "6a3e9d2f-4c8b-4dae-9f70-1b2c3d4e5f60", "name": "Main", "primary": true}]}]}
EOF
# The SSRF guard of a deployment: generated callback and input URLs reach nothing local.
"$SERVE" --addr "127.0.0.1:$PORT" --data-dir "$work/data" --seed "$work/seed.json" \
  --allow-private-urls false --workers 1 >"$work/serve.log" 2>&1 &
serve_pid=$!
# Ready when it answers this run's key: another process on the port (a `serve` left
# running) would answer 401 to every request, which the document allows.
for _ in $(seq 1 200); do
  kill -0 "$serve_pid" 2>/dev/null || { cat "$work/serve.log" >&2; log "serve did not start"; exit 1; }
  curl -fsS -H "Authorization: Bearer $key" "http://127.0.0.1:$PORT/whoami" -o /dev/null 2>/dev/null && break
  sleep 0.1
done
curl -fsS -H "Authorization: Bearer $key" "http://127.0.0.1:$PORT/whoami" -o /dev/null \
  || { log "serve on port $PORT does not answer this run's key"; exit 1; }
curl -fsS "http://127.0.0.1:$PORT/openapi.json" | cmp -s - docs/openapi.json \
  || { log "serve answers another document than docs/openapi.json"; exit 1; }

log "fuzzing every operation: $EXAMPLES cases each, at most ${SECONDS_BUDGET}s"
# One worker: with two threads, Hypothesis's descriptions of its strategies call
# ast.parse concurrently, which CPython 3.11 (before 3.11.8) may answer with
# "SystemError: AST constructor recursion depth mismatch", a Runtime Error of the tool
# that fails the run although the API answered well.
started=$(date +%s)
status=0
"$VENV/bin/st" --config-file scripts/schemathesis.toml run docs/openapi.json \
  --url "http://127.0.0.1:$PORT" \
  --header "Authorization: Bearer $key" \
  --checks negative_data_rejection,not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,unsupported_method \
  --max-response-time "$MAX_RESPONSE" \
  --max-examples "$EXAMPLES" \
  --max-time "$SECONDS_BUDGET" \
  --request-timeout 10 \
  --workers 1 \
  --seed "${FUZZ_SEED:-20261126}" \
  --generation-database none \
  --no-color \
  --report junit --report-dir .local/fuzz-report \
  || status=$?
log "schemathesis took $(($(date +%s) - started))s"
if [ "$status" != 0 ]; then
  log "serve's log:"; tail -n 50 "$work/serve.log" >&2
  grep -i "panicked" "$work/serve.log" >&2 || true
fi
exit "$status"
