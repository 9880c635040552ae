#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed, for the console's browser test
# (console/e2e, driven by playwright-core, which downloads no browser of its own).
# Installs the package when missing (as root or with sudo), or says how to.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
echo "[chromium] installing Debian's chromium (about a minute)" >&2
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
else
  echo "[chromium] install Chromium with your package manager (the command 'chromium') and retry" >&2
  exit 1
fi
command -v chromium >/dev/null 2>&1 || { echo "[chromium] chromium is still missing after the install" >&2; exit 1; }
