#!/usr/bin/env bash
# Builds the libFuzzer targets in the sanitized build (clang, ASan+UBSan, coverage in every
# library: build-asan/, shared with scripts/run-tests.sh --asan) and runs each for a short time
# on a small seed corpus. A crash, sanitizer report, leak or timeout fails the script; the input
# that caused it is left in build-asan/artifacts/.
#   scripts/run-fuzz.sh [SECONDS_PER_TARGET]     (default 25)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-25}
targets=(elf_image_fuzzer kernel_symbols_fuzzer session_files_fuzzer published_profile_fuzzer
         ring_reader_fuzzer scenario_fuzzer engine_ops_fuzzer archive_reader_fuzzer jit_symbols_fuzzer
         perf_records_fuzzer tracepoint_fuzzer xen_trace_fuzzer status_records_fuzzer elf_info_fuzzer
         redact_urls_fuzzer quantities_fuzzer push_state_fuzzer)

build=$(scripts/configure.sh asan)
ninja -C "$build" -j"$(nproc)" "${targets[@]}"

# Seeds (scripts/fuzz-seeds.sh, which the corpus replay tests of CTest use too).
seeds="$build/seeds"
scripts/fuzz-seeds.sh "$seeds"

mkdir -p "$build/artifacts" "$build/fuzz-logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target per CPU at a time (a target runs one process). The summaries are printed in order once
# they all end; a failure fails the script once every target has run.
fuzz_one() {
  local target=$1 corpus="$build/corpus/$1" log="$build/fuzz-logs/$1.log" status=0
  mkdir -p "$corpus"
  "$build/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$build/artifacts/$target-" \
    "$corpus" "$seeds/$target" >"$log" 2>&1 || status=$?
  { echo "run-fuzz: $target ran for ${seconds}s"
    grep -E '^(#|INFO: seed|INFO: -max|==|SUMMARY|stat::number_of_executed|stat::peak)|ERROR|Error|error' "$log" | tail -n 12 || true
    [ "$status" -eq 0 ] || echo "run-fuzz: $target failed (exit $status); see $build/artifacts/ and $log"
  } >"$log.summary"
  return "$status"
}
lanes=$(nproc)
failed=0
running=0
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$lanes" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
for target in "${targets[@]}"; do cat "$build/fuzz-logs/$target.log.summary"; done
if [ "$failed" -ne 0 ]; then
  echo "run-fuzz: a target failed (above)" >&2
  exit 1
fi
echo "run-fuzz: all targets ran clean"
