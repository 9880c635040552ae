#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs ffmpeg (Debian package) when
# missing, installs and starts DynamoDB Local and moto (SQS/S3), runs every Rust test on
# the dev profile against them, then runs the deployment's arm64 artifacts under qemu (the
# media layer, built from Debian's packages, and four function binaries) and lints the
# SAM template, and tests the console in Chromium. The build is linted by clippy as it
# compiles (LINT=0 builds without). Emulators started here are stopped at the end
# (KEEP_EMULATORS=1 keeps them).
set -euo pipefail
cd "$(dirname "$0")/.."

# Where the time goes (docs/performance.md): each step's seconds, printed at the end.
timings=()
step() {
  local name="$1" started=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%5d s  %s' $((SECONDS - started)) "$name")")
}
report() { [ ${#timings[@]} = 0 ] || printf '[test] %s\n' "${timings[@]}" >&2; }
cleanup() {
  report
  if [ -n "${fuzz_pid:-}" ]; then kill "$fuzz_pid" 2>/dev/null || true; fi
  if [ -n "${chaos_pid:-}" ]; then
    kill -- "-$chaos_pid" 2>/dev/null || true
    echo "[test] the chaos tests were stopped unfinished; the end of .local/chaos.log:" >&2
    tail -n 20 .local/chaos.log >&2 || true
  fi
  if [ -n "${install_pid:-}" ]; then kill "$install_pid" 2>/dev/null || true; fi
  if [ -n "${arm64_pid:-}" ]; then kill -- "-$arm64_pid" 2>/dev/null || true; fi
  [ "${KEEP_EMULATORS:-0}" = 1 ] || infra/emulators.sh stop || true
}
trap cleanup EXIT

# Clippy lints the workspace's crates as the main build compiles them (every target, as
# `cargo clippy --all-targets -- -D warnings` does): `cargo clippy` is `cargo check` with
# clippy-driver as the workspace's compiler wrapper, and the same wrapper compiles as well
# as it lints. A separate `cargo clippy` checked every dependency again, which the build
# cannot share (350-370 s of both cores; docs/performance.md, "Clippy inside the build,
# the SDK unoptimized"). Every cargo command below (and the tests' own build of `serve`)
# inherits the wrapper, which cargo fingerprints, so none of them compiles anything
# again. CLIPPY_ARGS is how `cargo clippy` hands its arguments to clippy-driver.
if [ "${LINT:-1}" = 1 ]; then
  RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
  [ -x "$RUSTC_WORKSPACE_WRAPPER" ] || {
    echo "[test] clippy is not installed for $(rustc --version): rustup component add clippy (or LINT=0 to build without the lints)" >&2
    exit 1
  }
  CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
  export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
fi

# The tools install while the crates compile (below): the one waits on the network, the
# other on the cores. Their output is shown once both are done.
mkdir -p .local
# A run of everything (or ARM64=1) also registers qemu and builds the arm64 layer.
arm64=0
if [ $# = 0 ] || [ "${ARM64:-0}" = 1 ]; then arm64=1; fi
# A run of everything (or CONSOLE=1) also installs the console's packages and Chromium.
console=0
if [ $# = 0 ] || [ "${CONSOLE:-0}" = 1 ]; then console=1; fi
{ started=$SECONDS; infra/ffmpeg.sh && infra/emulators.sh install && { [ "$console" = 0 ] || scripts/console.sh install; } && { [ "$arm64" = 0 ] || { infra/qemu.sh && scripts/build-layer.sh; }; }; status=$?; echo $((SECONDS - started)) >.local/install.seconds; exit $status; } \
  >.local/install.log 2>&1 &
install_pid=$!
# The arm64 functions (below) build from here on, at the lowest priority: in the gaps of
# the build and while the tests wait. In a session of its own, so that the cleanup stops
# cargo and rustc with it; a new session is a scheduling group of its own, which the
# kernel weighs against this one as an equal unless the group's own nice says otherwise
# (a fresh clone's main build took 772 s instead of 485 with only `nice`). Without the
# clippy wrapper: the lints are the main build's.
arm64_pid=""
if [ "$arm64" = 1 ]; then
  setsid env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS bash -c 'started=$SECONDS; status=0; echo 19 >/proc/self/autogroup 2>/dev/null || true
    nice -n 19 scripts/build-lambda.sh --profile lambda-test || status=$?
    echo $((SECONDS - started)) >.local/arm64-build.seconds; exit $status' >.local/arm64-build.log 2>&1 &
  arm64_pid=$!
fi
wait_arm64_build() {
  local status=0
  wait "$arm64_pid" || status=$?
  arm64_pid=""
  if [ "$status" = 0 ]; then
    tail -n 20 .local/arm64-build.log >&2
  else
    # A linker's error follows a command line of thousands of characters: every line
    # but the compiles, each cut short, so that the error itself shows.
    { grep -v '^ *Compiling ' .local/arm64-build.log || true; } | cut -c1-400 | tail -n 80 >&2
  fi
  echo "[test] the arm64 build took $(cat .local/arm64-build.seconds 2>/dev/null || echo '?') s beside the build and the tests" >&2
  [ "$status" = 0 ] || { echo "[test] building the arm64 functions failed (exit $status): .local/arm64-build.log" >&2; return "$status"; }
}
# The crash tests run `serve` as a process, and the Lambda tests (lambda_binaries.rs) run
# every function binary under a Runtime API emulator: built first, not inside a test.
# They are built with the tests, in one build: the tests' dev-dependencies turn on
# features of shared dependencies (getrandom, syn, zerocopy, either), and binaries built
# alone would compile the AWS SDK and `shared` a second time, with the other features
# (minutes on a fresh clone; docs/performance.md, "CI on a fresh clone").
step "build serve, the function binaries and the tests (linted by clippy)" cargo build --workspace --all-targets
install_status=0
wait "$install_pid" || install_status=$?
install_pid=""
cat .local/install.log >&2
timings+=("$(printf '%5s s  %s' "$(cat .local/install.seconds 2>/dev/null || echo '?')" "install ffmpeg, the emulators, tools, the console's packages and qemu, build the arm64 layer (beside the build)")")
[ "$install_status" = 0 ] || { echo "[test] installing the tools failed (exit $install_status): its log is above" >&2; exit "$install_status"; }
step "start emulators" infra/emulators.sh start
# A cold emulator is many times slower than DynamoDB; the service's time bounds are
# sized for DynamoDB, so the tests start on a warmed-up one.
step "warm DynamoDB Local" infra/emulators.sh warm
eval "$(infra/emulators.sh env)"
# The timeline exporters' unit test reads their files back with opentimelineio.
export OTIO_PYTHON="$PWD/.local/venv/bin/python"
# yt-dlp (video-sharing sites) as the README commands install it.
export YT_DLP_PATH="$PWD/.local/venv/bin/yt-dlp"

# Each test run uses its own table, so runs never see each other's data.
export TEST_TABLE_NAME="tests-$(date +%s)-$$" TEST_BUCKET_NAME="tests-$(date +%s)-$$"
step "build the tests" cargo test --workspace --no-run "$@"
# Four tests at once on CI's 2 cores: the suite's time is mostly waiting (leases, polls,
# fake servers that answer late), and it passes with the cores half taken
# (docs/performance.md, issue 33 item 11). RUST_TEST_THREADS overrides it.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
# The OpenAPI document is validated and fuzzed (Schemathesis against a `serve` of its
# own, for a fixed 3 minutes) while the tests run: the tests take 136% of the two cores
# alone and the fuzzer one core (Hypothesis generating cases), so each slows the other,
# but one after the other they kept CI over its 30 minutes (docs/performance.md, "Two
# fresh clones of one day"). Its output is shown once it is done. A filtered
# run (arguments given) skips it unless FUZZ=1.
fuzz_pid=""
if [ $# = 0 ] || [ "${FUZZ:-0}" = 1 ]; then
  mkdir -p .local
  { started=$SECONDS; scripts/fuzz.sh; status=$?; echo $((SECONDS - started)) >.local/fuzz.seconds; exit $status; } \
    >.local/fuzz.log 2>&1 &
  fuzz_pid=$!
fi
step "run the tests" cargo test --workspace "$@"
# The console (console/): type check, unit tests, the committed bundle against a fresh
# build, then Chromium through the views against a serve of its own (screenshots and
# figures in .local/console). A filtered run skips it unless CONSOLE=1.
if [ "$console" = 1 ]; then
  step "console: unit tests, the bundle against a fresh build, the browser test" scripts/console.sh test
fi
# The arm64 artifacts under qemu, the deploy's dry run and scripts/sam-local.sh's seed
# (tests/tests/api/arm64.rs, deploy.rs, sam_local.rs): the layer built above, and every function, built as `sam build` builds them
# but unoptimized (the `lambda-test` profile: 3.3 minutes of both cores cold, where the
# release profile takes 34; docs/performance.md). They build beside the build above and
# the tests, at the lowest priority: the cargo build has gaps, the tests mostly wait, and
# the arm64 build takes the cores they leave. The layer's own test needs only the layer,
# so it runs before the wait. A filtered run skips them unless ARM64=1.
# The chaos tests (tests/tests/api/chaos.rs, ignored in the run above): three `serve
# --backend aws` processes killed at random, then the same behind a failing DynamoDB;
# both at once, about two minutes (up to five). They mostly wait (kills, leases), so
# they run beside the arm64 steps below, whose wait for the arm64 build took 110-280 s
# of a fresh clone's run (docs/performance.md, "Chaos beside the arm64 steps"); their serves
# outrank that build, which runs at nice 19 in an autogroup of its own. A filtered run
# (arguments given) skips them unless CHAOS=1.
# `--workspace`, not `-p integration-tests`: the same features as the build above, so
# nothing is compiled again (shared's dev-dependencies turn some on).
chaos_pid=""
if [ $# = 0 ] || [ "${CHAOS:-0}" = 1 ]; then
  # In a session of its own, so that the cleanup stops the test and its serves with it.
  setsid bash -c 'started=$SECONDS; status=0; cargo test --workspace --test api -- --ignored chaos || status=$?
    echo $((SECONDS - started)) >.local/chaos.seconds; exit $status' >.local/chaos.log 2>&1 &
  chaos_pid=$!
fi
# Waits for a job started beside the steps, shows its log (.local/NAME.log) and records
# its own time (.local/NAME.seconds): finish_job PID NAME WHAT
finish_job() {
  local status=0
  wait "$1" || status=$?
  cat ".local/$2.log" >&2
  timings+=("$(printf '%5s s  %s' "$(cat ".local/$2.seconds" 2>/dev/null || echo '?')" "$3")")
  [ "$status" = 0 ] || { echo "[test] $3 failed (exit $status): its output is above" >&2; return "$status"; }
}
if [ "$arm64" = 1 ]; then
  step "arm64: the layer's tools under qemu, a layer build that cannot fetch" cargo test --workspace --test api -- --ignored arm64_layer --nocapture
  step "wait for the arm64 functions (built beside the build and the tests)" wait_arm64_build
  step "arm64: the functions under qemu, the deploy's dry run, scripts/sam-local.sh, the layer built again" \
    cargo test --workspace --test api -- --ignored arm64_functions arm64_deploy arm64_sam_local arm64_rebuilt --nocapture
fi
if [ -n "$chaos_pid" ]; then
  pid=$chaos_pid chaos_pid=""
  step "wait for the chaos tests" finish_job "$pid" chaos "chaos: serves killed at random, DynamoDB failing (beside the arm64 steps)"
fi
# The fuzzing started beside the tests: its report, and its verdict.
if [ -n "$fuzz_pid" ]; then
  pid=$fuzz_pid fuzz_pid=""
  finish_job "$pid" fuzz "validate and fuzz the OpenAPI document (beside the tests)"
fi

export SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION="$AWS_REGION"
step "sam validate --lint" sam validate --lint --template template.yaml
