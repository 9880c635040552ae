#!/usr/bin/env bash
# Makes arm64 Linux programs run on this x86_64 machine, as the arm64 tests need them
# (tests/tests/api/arm64.rs: the Lambda layer's tools and the arm64 function binaries):
# Debian's qemu-user-static, registered with the kernel's binfmt_misc, so that an arm64
# program started by another (node-worker starting the layer's /opt/bin/ffmpeg, whose
# shell wrapper starts the layer's loader) runs under qemu too. Also binutils and zip,
# with which scripts/build-layer.sh reads the packages' ELF files and packs the layer.
# Installs the packages when missing (as root, or through sudo) and mounts binfmt_misc
# when the machine has not; says what to do when it cannot.
set -euo pipefail

log() { echo "[qemu] $*" >&2; }
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    log "needs root (or sudo) for: $*"
    exit 1
  fi
}

packages=()
command -v qemu-aarch64-static >/dev/null 2>&1 || packages+=(qemu-user-static)
command -v update-binfmts >/dev/null 2>&1 || packages+=(binfmt-support)
command -v readelf >/dev/null 2>&1 || packages+=(binutils)
command -v zip >/dev/null 2>&1 || packages+=(zip)
command -v unzip >/dev/null 2>&1 || packages+=(unzip)
if [ ${#packages[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || { log "install ${packages[*]} with your package manager and retry"; exit 1; }
  log "installing Debian's ${packages[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

binfmt=/proc/sys/fs/binfmt_misc
if ! [ -e "$binfmt/register" ]; then
  log "mounting binfmt_misc on $binfmt"
  as_root mount -t binfmt_misc binfmt_misc "$binfmt" ||
    { log "binfmt_misc cannot be mounted here: arm64 programs can only be run by naming qemu-aarch64-static"; exit 1; }
fi
if ! grep -qx enabled "$binfmt/qemu-aarch64" 2>/dev/null; then
  log "registering qemu-aarch64 with binfmt_misc"
  as_root update-binfmts --enable qemu-aarch64 ||
    { log "qemu-aarch64 could not be registered with binfmt_misc (update-binfmts --enable qemu-aarch64)"; exit 1; }
fi
grep -qx enabled "$binfmt/qemu-aarch64" || { log "qemu-aarch64 is not enabled in $binfmt"; exit 1; }
