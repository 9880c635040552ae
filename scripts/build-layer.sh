#!/usr/bin/env bash
# Builds the Lambda layer with the media tools (template.yaml's FfmpegLayerArn): ffmpeg,
# ffprobe, espeak-ng and yt-dlp under /opt/bin, from Debian 12's packages and PyPI only.
#
#   scripts/build-layer.sh [--arch arm64|amd64] [--out FILE]
#
# Each tool runs through the loader and libraries inside the layer (/opt/lib), never the
# function image's (Amazon Linux 2023's glibc is older than Debian's): its /opt/bin
# wrapper starts `/opt/lib/<loader> --library-path /opt/lib /opt/lib/real/<tool>`. The
# libraries are the DT_NEEDED closure of the tools (scripts/layer_needed.py), Python's
# standard library and yt-dlp are zips of compiled files, and espeak-ng keeps its English
# dictionary: the measured trade-offs are in docs/research/arm64-layer.md. The layer is
# checked before it is zipped (every tool runs from it alone through its wrapper, under
# qemu for arm64 on another machine: infra/qemu.sh registers it with binfmt_misc) and
# zipped reproducibly (sorted, fixed times); the zip is written under its final name
# only when whole. Work files go to .local/layer (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

arch=arm64
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="${2:?--arch needs arm64 or amd64}"; shift 2 ;;
    --out) out="${2:?--out needs a file}"; shift 2 ;;
    *) echo "usage: $0 [--arch arm64|amd64] [--out FILE]" >&2; exit 2 ;;
  esac
done
case "$arch" in
  arm64) triplet=aarch64-linux-gnu; loader=ld-linux-aarch64.so.1; machine=aarch64 ;;
  amd64) triplet=x86_64-linux-gnu; loader=ld-linux-x86-64.so.2; machine=x86_64 ;;
  *) echo "[build-layer] unknown --arch $arch: arm64 or amd64" >&2; exit 2 ;;
esac
# yt-dlp is pinned (it needs Python >= 3.11: Debian 12's 3.11 is the floor), with the CA
# bundle Python reads (Debian's CA path is not on Amazon Linux).
YT_DLP_VERSION=2026.10.26
CERTIFI_VERSION=2026.10.19.post1
PACKAGES=(ffmpeg espeak-ng espeak-ng-data fonts-dejavu-core python3.11-minimal libpython3.11-stdlib)
# Lambda takes 262,144,000 bytes unzipped for a function and its layers together.
LIMIT_BYTES=$((250 * 1000 * 1000))

work="$PWD/.local/layer/$arch"
out="${out:-$PWD/.local/layer/ffmpeg-layer-$arch.zip}"
log() { echo "[build-layer] $*" >&2; }
fail() { log "$*"; exit 1; }
# A step that fails without its own message still says where.
trap 'log "failed at line $LINENO: $BASH_COMMAND"' ERR

# Host tools: apt and dpkg-deb fetch and open the packages, readelf (binutils) reads any
# architecture's ELF, Python 3.11 compiles the standard library (the bytecode of Debian's
# 3.11), zip packs, and qemu runs arm64 tools on another machine.
missing=()
for tool in apt-get dpkg-deb readelf zip; do command -v "$tool" >/dev/null || missing+=("$tool"); done
host_python=$(command -v python3.11 || true)
[ -n "$host_python" ] || missing+=(python3.11)
if [ "$(uname -m)" != "$machine" ]; then
  command -v "qemu-$machine-static" >/dev/null || missing+=("qemu-user-static")
