#!/usr/bin/env bash
# Renders made in segments against the same render made whole (issue 35), with the
# service's own toolkit (shared/examples/segments.rs), on this machine:
#  1. a 10-minute 1280×720 input, Clip → Reframe 9:16 → Captions, whole and in parts of
#     SEGMENT_S seconds done by 2 workers at once, then joined (wall time, both);
#  2. the same on one core (taskset): the whole render, and each part, the sound and the
#     join alone — the longest part plus the sound and the join is the wall time of a
#     deployment with one function per part;
#  3. each task's peak memory (/usr/bin/time) and its output's size, against the input's.
# The input is made by ffmpeg the first time, in .local/perf/segments (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
SEGMENT_S="${SEGMENT_S:-60}"
MINUTES="${MINUTES:-10}"
dir=".local/perf/segments"
mkdir -p "$dir"
log() { echo "[perf-segments] $*" >&2; }

. scripts/perf-input.sh
make_long_input "$dir" "$MINUTES"
# A cue every 5 s, each 3 s long.
python3 - "$dir/captions.srt" "$MINUTES" <<'PY'
import sys
path, minutes = sys.argv[1], int(sys.argv[2])
def t(s): return "%02d:%02d:%02d,000" % (s // 3600, s // 60 % 60, s % 60)
with open(path, "w") as f:
    for i, s in enumerate(range(0, minutes * 60, 5)):
        f.write("%d\n%s --> %s\nCaption number %d\n\n" % (i + 1, t(s), t(s + 3), i + 1))
PY
command -v taskset >/dev/null && [ -x /usr/bin/time ] || { log "needs taskset and /usr/bin/time (util-linux, time)"; exit 1; }
cargo build -q -p shared --example segments
bench="${CARGO_TARGET_DIR:-target}/debug/examples/segments"
run() { /usr/bin/time -f "%M" -o "$dir/rss" "$@"; }
parts=$("$bench" "$dir" "$SEGMENT_S" count | awk '{print $2}')
log "$parts parts of ${SEGMENT_S}s"

log "two workers on two cores"
whole=$(run taskset -c 0,1 "$bench" "$dir" "$SEGMENT_S" whole | awk '{print $2}'); whole_rss=$(cat "$dir/rss")
parallel=$(run taskset -c 0,1 "$bench" "$dir" "$SEGMENT_S" parallel 2 | awk '{print $2}')

log "one core: the whole render, then each task alone"
whole1=$(run taskset -c 0 "$bench" "$dir" "$SEGMENT_S" whole | awk '{print $2}')
longest=0; part_rss=0
for k in $(seq 0 $((parts - 1))); do
  t=$(run taskset -c 0 "$bench" "$dir" "$SEGMENT_S" part "$k" | awk '{print $2}')
  rss=$(cat "$dir/rss"); [ "$rss" -gt "$part_rss" ] && part_rss=$rss
  longest=$(python3 -c "print(max($longest, $t))")
done
sound1=$(run taskset -c 0 "$bench" "$dir" "$SEGMENT_S" sound | awk '{print $2}'); sound_rss=$(cat "$dir/rss")
join1=$(run taskset -c 0 "$bench" "$dir" "$SEGMENT_S" join | awk '{print $2}'); join_rss=$(cat "$dir/rss")

input_mb=$(du -m "$dir/input.mp4" | cut -f1)
part_mb=$(du -m "$dir/part-0.mp4" | cut -f1)
python3 - <<PY
whole, parallel, whole1 = $whole, $parallel, $whole1
longest, sound1, join1 = $longest, $sound1, $join1
print("| measure | seconds | ratio |")
print("|---|---:|---:|")
print(f"| whole, two cores | {whole:.1f} | 1.00 |")
print(f"| $parts parts + sound by 2 workers, then the join | {parallel:.1f} | {parallel / whole:.2f} |")
print(f"| whole, one core | {whole1:.1f} | 1.00 |")
print(f"| longest part + the sound + the join, one core each | {longest + sound1 + join1:.1f} | {(longest + sound1 + join1) / whole1:.2f} |")
print(f"| longest part + the join (sound beside the parts) | {longest + join1:.1f} | {(longest + join1) / whole1:.2f} |")
print()
print("| task | peak memory (MB) |")
print("|---|---:|")
print(f"| whole | {$whole_rss / 1024:.0f} |")
print(f"| a part (largest of $parts) | {$part_rss / 1024:.0f} |")
print(f"| sound | {$sound_rss / 1024:.0f} |")
print(f"| join | {$join_rss / 1024:.0f} |")
print()
print(f"input: {$input_mb} MB; a part's output: {$part_mb} MB (a part reads its window by seeking; it writes only its own file)")
PY
