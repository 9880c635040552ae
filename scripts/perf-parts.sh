#!/usr/bin/env bash
# Long edits made in parts through the run engine (issue 35), on `serve` (embedded
# backend, `serve` profile), against the same run made in one pass (--segment-seconds 0):
#  1. a 10-minute 1280×720 input, Clip → Reframe 9:16 → Captions, with 2 workers on the
#     machine's two cores: the run's wall time, in parts of SEGMENT_S seconds and whole;
#  2. the same with one worker on one core (taskset): each part's, the sound's and the
#     join's own time from serve's log — the longest part plus the sound and the join is
#     the wall time of a deployment with one function per part — against the whole run;
#  3. every ffmpeg's peak memory (serve's PATH starts with a wrapper under /usr/bin/time) and each
#     part's file against the input's size.
# The input is made the first time, in .local/perf/segments (git-ignored; shared with
# scripts/perf-segments.sh). Prints markdown for docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SEGMENT_S="${SEGMENT_S:-120}"
MINUTES="${MINUTES:-10}"
dir=".local/perf/segments"
mkdir -p "$dir"
log() { echo "[perf-parts] $*" >&2; }
command -v taskset >/dev/null && [ -x /usr/bin/time ] || { log "needs taskset and /usr/bin/time (util-linux, time)"; exit 1; }

. scripts/perf-serve.sh
infra/ffmpeg.sh
. scripts/perf-input.sh
make_long_input "$dir" "$MINUTES"
cargo build -q --profile serve --bin serve
export PERF_SERVE_BIN=target/serve/serve

# ffmpeg under /usr/bin/time, first on serve's PATH: one line per run, "<peak KB> <arguments>".
mkdir -p "$dir/bin"
wrapper="$PWD/$dir/bin/ffmpeg"
cat >"$wrapper" <<SH
#!/usr/bin/env bash
exec /usr/bin/time -a -o "$PWD/$dir/ffmpeg-rss.log" -f "%M %C" "$(command -v ffmpeg)" "\$@"
SH
chmod +x "$wrapper"

# measure NAME CPUS ARGS...: one run on a fresh serve pinned to CPUS; prints its seconds.
measure() {
  local name="$1" cpus="$2"
  shift 2
  : >"$dir/ffmpeg-rss.log"
  SERVE_LOG="shared::domain::runs::worker=info" PATH="$PWD/$dir/bin:$PATH" PERF_TASKSET="$cpus" \
    start_perf_serve 3906 "$@" >"$dir/$name.log" 2>&1
  python3 scripts/perf_parts.py "http://$ADDR" "$KEY" "$dir/input.mp4" "$MINUTES" >"$dir/$name.seconds"
  cp "$dir/ffmpeg-rss.log" "$dir/$name.rss"
  stop_perf_serve
  cat "$dir/$name.seconds"
}

log "two workers on two cores: whole, then in parts of ${SEGMENT_S}s"
whole2=$(measure whole2 0,1 --workers 2 --segment-seconds 0)
parts2=$(measure parts2 0,1 --workers 2 --segment-seconds "$SEGMENT_S")
log "one worker on one core: whole, then in parts"
whole1=$(measure whole1 0 --workers 1 --segment-seconds 0)
parts1=$(measure parts1 0 --workers 1 --segment-seconds "$SEGMENT_S")

python3 - "$dir" "$whole2" "$parts2" "$whole1" "$parts1" "$(stat -c %s "$dir/input.mp4")" "$MINUTES" <<'PY'
import re, sys
d, whole2, parts2, whole1, parts1 = sys.argv[1], *map(float, sys.argv[2:6])
input_bytes, minutes = int(sys.argv[6]), int(sys.argv[7])
def ms(name, message):
    """Each `message` line's ms= field in serve's log of run `name`."""
    out = []
    for line in open(f"{d}/{name}.log", errors="replace"):
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        if message in line:
            m = re.search(r"ms=([0-9.]+)", line)
            if m:
                out.append((line, float(m.group(1)) / 1000))
    return out
parts = ms("parts1", "task part")
# The sound is the last part of its task: the largest part number.
numbered = [(int(re.search(r"part=(\d+)", line).group(1)), s) for line, s in parts]
sound = max(numbered)[1]
picture_times = [s for n, s in numbered if n != max(numbered)[0]]
tasks = ms("parts1", "node task")
# The edit's task is claimed twice: planning (in parts), then the join (completed).
join = [s for line, s in tasks if "Clip" in line and "completed" in line][-1]
plan = [s for line, s in tasks if "Clip" in line and "in parts" in line][-1]
longest = max(picture_times)
def rss(name, pick):
    peaks = [int(line.split()[0]) for line in open(f"{d}/{name}.rss") if pick(line)]
    return max(peaks) / 1024 if peaks else 0
# Each part's file, as its worker stored it (the join deletes them).
part_sizes = [int(m.group(1)) for line in open(f"{d}/parts1.log", errors="replace")
              if "part stored" in line and (m := re.search(r"bytes=(\d+)", re.sub(r"\x1b\[[0-9;]*m", "", line)))]
print(f"| measure ({minutes}-minute 1280×720, Clip → Reframe 9:16 → Captions) | seconds | ratio |")
print("|---|---:|---:|")
print(f"| one pass, 2 workers on two cores (`--segment-seconds 0`) | {whole2:.1f} | 1.00 |")
print(f"| {len(picture_times)} parts + the sound by 2 workers, then the join | {parts2:.1f} | {parts2 / whole2:.2f} |")
print(f"| one pass, 1 worker on one core | {whole1:.1f} | 1.00 |")
print(f"| in parts, 1 worker on one core (all parts in turn) | {parts1:.1f} | {parts1 / whole1:.2f} |")
print(f"| planning + longest part + the sound + the join, each alone on one core | {plan + longest + sound + join:.1f} | {(plan + longest + sound + join) / whole1:.2f} |")
beside = plan + max(longest, sound) + join
print(f"| planning + the longer of the longest part and the sound (made beside the parts) + the join | {beside:.1f} | {beside / whole1:.2f} |")
print()
print(f"Each task alone on one core: planning {plan:.1f} s, parts {min(picture_times):.1f}–{longest:.1f} s, sound {sound:.1f} s, join {join:.1f} s.")
print()
print("| ffmpeg of | peak memory (MB) |")
print("|---|---:|")
print(f"| the one-pass render | {rss('whole1', lambda l: '-filter_complex' in l):.0f} |")
print(f"| a part's picture (largest) | {rss('parts1', lambda l: ' -an ' in l):.0f} |")
print(f"| the sound | {rss('parts1', lambda l: 'nullsink' in l and ' -an ' not in l):.0f} |")
print(f"| the join | {rss('parts1', lambda l: 'concat' in l):.0f} |")
print()
print(f"input: {input_bytes / 1e6:.0f} MB; a part's file: {min(part_sizes) / 1e6:.1f}–{max(part_sizes) / 1e6:.1f} MB "
      f"({len(part_sizes)} files: a part task's disk is its own file, whatever the input's length)")
PY