fi
if [ ${#missing[@]} -gt 0 ]; then
  fail "missing on this machine: ${missing[*]} (Debian: apt-get install binutils zip python3.11 qemu-user-static)"
fi
# The check (6.) starts the tools through their wrappers, which start the layer's loader:
# on another machine, the kernel must hand $arch programs to qemu.
if [ "$(uname -m)" != "$machine" ] && ! grep -qx enabled "/proc/sys/fs/binfmt_misc/qemu-$machine" 2>/dev/null; then
  fail "qemu-$machine is not registered with binfmt_misc, which the check of a $arch layer needs here: run infra/qemu.sh"
fi

# A build that fails leaves no zip under the final name, not even an earlier one.
rm -f "$out"

# 1. The packages, from an apt root of the layer's own: the host's dpkg is untouched and
#    the whole Depends closure is fetched (its status file is empty).
apt_root="$work/apt"
mkdir -p "$apt_root/etc/apt/sources.list.d" "$apt_root/etc/apt/apt.conf.d" "$apt_root/etc/apt/preferences.d" \
  "$apt_root/var/lib/apt/lists/partial" "$apt_root/var/lib/dpkg" "$apt_root/var/cache/apt/archives/partial"
: >"$apt_root/var/lib/dpkg/status"
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || fail "no $sources: the layer is fetched from Debian 12's archive as this machine's apt names it"
cp "$sources" "$apt_root/etc/apt/sources.list.d/"
cat >"$apt_root/apt.conf" <<CONF
Dir "$apt_root/";
Dir::State::status "$apt_root/var/lib/dpkg/status";
Dir::Etc::trusted "/etc/apt/trusted.gpg";
Dir::Etc::trustedparts "/etc/apt/trusted.gpg.d";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Install-Recommends "false";
APT::Install-Suggests "false";
CONF
export APT_CONFIG="$apt_root/apt.conf"
log "fetching ${PACKAGES[*]} ($arch) and what they depend on"
# apt's own first errors (apt runs untranslated, LC_ALL=C), then where the whole log is.
apt_failed() {
  fail "$1: $(awk '/^(E|Err):/ {print; err = 1; next} err && /^  / {print} {err = 0}' "$2" | head -n 4 | paste -sd' ') (all of it in $2)"
}
# --error-on=any: an index that cannot be fetched fails the build (apt-get would go on
# with the lists of an earlier build, or none).
LC_ALL=C apt-get -q update --error-on=any >"$work/apt-update.log" 2>&1 ||
  apt_failed "Debian's package index could not be fetched" "$work/apt-update.log"
rm -rf "$work/debs" "$work/full"
mkdir -p "$work/debs" "$work/full"
LC_ALL=C apt-get install -y -q --download-only -o Dir::Cache::archives="$work/debs/" "${PACKAGES[@]}" >"$work/apt.log" 2>&1 ||
  apt_failed "a package could not be fetched" "$work/apt.log"
for deb in "$work"/debs/*.deb; do
  dpkg-deb --show --showformat='${Package} ${Version} ${Architecture}\n' "$deb"
  dpkg-deb -x "$deb" "$work/full"
done | LC_ALL=C sort >"$work/packages.txt"
full="$work/full"

# 2. The tools and the libraries they need, flat under lib/ by their names.
opt="$work/opt"
rm -rf "$opt"
mkdir -p "$opt/bin" "$opt/lib/real" "$opt/share" "$opt/fonts" "$opt/etc/fonts"
tools=(ffmpeg ffprobe espeak-ng python3.11)
for tool in "${tools[@]}"; do cp "$full/usr/bin/$tool" "$opt/lib/real/$tool"; done
dynload="$full/usr/lib/python3.11/lib-dynload"
# Python's compiled modules, but for tests, terminals and databases yt-dlp does not use.
modules=()
for module in "$dynload"/*.so; do
  case "$(basename "$module")" in
    _test* | xx* | _ctypes_test* | _curses* | readline* | nis* | _dbm* | ossaudiodev* | _crypt*) ;;
    *) modules+=("$module") ;;
  esac
done
python3 scripts/layer_needed.py "$full" "$triplet" "${tools[@]/#/$full/usr/bin/}" "${modules[@]}" >"$work/closure.txt" ||
  fail "a library the tools need is in no package fetched (above)"
while IFS=$'\t' read -r name path; do cp -L "$path" "$opt/lib/$name"; done <"$work/closure.txt"
cp -L "$full/lib/$triplet/$loader" "$opt/lib/$loader"

# 3. Python: the standard library and yt-dlp as zips of compiled files (/opt is read
#    only, so sources would be compiled again at every start), the compiled modules kept.
staging="$work/python"
rm -rf "$staging"
mkdir -p "$staging/std" "$staging/yt-dlp" "$opt/lib/python3.11/lib-dynload"
cp -a "$full/usr/lib/python3.11/." "$staging/std/"
rm -rf "$staging/std/lib-dynload" "$staging/std/dist-packages"
for unused in idlelib turtledemo pydoc_data ensurepip lib2to3 unittest tkinter venv distutils sqlite3/test ctypes/test; do
  rm -rf "${staging:?}/std/$unused"
done
cp "${modules[@]}" "$opt/lib/python3.11/lib-dynload/"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$work/wheels" \
  "yt-dlp==$YT_DLP_VERSION" "certifi==$CERTIFI_VERSION" >"$work/pip.log" 2>&1 ||
  fail "yt-dlp $YT_DLP_VERSION or certifi could not be fetched from PyPI: see $work/pip.log"
python3 -m pip install -q --no-deps --no-compile --target "$staging/yt-dlp" \
  "$work/wheels/yt_dlp-$YT_DLP_VERSION-py3-none-any.whl" "$work/wheels/certifi-$CERTIFI_VERSION-py3-none-any.whl" \
  >>"$work/pip.log" 2>&1 || fail "yt-dlp could not be unpacked: see $work/pip.log"
rm -rf "$staging/yt-dlp/bin" "$staging/yt-dlp/share" "$staging"/yt-dlp/*.dist-info
for part in std yt-dlp; do
  "$host_python" -m compileall -q -b -j1 --invalidation-mode unchecked-hash -d / "$staging/$part" >/dev/null ||
    fail "compiling $part failed"
  find "$staging/$part" -name '*.py' -delete
  find "$staging/$part" -name __pycache__ -prune -exec rm -rf {} +
done
zip_tree() { (cd "$1" && find . -mindepth 1 | sed 's|^\./||' | LC_ALL=C sort | TZ=UTC zip -q -X -9 -@ "$2"); }
normalise() { TZ=UTC find "$1" -exec touch -h -d @315532800 {} +; }
for part in std yt-dlp; do normalise "$staging/$part"; done
zip_tree "$staging/std" "$opt/lib/python311.zip"
zip_tree "$staging/yt-dlp" "$opt/lib/yt-dlp.zip"

# 4. espeak-ng's data with its English dictionary, and the DejaVu fonts in /opt/fonts
#    (template.yaml's GENERATION_FONT names /opt/fonts/DejaVuSans.ttf).
cp -a "$full/usr/lib/$triplet/espeak-ng-data" "$opt/share/espeak-ng-data"
find "$opt/share/espeak-ng-data" -maxdepth 1 -name '*_dict' ! -name en_dict -delete
cp "$full"/usr/share/fonts/truetype/dejavu/*.ttf "$opt/fonts/"
cat >"$opt/etc/fonts/fonts.conf" <<'XML'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>/opt/fonts</dir>
  <cachedir>/tmp/fontconfig-cache</cachedir>
</fontconfig>
XML

# 5. The wrappers: each starts its tool through the layer's loader with the layer's
#    libraries (--library-path, never an exported LD_LIBRARY_PATH, which would reach the
#    image's own programs), from wherever the layer is (/opt on Lambda).
wrapper() {
  local name="$1" real="$2" env="$3"
  printf '#!/bin/sh\nd=${0%%/bin/*}\n%bexec "$d/lib/%s" --library-path "$d/lib" "$d/lib/real/%s" "$@"\n' \
    "$env" "$loader" "$real" >"$opt/bin/$name"
}
wrapper ffmpeg ffmpeg 'export FONTCONFIG_FILE="$d/etc/fonts/fonts.conf"\n'
wrapper ffprobe ffprobe ''
wrapper espeak-ng espeak-ng 'export ESPEAK_DATA_PATH="$d/share"\n'
wrapper python3 python3.11 \
  'export PYTHONHOME="$d" PYTHONPATH="$d/lib/yt-dlp.zip" PYTHONDONTWRITEBYTECODE=1 LC_ALL=C.UTF-8\n'
printf '#!/bin/sh\nexec "${0%%/*}/python3" -m yt_dlp --no-cache-dir "$@"\n' >"$opt/bin/yt-dlp"
chmod 755 "$opt"/bin/*

# 6. Each tool runs from the layer alone: its loader, its libraries, nothing of this
#    machine's: each is started through its wrapper, as a function starts it, with an
#    environment of its own and, under qemu, a root with nothing in it.
log "checking that each tool runs from the layer alone"
empty_root="$work/empty-root"
mkdir -p "$empty_root"
in_layer() {
  local tool="$1"
  shift
  env -i QEMU_LD_PREFIX="$empty_root" "$opt/bin/$tool" "$@"
}
check="$work/check"
rm -rf "$check"
mkdir -p "$check"
command -v ffmpeg >/dev/null || fail "the check makes its test video with this machine's ffmpeg: none (infra/ffmpeg.sh)"
ffmpeg -v error -y -f lavfi -i testsrc=size=320x240:rate=30:duration=2 -f lavfi -i sine=duration=2 \
  -shortest -c:v libx264 -pix_fmt yuv420p -c:a aac "$check/in.mp4"
versions=()
ffmpeg_version=$(in_layer ffmpeg -version) || fail "the layer's ffmpeg does not run"
versions+=("$(echo "$ffmpeg_version" | awk 'NR == 1 {print "ffmpeg " $3}')")
probed=$(in_layer ffprobe -v error -show_entries stream=codec_name,width,height -of csv=p=0 "$check/in.mp4") ||
  fail "the layer's ffprobe does not run"
[ "$(echo "$probed" | paste -sd' ')" = "h264,320,240 aac" ] || fail "the layer's ffprobe read the test video as: $probed"
in_layer ffmpeg -v error -y -i "$check/in.mp4" \
  -vf "crop=ih*9/16:ih,drawtext=fontfile=$opt/fonts/DejaVuSans.ttf:text=layer" \
  -c:v libx264 -c:a aac "$check/reframed.mp4" || fail "the layer's ffmpeg could not render a Reframe"
in_layer espeak-ng -v en -w "$check/speech.wav" "The layer speaks." 2>"$check/espeak.err" ||
  fail "the layer's espeak-ng does not run"
[ ! -s "$check/espeak.err" ] || fail "the layer's espeak-ng complained: $(cat "$check/espeak.err")"
[ "$(stat -c %s "$check/speech.wav")" -gt 20000 ] || fail "the layer's espeak-ng wrote no speech"
espeak_version=$(in_layer espeak-ng --version) || fail "the layer's espeak-ng does not run"
versions+=("$(echo "$espeak_version" | sed -n 's/^eSpeak NG text-to-speech: \([^ ]*\).*/espeak-ng \1/p')")
yt_dlp=$(in_layer yt-dlp --version) ||
  fail "the layer's yt-dlp does not run"
[ "$yt_dlp" = "$YT_DLP_VERSION" ] || fail "the layer's yt-dlp says it is $yt_dlp, not $YT_DLP_VERSION"
versions+=("yt-dlp $yt_dlp" "$(grep -E '^python3.11-minimal ' "$work/packages.txt" | awk '{print "python " $2}')")

# 7. The size Lambda counts, then the zip: fixed times and sorted names, so two builds of
#    the same packages are the same file; written aside, then renamed when whole.
unzipped=$(du -sb "$opt" | cut -f1)
[ "$unzipped" -le "$LIMIT_BYTES" ] ||
  fail "the layer is $unzipped bytes unzipped, over $LIMIT_BYTES: Lambda takes 262,144,000 for a function and its layers together"
normalise "$opt"
mkdir -p "$(dirname "$out")"
rm -f "$out.partial"
trap 'rm -f "$out.partial"' EXIT
zip_tree "$opt" "$out.partial"
mv "$out.partial" "$out"
zipped=$(stat -c %s "$out")
log "$out: $((zipped / 1000000)) MB zipped, $((unzipped / 1000000)) MB unzipped (goal ≤ 250 MB)"
printf '[build-layer] %s\n' "${versions[@]}" >&2
log "packages: $work/packages.txt ($(wc -l <"$work/packages.txt") packages); sha256 $(sha256sum "$out" | cut -c1-16)…"
