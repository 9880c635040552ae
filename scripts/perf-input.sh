# Sourced by the perf scripts of long outputs (perf-segments.sh, perf-parts.sh):
# make_long_input DIR MINUTES makes DIR/input.mp4, MINUTES of 1280x720 at 30 frames a
# second over a 300 Hz sine, unless it is there already at that length.
make_long_input() {
  local dir="$1" minutes="$2"
  if [ ! -s "$dir/input.mp4" ] || [ "$(cat "$dir/input.minutes" 2>/dev/null)" != "$minutes" ]; then
    echo "[perf] making a ${minutes}-minute 1280x720 input" >&2
    ffmpeg -v error -y -f lavfi -i "testsrc2=size=1280x720:rate=30" \
      -f lavfi -i "sine=frequency=300:sample_rate=48000" -t "$((minutes * 60))" \
      -c:v libx264 -preset veryfast -g 60 -pix_fmt yuv420p -c:a aac -shortest "$dir/input.mp4"
    echo "$minutes" >"$dir/input.minutes"
  fi
}
