#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of csrc/fuzz: the ONNX Runtime
# library's sources (ort_single_node_fuzzer) or the OpenVINO extension's
# (openvino_single_node_fuzzer) under ASan + UBSan, with coverage-guided
# fuzzing of one-node models (docs/guides/fuzzing.md).
#
#   scripts/fuzz.sh build              configure and build build/fuzz (clang-19)
#   scripts/fuzz.sh run [SECONDS]      fuzz for SECONDS (default 600) from the target's corpus;
#                                      new inputs go to build/fuzz/corpus[-openvino]; prints exec/s, cov, ft
#   scripts/fuzz.sh brief [SECONDS]    for each of OPBRIDGE_FUZZ_BRIEF_TARGETS (default: ort openvino): its corpus
#                                      once, then (ort) SECONDS (default 30) of fuzzing into a scratch
#                                      directory; fails on any crash (./dev test)
#   scripts/fuzz.sh merge              add the inputs of build/fuzz/corpus[-openvino] that bring new
#                                      coverage to the target's corpus (libFuzzer -merge=1)
#   scripts/fuzz.sh coverage           line coverage of the target's adapter, csrc/opbridge and
#                                      csrc/ops over its corpus (llvm-cov-19, build/fuzz-cov)
#   scripts/fuzz.sh repro FILE...      run inputs once, printing each outcome
#
# OPBRIDGE_FUZZ_TARGET=openvino picks the OpenVINO target for run, merge,
# coverage and repro (default: ort). Its corpus is csrc/fuzz/corpus-openvino
# and, as seeds, csrc/fuzz/corpus: both targets read the same bytes as the
# same model.
#
# Needs clang-19, libclang-rt-19-dev and llvm-19 (`./dev fuzz` installs them)
# and the .venv's onnxruntime and openvino (their libraries are linked).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
BUILD="${OPBRIDGE_FUZZ_BUILD:-$ROOT/build/fuzz}"
DICT="$ROOT/csrc/fuzz/ort_single_node.dict"
ARTIFACTS="$BUILD/artifacts"
TARGETS=(ort_single_node_fuzzer openvino_single_node_fuzzer)

# The target's variables: TARGET, CORPUS (where merge adds), SEEDS (what a
# run reads beside it), WORK_CORPUS (where a run writes), ADAPTER.
use_target() {
  case "$1" in
    ort)
      TARGET=ort_single_node_fuzzer CORPUS="$ROOT/csrc/fuzz/corpus" SEEDS=()
      WORK_CORPUS="$BUILD/corpus" ADAPTER=ort_adapter BRIEF_FUZZES=1
      ;;
    openvino)
      TARGET=openvino_single_node_fuzzer CORPUS="$ROOT/csrc/fuzz/corpus-openvino" SEEDS=("$ROOT/csrc/fuzz/corpus")
      WORK_CORPUS="$BUILD/corpus-openvino" ADAPTER=openvino_adapter BRIEF_FUZZES=0
      ;;
    *)
      log "OPBRIDGE_FUZZ_TARGET must be ort or openvino, got '$1'"
      exit 2
      ;;
  esac
}
use_target "${OPBRIDGE_FUZZ_TARGET:-ort}"

log() { printf '[fuzz] %s\n' "$*" >&2; }

for tool in clang-19 clang++-19; do
  command -v "$tool" >/dev/null || {
    log "$tool not found: apt-get install clang-19 libclang-rt-19-dev llvm-19 (./dev fuzz does)"
    exit 1
  }
done

# Highway compiles each kernel once per SIMD target; under ASan and coverage
# instrumentation the five default x86 targets dominate the build. On an AVX2
# machine, build one (AVX2, Highway's static target): the library's
# single-target dispatch (OPBRIDGE_DYNAMIC_DISPATCH) is then what runs, and
# the other targets are the sanitizer and SIMD tests' to cover.
hwy_flags() {
  if grep -qw avx2 /proc/cpuinfo && grep -qw aes /proc/cpuinfo; then
    echo "-march=haswell -maes -DHWY_COMPILE_ONLY_STATIC=1"
  fi
}

