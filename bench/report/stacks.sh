#!/usr/bin/env bash
# Stack views against perf (issue 18): the time and peak memory of `hvprof-report
# --format=folded` and `--format=pprof` on a session of SAMPLES samples with 16-frame chains,
# against `perf report -g folded --stdio --no-children` on a perf.data of about as many
# samples, each with a 16-frame chain, recorded in the same run.
#   hvprof: a sim session (dom0 only, 4 busy CPUs) whose 256 kernel functions each have a
#           15-caller stack of other kernel functions (names from /proc/kallsyms), so every
#           sample carries 16 frames; --callgraph=16.
#   perf:   `perf record -g -e cpu-clock -c 20000 -a` while two copies of a program built with
#           frame pointers run 16 nested functions (256 distinct paths), for long enough to take
#           about SAMPLES samples (PERF_SECONDS overrides the estimate).
# Both report with warm caches (each is run once before it is timed). Ratios are per sample.
# hvprof reads the stacks hvprofd counted into aggregate.hva when it stopped; the time of that
# --stop and of a report from the raw samples (--raw-samples) are printed beside.
# Needs root (or kernel.perf_event_paranoid <= 0) and linux-perf. KEEP=1 keeps the work directory.
#   bench/report/stacks.sh [SAMPLES]      (default 10000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
samples=${1:-10000000}
command -v perf >/dev/null || { echo "stacks bench: needs perf: apt-get install linux-perf" >&2; exit 1; }
ninja -C build hvprof hvprofd hvprof-hv hvprof-report >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-stacks-bench.XXXXXX)
hv_pid=
load_pids=()
cleanup() {
  [ -n "$hv_pid" ] && kill "$hv_pid" 2>/dev/null && wait "$hv_pid" 2>/dev/null
  [ ${#load_pids[@]} -gt 0 ] && kill "${load_pids[@]}" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- hvprof: the session ----
python3 - "$work/scenario.json" <<'PY'
import collections, json, random, sys
scenario = json.load(open("examples/default.json"))
names = collections.Counter()
for line in open("/proc/kallsyms"):
    fields = line.split()
    if len(fields) == 3 and fields[1] in "tT" and not fields[2].startswith(("__", "_")) and "." not in fields[2]:
        names[fields[2]] += 1
unique = sorted(name for name, count in names.items() if count == 1)
random.seed(18)
pool = random.sample(unique, 256 + 64)
leaves, callers = pool[:256], pool[256:]
functions = [{"name": leaf, "weight": random.randint(1, 10), "stack": random.sample(callers, 15)} for leaf in leaves]
dom0 = next(d for d in scenario["domains"] if d["id"] == 0)
dom0["vcpus"] = 4
dom0["load"] = 1.0
dom0["workload"] = {"kernel": {"share": 100, "functions": functions}}
dom0.pop("processes", None)
scenario["domains"] = [dom0]
scenario["hypervisor"]["idle"]["halted"] = 0.0
scenario["name"] = "stacks-bench"
json.dump(scenario, open(sys.argv[1], "w"), indent=1)
PY

echo "== hvprof: recording a session of about $samples samples with 16-frame chains (sim, max speed)"
"$bin/hvprof-hv" --platform=sim --scenario="$work/scenario.json" --speed=max \
  --run-dir="$work/run" --log-level=warning &
hv_pid=$!
for _ in $(seq 200); do [ -S "$work/run/domain-0.sock" ] && break; sleep 0.05; done
hv() { "$bin/hvprof" --session-dir="$work/s" --run-dir="$work/run" "$@" >/dev/null; }
# 4 busy CPUs at 2.6 GHz, one sample per 6000 cycles (the event's minimum): 1.73M samples per
# simulated second.
hv --start-daemon --callgraph=16 -e CPU_CLK_UNHALTED:6000
hv --start
hv --run-sim="$(( samples * 6 / 10400 ))ms"
# --stop writes the aggregate, which counts every distinct stack: that cost is the daemon's.
stop_start=$(date +%s.%N)
hv --stop
stop_s=$(python3 -c "import time; print(f'{time.time() - $stop_start:.2f}')")
hv --shutdown
kill "$hv_pid"; wait "$hv_pid" 2>/dev/null || true; hv_pid=
session=$work/s/samples/current

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
# Every 20 us on each CPU: in a 2-CPU VM perf keeps about 30k samples/s with call graphs at this
# rate (at 100 kHz it lost 95% of them and stalled the machine). PERF_SECONDS overrides.
perf_seconds=${PERF_SECONDS:-$(( samples / 30000 + 1 ))}
echo "== perf: recording $perf_seconds s of cpu-clock every 20 us with call graphs on all CPUs, two deep-stack programs running"
for _ in 1 2; do "$work/deep" & load_pids+=($!); done
perf record -q -m 1024 -g -o "$work/perf.data" -a -e cpu-clock -c 20000 -- sleep "$perf_seconds" 2>"$work/perf-record.txt" || {
  echo "perf record failed (needs root or kernel.perf_event_paranoid <= 0):" >&2
  cat "$work/perf-record.txt" >&2
  exit 1
}
kill "${load_pids[@]}" 2>/dev/null; wait "${load_pids[@]}" 2>/dev/null || true; load_pids=()
perf report -i "$work/perf.data" -g folded --stdio --no-children >/dev/null 2>&1 || true  # warm the caches
read -r perf_s perf_kb < <(measure "$work/perf.folded" perf report -i "$work/perf.data" -g folded --stdio --no-children)
# (awk and head stop reading early: perf's SIGPIPE is not a failure here.)
perf_samples=$(perf report -i "$work/perf.data" --stdio --sort dso 2>/dev/null | awk '/^# Samples:/ {print $3; exit}' || true)
perf_exact=$(perf script -i "$work/perf.data" -F tid 2>/dev/null | wc -l)
perf_depth=$( (perf script -i "$work/perf.data" -F ip,sym 2>/dev/null || true) | head -200000 |
  awk 'NF == 0 {if (n) {s += n; c++}; n = 0; next} {n++} END {printf "%.1f", s / c}')
echo "-- perf: $perf_exact samples ($perf_samples), $perf_depth frames each on average (of the first samples)"

python3 - "$hv_samples" "$folded_s" "$folded_kb" "$pprof_s" "$pprof_kb" "$perf_exact" "$perf_s" "$perf_kb" \
  "$raw_s" "$raw_kb" "$stop_s" <<'PY'
import sys
hv, fs, fkb, ps, pkb, pf, rs, rkb, raw_s, raw_kb, stop_s = sys.argv[1:]
raw_s, raw_kb = float(raw_s), int(raw_kb)
hv, pf = int(hv), int(pf)
fs, ps, rs = float(fs), float(ps), float(rs)
fkb, pkb, rkb = int(fkb), int(pkb), int(rkb)
def rate(n, s): return n / s if s > 0 else float("inf")
print()
print(f"hvprof-report --format=folded: {hv} samples in {fs:.2f} s ({rate(hv, fs)/1e6:.2f}M samples/s), peak {fkb/1024:.0f} MiB")
print(f"hvprof-report --format=pprof:  {hv} samples in {ps:.2f} s ({rate(hv, ps)/1e6:.2f}M samples/s), peak {pkb/1024:.0f} MiB")
print(f"  (from the raw samples, --raw-samples: {raw_s:.2f} s ({rate(hv, raw_s)/1e6:.2f}M samples/s), peak {raw_kb/1024:.0f} MiB;"
      f" hvprof --stop, which writes the aggregate with its stacks: {stop_s} s)")
print(f"perf report -g folded:         {pf} samples in {rs:.2f} s ({rate(pf, rs)/1e6:.2f}M samples/s), peak {rkb/1024:.0f} MiB")
print(f"speed (samples/s, hvprof / perf): folded {rate(hv, fs)/rate(pf, rs):.1f}x, pprof {rate(hv, ps)/rate(pf, rs):.1f}x (goal: 5x);"
      f" folded from the raw samples {rate(hv, raw_s)/rate(pf, rs):.1f}x")
print(f"memory per sample (hvprof / perf): folded {(fkb/hv)/(rkb/pf):.2f}, pprof {(pkb/hv)/(rkb/pf):.2f} (goal: at most 1)")
PY
