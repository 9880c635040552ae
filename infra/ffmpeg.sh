#!/usr/bin/env bash
# Makes sure ffmpeg and ffprobe are on the PATH, with a font for burned-in captions
# (libass): the uploads flow probes files with ffprobe, and edit nodes render with
# ffmpeg. Installs Debian's packages when missing (as root), or says how to. Also the
# openssl command, with which a test makes the certificates of a local HTTPS endpoint,
# and what the local generation providers use: espeak-ng (speech) and DejaVu Sans
# (prompts drawn on generated pictures). And jq and curl, with which the README's tour
# (run by tests/tests/api/readme.rs) reads the API's answers.
set -euo pipefail

packages=()
command -v ffprobe >/dev/null 2>&1 && command -v ffmpeg >/dev/null 2>&1 || packages+=(ffmpeg)
[ -n "$(fc-list 2>/dev/null | head -n 1)" ] || packages+=(fontconfig)
# The font local generation draws prompts with (GENERATION_FONT's default), and speech.
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || packages+=(fonts-dejavu-core)
command -v espeak-ng >/dev/null 2>&1 || packages+=(espeak-ng)
command -v openssl >/dev/null 2>&1 || packages+=(openssl)
command -v jq >/dev/null 2>&1 || packages+=(jq)
command -v curl >/dev/null 2>&1 || packages+=(curl)
if [ ${#packages[@]} = 0 ]; then
  exit 0
fi
echo "[ffmpeg] installing Debian's ${packages[*]} (about 30 s)" >&2
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
else
  echo "[ffmpeg] install ffmpeg (which includes ffprobe) with your package manager and retry" >&2
  exit 1
fi
command -v ffprobe >/dev/null 2>&1 || { echo "[ffmpeg] ffprobe is still missing after the install" >&2; exit 1; }