# The sanitizer build of the library (OPBRIDGE_SANITIZE, as ./dev sanitizers)
# with libFuzzer's instrumentation and the fuzz target (OPBRIDGE_BUILD_FUZZ).
# -O1 -g1 as there; assertions stay on.
configure() {
  local dir="$1" extra_flags="$2"
  CC=clang-19 CXX=clang++-19 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DOPBRIDGE_BUILD_TORCH=OFF -DOPBRIDGE_SANITIZE=ON -DOPBRIDGE_BUILD_FUZZ=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS="$(hwy_flags) $extra_flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$extra_flags" \
    -DCMAKE_MAKE_PROGRAM="$(command -v ninja || echo "$VENV/bin/ninja")" \
    -DPython3_EXECUTABLE="$VENV/bin/python" >/dev/null
}

build() {
  bash scripts/fetch_ort_headers.sh
  configure "$BUILD" ""
  cmake --build "$BUILD" --target "${TARGETS[@]}"
}

# Sanitizer reports end the run with a non-zero status. Leaks: libFuzzer's
# per-input leak check rescans the heap after nearly every input (ONNX
# Runtime's caches change the malloc count), a tenth of the throughput; it
# is off (-detect_leaks=0) and LeakSanitizer checks once, at exit, with the
# suppressions of ./dev sanitizers (ONNX Runtime's process-lifetime state).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:handle_abort=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
[[ -x /usr/bin/llvm-symbolizer-19 ]] && export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer-19

FUZZ_FLAGS=(-dict="$DICT" -timeout=10 -rss_limit_mb=4096 -max_len=4096 -detect_leaks=0
  -print_final_stats=1 -artifact_prefix="$ARTIFACTS/")

# OpenVINO's target: libFuzzer's own handler writes the input of an abort
# (the sanitizer's, handle_abort, can fail there with a nested report).
openvino_asan() { [[ "$TARGET" == openvino_single_node_fuzzer ]] && echo ":handle_abort=0"; true; }

# Runs the fuzzer with its output in $1, also on stderr unless QUIET=1 (then
# only the end of it, on failure); reports artifacts.
run_fuzzer() {
  local log_file="$1"
  shift
  mkdir -p "$ARTIFACTS"
  local status=0
  if [[ "${QUIET:-0}" == 1 ]]; then
    ASAN_OPTIONS="$ASAN_OPTIONS$(openvino_asan)" "$BUILD/csrc/fuzz/$TARGET" "${FUZZ_FLAGS[@]}" "$@" >"$log_file" 2>&1 ||
      status=$?
    ((status == 0)) || grep -v '^#[0-9]' "$log_file" | tail -n 80 >&2
  else
    ASAN_OPTIONS="$ASAN_OPTIONS$(openvino_asan)" "$BUILD/csrc/fuzz/$TARGET" "${FUZZ_FLAGS[@]}" "$@" 2>&1 |
      tee "$log_file" >&2 || status=$?
  fi
  if ((status != 0)); then
    log "FAILED (exit $status); the report is above and in $log_file"
    local found
    found="$(grep -o "Test unit written to [^ ]*" "$log_file" | sed 's/Test unit written to //' || true)"
    if [[ -n "$found" ]]; then
      log "crashing input: $found"
      log "reproduce: scripts/fuzz.sh repro $found"
    fi
  fi
  return "$status"
}

# "cov: N ft: M" of the last status line, and exec/s of the final stats.
summary() {
  local log_file="$1" line execs
  line="$(grep -E '^#[0-9]+' "$log_file" | tail -1 || true)"
  execs="$(grep -o 'average_exec_per_sec: *[0-9]*' "$log_file" | grep -o '[0-9]*$' | tail -1 || true)"
  echo "runs: $(grep -o '^#[0-9]*' <<<"$line" | tr -d '#') exec/s: ${execs:-?} $(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [^ ]+' <<<"$line")"
}

