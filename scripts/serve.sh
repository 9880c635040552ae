#!/usr/bin/env bash
# Runs the whole API locally on http://127.0.0.1:3000 with the embedded backend (no
# services needed: state in data/state.sqlite, kept across restarts) and prints a
# development API key. Flags go to `serve`, e.g.
#   ./scripts/serve.sh --seed seed.json --addr 127.0.0.1:8080
#   ./scripts/serve.sh --backend aws      (DynamoDB and S3 at AWS_ENDPOINT_URL_*)
# ffprobe (for finalizing uploads) is installed from Debian's ffmpeg package when missing,
# yt-dlp (video-sharing sites) into .local/venv.
set -euo pipefail
cd "$(dirname "$0")/.."
infra/ffmpeg.sh
infra/emulators.sh install-python
export YT_DLP_PATH="${YT_DLP_PATH:-$PWD/.local/venv/bin/yt-dlp}"
exec cargo run --quiet --bin serve -- "$@"
