#!/usr/bin/env bash
# Deploys the service to an AWS account in one command:
#   1. builds every function for arm64 as `sam build` does (scripts/build-lambda.sh, the
#      release profile) and the media layer (scripts/build-layer.sh);
#   2. checks that the keys the parameters need are given (below) or already stored;
#   3. publishes the layer from SAM's artifacts bucket, as `<stack>-media-tools` (a
#      version with the same content is used again);
#   4. `sam deploy` of template.yaml, each function's code the folder its binary was
#      built in (as `sam build` leaves it), with the layer's ARN as FfmpegLayerArn and
#      the parameters given;
#   5. puts the keys given into the stack's secrets.
#
#   scripts/deploy.sh [--stack NAME] [--region REGION] [--bucket NAME] [--dry-run] [--no-build]
#                     [--functions DIR] [Name=Value ...]
#
#   --stack      the CloudFormation stack (samconfig.toml's stack_name, video-workflow)
#   --region     the AWS region (default: AWS_REGION, or the profile's)
#   --bucket     the S3 bucket for the layer and the functions' code (default: the one
#                SAM manages, made on first use: `sam deploy --resolve-s3`)
#   --dry-run    create the change set and show it, execute nothing (`sam deploy
#                --no-execute-changeset`), write no secret; the layer is published (a
#                layer version costs nothing until a function uses it)
#   --no-build   deploy the functions and the layer built last (target/lambda,
#                .local/layer/ffmpeg-layer-arm64.zip)
#   --functions  with --no-build: the folder of the built functions (<function>/bootstrap)
#   Name=Value   template parameters, e.g. BillingProvider=sandbox SegmentSeconds=120; a
#                parameter not given keeps the stack's value (the template's default on a
#                first deploy), as `sam deploy` does
#
# Credentials: as the AWS CLI reads them (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...). Keys,
# read from the environment only (never arguments, which shells keep):
#   STRIPE_API_KEY, STRIPE_WEBHOOK_SECRET  BillingKeysSecret; needed by BillingProvider=stripe
#                                          (the default) on the first deploy
#   OPENAI_API_KEY                         ProviderKeysSecret; needed by ImageProvider=openai
#                                          or SpeechProvider=openai
#   GEMINI_API_KEY                         ProviderKeysSecret; needed by VideoProvider=gemini
# A later deploy keeps the keys stored unless new ones are given.
set -euo pipefail
cd "$(dirname "$0")/.."

SAM_CLI="aws-sam-cli==1.170.0"
VENV=.local/venv
stack=video-workflow
bucket=""
functions="${CARGO_TARGET_DIR:-target}/lambda"
dry_run=0
build=1
overrides=()
log() { echo "[deploy] $*" >&2; }
usage() { sed -n '13,15p' "$0" | sed 's/^# *//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --stack) stack="${2:?--stack needs a name}"; shift 2 ;;
    --bucket) bucket="${2:?--bucket needs a name}"; shift 2 ;;
    --region) export AWS_REGION="${2:?--region needs a region}" AWS_DEFAULT_REGION="$2"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --no-build) build=0; shift ;;
    --functions) functions="${2:?--functions needs a folder}"; shift 2 ;;
    *=*) overrides+=("$1"); shift ;;
    *) usage ;;
  esac
done
trap 'log "failed at line $LINENO: $BASH_COMMAND"' ERR

if ! [ -x "$VENV/bin/sam" ]; then
  log "installing $SAM_CLI into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "$SAM_CLI"
fi
export SAM_CLI_TELEMETRY=0
# boto3 reads the region from AWS_DEFAULT_REGION (or the profile), the SDKs from AWS_REGION.
if [ -n "${AWS_REGION:-}" ] && [ -z "${AWS_DEFAULT_REGION:-}" ]; then export AWS_DEFAULT_REGION="$AWS_REGION"; fi
python=("$VENV/bin/python" scripts/deploy.py)

# Before anything long: the keys, and that credentials and a region are there.
"${python[@]}" check "$stack" "${overrides[@]}"

layer_zip=.local/layer/ffmpeg-layer-arm64.zip
if [ "$build" = 1 ]; then
  # The layer's check runs its tools: ffmpeg makes the test video, and on another
  # machine qemu runs them.
  infra/ffmpeg.sh
  [ "$(uname -m)" = aarch64 ] || infra/qemu.sh
  scripts/build-layer.sh --arch arm64 --out "$layer_zip"
  scripts/build-lambda.sh
fi
[ -f "$layer_zip" ] || { log "no $layer_zip: run without --no-build"; exit 1; }
template=.local/deploy/template.yaml
"${python[@]}" template "$functions" "$template"

layer_arn=$("${python[@]}" layer "$layer_zip" "$stack-media-tools" $bucket)
log "layer: $layer_arn"

artifacts=(--resolve-s3)
[ -z "$bucket" ] || artifacts=(--s3-bucket "$bucket" --s3-prefix "$stack")
deploy=("$VENV/bin/sam" deploy --template-file "$template" --stack-name "$stack" "${artifacts[@]}" --no-progressbar
  --capabilities CAPABILITY_IAM --no-fail-on-empty-changeset
  --parameter-overrides "FfmpegLayerArn=$layer_arn" "${overrides[@]}")
if [ "$dry_run" = 1 ]; then
  "${deploy[@]}" --no-execute-changeset
  log "dry run: the change set above was created and not executed; no secret was written"
  exit 0
fi
"${deploy[@]}" --no-confirm-changeset
"${python[@]}" secrets "$stack"
"$VENV/bin/sam" list stack-outputs --stack-name "$stack" --output table
