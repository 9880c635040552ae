#!/usr/bin/env bash
# Builds the Lambda artifacts as `sam build` does for `BuildMethod: rust-cargolambda`:
# cargo-lambda, release profile, arm64 (provided.al2023), zig as the cross linker, one
# `bootstrap` per function under target/lambda/<function>/. Then prints each function's
# size, stripped and zipped (what Lambda downloads at a cold start).
#
#   usage: scripts/build-lambda.sh [--profile NAME] [function ...]
#
# Every function of template.yaml by default. `--profile lambda-test` builds the same code
# unoptimized into target/functions-lambda-test/<function>/, as the test script does for
# the arm64 functions it runs under qemu (Cargo.toml): never where scripts/deploy.sh
# takes the release ones from.
#
# Installs cargo-lambda and zig from PyPI into .local/lambda (their own venv; BUILD.md:
# 9 s, where `cargo install cargo-lambda` takes 21 minutes) and needs the rustup target
# aarch64-unknown-linux-gnu, which it adds when missing (from the toolchain server). A
# cold release build of every function takes 34 minutes on 2 cores, lambda-test 3.3
# (docs/performance.md, "The arm64 artifacts").
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.local/lambda
PACKAGES=("cargo-lambda==1.9.2" "ziglang==0.13.0.post1")
TARGET=aarch64-unknown-linux-gnu

log() { echo "[build-lambda] $*" >&2; }

installed() {
  "$VENV/bin/python" - "${PACKAGES[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(name) != pinned for name, pinned in (p.split("==") for p in sys.argv[1:])))
PY
}
if ! [ -x "$VENV/bin/cargo-lambda" ] || ! installed; then
  log "installing ${PACKAGES[*]} into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PACKAGES[@]}"
fi
if ! rustup target list --installed | grep -qx "$TARGET"; then
  log "adding the rustup target $TARGET"
  rustup target add "$TARGET" || { log "the rustup target $TARGET could not be added (the toolchain server?)"; exit 1; }
fi

target_dir="${CARGO_TARGET_DIR:-target}"
profile=(--release)
lambda_dir="$target_dir/lambda"
if [ "${1:-}" = --profile ]; then
  profile=(--profile "${2:?--profile needs a name of Cargo.toml}")
  # Not target/<profile>: cargo keeps a custom profile's host artifacts there.
  [ "$2" = release ] || lambda_dir="$target_dir/functions-$2"
  shift 2
fi
if [ $# -gt 0 ]; then
  functions=("$@")
else
  mapfile -t functions < <(sed -n 's/^ *Binary: *//p' template.yaml | sort -u)
fi
args=()
for function in "${functions[@]}"; do args+=(--bin "$function"); done

# zig is found through the venv's python3, which must come first on the PATH.
started=$(date +%s)
build() { PATH="$PWD/$VENV/bin:$PATH" cargo lambda build "${profile[@]}" --arm64 --lambda-dir "$lambda_dir" "$@"; }
# zig builds the target's C runtime files and glibc stubs into its cache (~/.cache/zig) at
# its first link, and cargo-zigbuild writes its own files beside them. On a fresh machine,
# two links at once (cargo runs as many as it has cores) may trip over each other's
# half-made files, as zig's and cargo-zigbuild's trackers report. A CI run's first two
# links failed together (its log cut before the linker's words); five cold-cache builds
# here passed. The first function is built alone, which makes the cache, then the others
# (only each one's own small crate and its link are left by then).
build "${args[@]:0:2}"
[ "${#args[@]}" -le 2 ] || build "${args[@]}"
log "built ${#functions[@]} functions in $(($(date +%s) - started)) s"

printf '| function | bootstrap (MB) | zipped (MB) |\n|---|---:|---:|\n'
for function in "${functions[@]}"; do
  file="$lambda_dir/$function/bootstrap"
  [ -f "$file" ] || { log "missing $file"; exit 1; }
  bytes=$(stat -c %s "$file")
  # A test build's zipped size says nothing of a deployment's: not measured.
  zipped=0
  [ "${profile[0]}" != --release ] || zipped=$(python3 - "$file" <<'PY'
import io, sys, zipfile
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
    archive.write(sys.argv[1], "bootstrap")
print(len(buffer.getvalue()))
PY
)
  awk -v f="$function" -v b="$bytes" -v z="$zipped" \
    'BEGIN { printf "| %s | %.1f | %s |\n", f, b / 1e6, z == 0 ? "-" : sprintf("%.1f", z / 1e6) }'
done
