#!/usr/bin/env bash
# The console (console/): its packages, its unit tests, the committed bundle checked
# against a fresh build, and the browser test.
#
#   scripts/console.sh install   npm ci in console/, Debian's Chromium (infra/chromium.sh)
#   scripts/console.sh check     type check and unit tests (Vitest); a fresh build of
#                                console/ must equal the committed console/dist, which
#                                the service embeds (cargo build needs no npm)
#   scripts/console.sh build     rebuilds console/dist after a change of console/src
#   scripts/console.sh browser   the browser test (console/e2e) against a serve of its own
#                                (target/debug/serve, built beforehand); screenshots and
#                                figures in .local/console
#   scripts/console.sh test      check, then browser
set -euo pipefail
cd "$(dirname "$0")/.."

install() {
  command -v npm >/dev/null 2>&1 || { echo "[console] npm is missing: install Node.js 20 or later" >&2; exit 1; }
  (cd console && npm ci --no-audit --no-fund --loglevel=error)
  infra/chromium.sh
}

check() {
  (cd console && npx tsc --noEmit && npx vitest run)
  local fresh
  fresh="$(mktemp -d)"
  (cd console && npx vite build --logLevel warn --outDir "$fresh" && node scripts/compress.mjs "$fresh")
  if ! diff -r "$fresh" console/dist >/dev/null; then
    diff -r "$fresh" console/dist | head -n 5 >&2 || true
    rm -rf "$fresh"
    echo "[console] console/dist is not a fresh build of console/: run scripts/console.sh build and commit console/dist" >&2
    exit 1
  fi
  rm -rf "$fresh"
  echo "[console] console/dist equals a fresh build of console/" >&2
}

build() {
  (cd console && npm run build)
}

browser() {
  [ -x target/debug/serve ] || { echo "[console] target/debug/serve is missing: cargo build --bin serve" >&2; exit 1; }
  mkdir -p .local/console
  (cd console && OUT="$PWD/../.local/console" SERVE_BINARY="$PWD/../target/debug/serve" \
    CHROMIUM="$(command -v chromium)" node e2e/console.e2e.mjs)
}

case "${1:-}" in
  install) install ;;
  check) check ;;
  build) build ;;
  browser) browser ;;
  test) check && browser ;;
  *) echo "usage: scripts/console.sh install|check|build|browser|test" >&2; exit 2 ;;
esac
