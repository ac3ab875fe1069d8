#!/usr/bin/env bash
# Stack views against perf (issue 18): the time and peak memory of `hvprof-report
# --format=folded` and `--format=pprof`, against `perf report -g folded --stdio --no-children`,
# each on its own recording of the same workload made the same way in the same run: two copies of
# a program built with frame pointers run 16 nested functions (256 distinct paths) while the tool
# samples every CPU with the cpu-clock timer every 20 us with 16-frame call chains for SECONDS
# (hvprof: `hvprof run --platform=linux --callgraph=16 -e CPU_CLOCK:20000 -- sleep`; perf:
# `perf record -a -g -e cpu-clock -c 20000 -- sleep`). Both report with warm caches (each is run
# once before it is timed); ratios are per sample. hvprof reads the stacks hvprofd counted into
# aggregate.hva when it stopped; a report from the raw samples (--raw-samples) is printed beside.
# FIGURE lines (bench/README.md): folded and pprof speed per sample against perf's (goal 5x), and
# memory per sample (goal at most perf's).
# Needs root (or kernel.perf_event_paranoid <= 0) and linux-perf. KEEP=1 keeps the work directory.
#   bench/report/stacks.sh [SECONDS]      (default 40: about a million samples each on 2 CPUs)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-40}
command -v perf >/dev/null || { echo "stacks bench: needs perf: apt-get install linux-perf" >&2; exit 1; }
ninja -C build hvprof hvprofd hvprof-hv hvprof-report >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-stacks-bench.XXXXXX)
load_pids=()
stop_load() {
  [ ${#load_pids[@]} -eq 0 ] || { kill "${load_pids[@]}" 2>/dev/null; wait "${load_pids[@]}" 2>/dev/null || true; }
  load_pids=()
}
cleanup() {
  stop_load
  if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

cat >"$work/deep.c" <<'EOF'
/* 16 nested functions; levels 1-4 each pick one of four variants, so 256 distinct paths. */
#include <stdint.h>
#define NOINLINE __attribute__((noinline))
static volatile uint64_t sink;
NOINLINE static void leaf(uint64_t n) { for (uint64_t i = 0; i < n; ++i) sink += i * i; }
#define LEVEL(name, next) NOINLINE static void name(uint64_t s, uint64_t n) { next(s, n); sink++; }
NOINLINE static void l15(uint64_t s, uint64_t n) { (void)s; leaf(n); sink++; }
LEVEL(l14, l15) LEVEL(l13, l14) LEVEL(l12, l13) LEVEL(l11, l12) LEVEL(l10, l11) LEVEL(l9, l10)
LEVEL(l8, l9) LEVEL(l7, l8) LEVEL(l6, l7)
#define VARIANTS(level, next) \
  NOINLINE static void level##_a(uint64_t s, uint64_t n) { next(s, n); sink++; } \
  NOINLINE static void level##_b(uint64_t s, uint64_t n) { next(s, n); sink++; } \
  NOINLINE static void level##_c(uint64_t s, uint64_t n) { next(s, n); sink++; } \
  NOINLINE static void level##_d(uint64_t s, uint64_t n) { next(s, n); sink++; } \
  NOINLINE static void level(uint64_t s, uint64_t n) { \
    switch (s & 3) { case 0: level##_a(s >> 2, n); break; case 1: level##_b(s >> 2, n); break; \
                     case 2: level##_c(s >> 2, n); break; default: level##_d(s >> 2, n); } sink++; }
VARIANTS(l5, l6) VARIANTS(l4, l5) VARIANTS(l3, l4) VARIANTS(l2, l3)
NOINLINE static void l1(uint64_t s, uint64_t n) { l2(s, n); sink++; }
int main(void) {
  for (uint64_t s = 0;; ++s) l1(s * 2654435761u, 20000);
}
EOF
gcc -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -fno-inline -o "$work/deep" "$work/deep.c"
start_load() { for _ in 1 2; do "$work/deep" & load_pids+=($!); done; }

echo "== hvprof: recording $seconds s of cpu-clock every 20 us with call graphs on all CPUs, two deep-stack programs running"
start_load
"$bin/hvprof" run --platform=linux --callgraph=16 -e CPU_CLOCK:20000 --session-dir="$work/s" --run-dir="$work/run" \
  -- sleep "$seconds" >"$work/hvprof-run.txt" 2>&1 || {
  echo "hvprof run failed (needs root or kernel.perf_event_paranoid <= 0):" >&2
  tail -5 "$work/hvprof-run.txt" >&2
  exit 1
}
stop_load
session=$(ls -d "$work"/s/samples/run-* | head -n 1)

measure() {  # output-file, command...: prints "SECONDS PEAK_KB"
  local out=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" >"$out" 2>"$work/stderr.txt" || {
    cat "$work/stderr.txt" >&2; exit 1; }
  cat "$work/time.txt"
}
"$bin/hvprof-report" "$session" --format=folded -o "$work/warm.folded" 2>/dev/null || true
read -r folded_s folded_kb < <(measure "$work/hvprof.folded" "$bin/hvprof-report" "$session" --format=folded)
read -r pprof_s pprof_kb < <(measure /dev/null "$bin/hvprof-report" "$session" --format=pprof -o "$work/hvprof.pb.gz")
# The same without the aggregate's stacks: every sample decoded.
read -r raw_s raw_kb < <(measure "$work/raw.folded" "$bin/hvprof-report" "$session" --format=folded --raw-samples)
hv_samples=$(awk '{n += $NF} END {print n}' "$work/hvprof.folded")
hv_depth=$(awk '{n = split($0, f, ";"); s += n - 2; c++} END {printf "%.1f", s / c}' "$work/hvprof.folded")
echo "-- hvprof: $hv_samples samples, $(wc -l <"$work/hvprof.folded") distinct stacks, $hv_depth frames each on average"

# ---- perf: the recording ----
echo "== perf: recording $seconds s of cpu-clock every 20 us with call graphs on all CPUs, two deep-stack programs running"
start_load
perf record -q -m 1024 -g -o "$work/perf.data" -a -e cpu-clock -c 20000 -- sleep "$seconds" 2>"$work/perf-record.txt" || {
  echo "perf record failed (needs root or kernel.perf_event_paranoid <= 0):" >&2
  cat "$work/perf-record.txt" >&2
  exit 1
}
stop_load
perf report -i "$work/perf.data" -g folded --stdio --no-children >/dev/null 2>&1 || true  # warm the caches
read -r perf_s perf_kb < <(measure "$work/perf.folded" perf report -i "$work/perf.data" -g folded --stdio --no-children)
# (awk and head stop reading early: perf's SIGPIPE is not a failure here.)
perf_samples=$(perf report -i "$work/perf.data" --stdio --sort dso 2>/dev/null | awk '/^# Samples:/ {print $3; exit}' || true)
perf_exact=$(perf script -i "$work/perf.data" -F tid 2>/dev/null | wc -l)
perf_depth=$( (perf script -i "$work/perf.data" -F ip,sym 2>/dev/null || true) | head -200000 |
  awk 'NF == 0 {if (n) {s += n; c++}; n = 0; next} {n++} END {printf "%.1f", s / c}')
echo "-- perf: $perf_exact samples ($perf_samples), $perf_depth frames each on average (of the first samples)"

python3 - "$hv_samples" "$folded_s" "$folded_kb" "$pprof_s" "$pprof_kb" "$perf_exact" "$perf_s" "$perf_kb" \
  "$raw_s" "$raw_kb" <<'PY'
import sys
hv, fs, fkb, ps, pkb, pf, rs, rkb, raw_s, raw_kb = sys.argv[1:]
raw_s, raw_kb = float(raw_s), int(raw_kb)
hv, pf = int(hv), int(pf)
fs, ps, rs = float(fs), float(ps), float(rs)
fkb, pkb, rkb = int(fkb), int(pkb), int(rkb)
def rate(n, s): return n / s if s > 0 else float("inf")
print()
print(f"hvprof-report --format=folded: {hv} samples in {fs:.2f} s ({rate(hv, fs)/1e6:.2f}M samples/s), peak {fkb/1024:.0f} MiB")
print(f"hvprof-report --format=pprof:  {hv} samples in {ps:.2f} s ({rate(hv, ps)/1e6:.2f}M samples/s), peak {pkb/1024:.0f} MiB")
print(f"  (from the raw samples, --raw-samples: {raw_s:.2f} s ({rate(hv, raw_s)/1e6:.2f}M samples/s), peak {raw_kb/1024:.0f} MiB)")
print(f"perf report -g folded:         {pf} samples in {rs:.2f} s ({rate(pf, rs)/1e6:.2f}M samples/s), peak {rkb/1024:.0f} MiB")
print(f"speed (samples/s, hvprof / perf): folded {rate(hv, fs)/rate(pf, rs):.1f}x, pprof {rate(hv, ps)/rate(pf, rs):.1f}x (goal: 5x);"
      f" folded from the raw samples {rate(hv, raw_s)/rate(pf, rs):.1f}x")
print(f"memory per sample (hvprof / perf): folded {(fkb/hv)/(rkb/pf):.2f}, pprof {(pkb/hv)/(rkb/pf):.2f} (goal: at most 1)")
folded_x, pprof_x = rate(hv, fs) / rate(pf, rs), rate(hv, ps) / rate(pf, rs)
mem_folded = (fkb / hv) / (rkb / pf)
print(f"FIGURE\tstacks: hvprof-report --format=folded vs perf report -g folded, samples/s\t{rate(hv, fs)/1e6:.2f} M/s\t"
      f"{rate(pf, rs)/1e6:.2f} M/s\t{folded_x:.1f}x\t>=5x\t{'pass' if folded_x >= 5 else 'fail'}")
print(f"FIGURE\tstacks: hvprof-report --format=pprof vs perf report -g folded, samples/s\t{rate(hv, ps)/1e6:.2f} M/s\t"
      f"{rate(pf, rs)/1e6:.2f} M/s\t{pprof_x:.1f}x\t>=5x\t{'pass' if pprof_x >= 5 else 'fail'}")
print(f"FIGURE\tstacks: peak memory per sample, folded (hvprof-report, perf report)\t{fkb/hv*1024:.0f} B\t"
      f"{rkb/pf*1024:.0f} B\t{mem_folded:.2f}x\t<=1x\t{'pass' if mem_folded <= 1 else 'fail'}")
PY