# One target's brief check: its corpus replayed, then (ONNX Runtime's) a few
# seconds of fuzzing from it.
brief_target() {
  local target="$1" seconds="$2" start replayed fuzzed scratch
  use_target "$target"
  start=$SECONDS
  run_fuzzer "$BUILD/corpus-$target.log" -runs=0 "$CORPUS"
  replayed=$((SECONDS - start))
  # OpenVINO's target runs about 10 inputs a second: its corpus is
  # replayed, the fuzzing is left to `run` (a few seconds would add
  # little beyond the replay).
  if [[ "$BRIEF_FUZZES" == 0 ]]; then
    log "$TARGET: corpus: $(ls "$CORPUS" | wc -l) inputs, no crash"
    log "$TARGET: times (s): corpus=$replayed"
    return
  fi
  scratch="$(mktemp -d)"
  start=$SECONDS
  run_fuzzer "$BUILD/brief-$target.log" -max_total_time="$seconds" "$scratch" "$CORPUS"
  fuzzed=$((SECONDS - start))
  rm -rf "$scratch"
  log "$TARGET: corpus: $(ls "$CORPUS" | wc -l) inputs, no crash; fuzzing: $(summary "$BUILD/brief-$target.log")"
  log "$TARGET: times (s): corpus=$replayed fuzz=$fuzzed"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  build)
    build
    ;;
  run)
    seconds="${1:-600}"
    build
    mkdir -p "$WORK_CORPUS" "$CORPUS"
    log "fuzzing $TARGET for $seconds s (new inputs in ${WORK_CORPUS#"$ROOT"/})"
    run_fuzzer "$BUILD/run.log" -max_total_time="$seconds" "$WORK_CORPUS" "$CORPUS" "${SEEDS[@]}"
    log "$(summary "$BUILD/run.log")"
    log "keep what it found: scripts/fuzz.sh merge"
    ;;
  brief)
    seconds="${1:-30}"
    start=$SECONDS
    build
    log "times (s): build=$((SECONDS - start))"
    export QUIET=1
    # The targets run side by side (a process each, one core each), each
    # with logs of its own; a failure of either fails the step.
    pids=()
    for target in ${OPBRIDGE_FUZZ_BRIEF_TARGETS:-ort openvino}; do
      brief_target "$target" "$seconds" &
      pids+=("$!")
    done
    status=0
    for pid in "${pids[@]}"; do
      wait "$pid" || status=1
    done
    exit "$status"
    ;;
  merge)
    [[ -x "$BUILD/csrc/fuzz/$TARGET" ]] || build
    mkdir -p "$CORPUS" "$WORK_CORPUS"
    before="$(ls "$CORPUS" | wc -l)"
    run_fuzzer "$BUILD/merge.log" -merge=1 "$CORPUS" "$WORK_CORPUS" "${SEEDS[@]}"
    log "${CORPUS#"$ROOT"/}: $before -> $(ls "$CORPUS" | wc -l) inputs"
    ;;
  coverage)
    cov="$BUILD-cov"
    bash scripts/fetch_ort_headers.sh
    configure "$cov" "-fprofile-instr-generate -fcoverage-mapping"
    cmake --build "$cov" --target "$TARGET"
    rm -f "$cov"/*.profraw
    LLVM_PROFILE_FILE="$cov/fuzz-%p.profraw" "$cov/csrc/fuzz/$TARGET" "${FUZZ_FLAGS[@]}" -runs=0 "$CORPUS" \
      >"$cov/coverage-run.log" 2>&1
    llvm-profdata-19 merge -sparse "$cov"/*.profraw -o "$cov/fuzz.profdata"
    llvm-cov-19 report "$cov/csrc/fuzz/$TARGET" -instr-profile="$cov/fuzz.profdata" \
      "$ROOT/csrc/$ADAPTER" "$ROOT/csrc/opbridge" "$ROOT/csrc/ops"
    llvm-cov-19 show "$cov/csrc/fuzz/$TARGET" -instr-profile="$cov/fuzz.profdata" -format=html \
      -output-dir="$cov/html" "$ROOT/csrc/$ADAPTER" "$ROOT/csrc/opbridge" "$ROOT/csrc/ops"
    log "annotated sources: ${cov#"$ROOT"/}/html/index.html"
    ;;
  repro)
    [[ -x "$BUILD/csrc/fuzz/$TARGET" ]] || build
    ASAN_OPTIONS="$ASAN_OPTIONS$(openvino_asan)" OPBRIDGE_FUZZ_VERBOSE=1 "$BUILD/csrc/fuzz/$TARGET" "${FUZZ_FLAGS[@]}" "$@"
    ;;
  *)
    echo "usage: scripts/fuzz.sh {build|run [SECONDS]|brief [SECONDS]|merge|coverage|repro FILE...}" >&2
    exit 2
    ;;
esac
