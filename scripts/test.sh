#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs ffmpeg (Debian package) when
# missing, installs and starts DynamoDB Local and moto (SQS/S3), runs every Rust test on
# the dev profile against them, then lints the SAM template. Emulators started here are
# stopped at the end (KEEP_EMULATORS=1 keeps them).
set -euo pipefail
cd "$(dirname "$0")/.."

infra/ffmpeg.sh
infra/emulators.sh install
infra/emulators.sh start
[ "${KEEP_EMULATORS:-0}" = 1 ] || trap 'infra/emulators.sh stop' EXIT
# A cold emulator is many times slower than DynamoDB; the service's time bounds are
# sized for DynamoDB, so the tests start on a warmed-up one.
infra/emulators.sh warm
eval "$(infra/emulators.sh env)"
# The timeline exporters' unit test reads their files back with opentimelineio.
export OTIO_PYTHON="$PWD/.local/venv/bin/python"
# yt-dlp (video-sharing sites) as the README commands install it.
export YT_DLP_PATH="$PWD/.local/venv/bin/yt-dlp"

# Each test run uses its own table, so runs never see each other's data.
export TEST_TABLE_NAME="tests-$(date +%s)-$$" TEST_BUCKET_NAME="tests-$(date +%s)-$$"
# The crash tests run `serve` as a process, and the Lambda tests (lambda_binaries.rs) run
# every function binary under a Runtime API emulator: built first, not inside a test.
cargo build -p functions --bins
cargo test --workspace "$@"
# The service description is valid OpenAPI and the API holds to it under Schemathesis
# (bounded: about 3 minutes); a filtered run (arguments given) skips it unless FUZZ=1.
if [ $# = 0 ] || [ "${FUZZ:-0}" = 1 ]; then scripts/fuzz.sh; fi

export SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="$AWS_REGION"
sam validate --lint --template template.yaml
