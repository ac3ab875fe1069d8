#!/usr/bin/env bash
# The cost of a diff (issue 20): `hvprof-report --diff A B -l` on two sessions of SAMPLES
# samples each, against reporting one of them twice (`hvprof-report A -l`, run two times), in
# the same run. Target: the diff takes no longer than the two reports.
#   sessions: bench/data/throughput.json on the sim (4 domains, 8 CPUs, ~2800 functions a
#             domain), two run seeds (hvprof-hv --seed), so the diff has every row on both sides.
# Each command runs once before it is timed (warm caches); the figures are the best of RUNS
# (default 3) runs. The diff's own split (its slice pass) is printed with --timing.
#   bench/report/diff.sh [SAMPLES]      (default 10000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
samples=${1:-10000000}
runs=${RUNS:-3}
ninja -C build hvprof hvprofd hvprof-hv hvprof-report >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-diff-bench.XXXXXX)
hv_pid=
cleanup() {
  [ -n "$hv_pid" ] && kill "$hv_pid" 2>/dev/null && wait "$hv_pid" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

record() {  # seed, name
  "$bin/hvprof-hv" --platform=sim --scenario=bench/data/throughput.json --speed=max --seed="$1" \
    --run-dir="$work/run" --log-level=warning &
  hv_pid=$!
  for _ in $(seq 200); do [ -S "$work/run/domain-0.sock" ] && break; sleep 0.05; done
  hv() { "$bin/hvprof" --session-dir="$work/s" --run-dir="$work/run" "$@" >/dev/null; }
  hv --start-daemon --passive-domains=1,2,3 -e CPU_CLK_UNHALTED:6000
  hv --start
  # 8 busy CPUs at 3 GHz, one sample per 6000 cycles: 4M samples per simulated second.
  hv --run-sim="$(( samples / 4000 ))ms"
  hv --stop
  hv --save="$2"
  hv --shutdown
  kill "$hv_pid"; wait "$hv_pid" 2>/dev/null || true; hv_pid=
}
echo "== recording two sessions of about $samples samples (sim, max speed, seeds 1 and 2)"
record 1 a
record 2 b

best() {  # runs the command RUNS times after one warm-up; prints the best wall time
  "$@" >/dev/null 2>&1 || true
  local best_time=
  for _ in $(seq "$runs"); do
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || true
    end=$(date +%s.%N)
    best_time=$(python3 -c "t=$end-$start; b='$best_time'; print(f'{min(t, float(b)) if b else t:.3f}')")
  done
  echo "$best_time"
}
report=$(best "$bin/hvprof-report" --session-dir="$work/s" a -l)
diff=$(best "$bin/hvprof-report" --session-dir="$work/s" --diff a b -l)
samples_a=$("$bin/hvprof-report" --session-dir="$work/s" a --format=json | python3 -c 'import json,sys; print(json.load(sys.stdin)["session"]["samples"])')
echo "samples per session: $samples_a"
echo "hvprof-report a -l:            $report s (twice: $(python3 -c "print(f'{2*$report:.3f}')") s)"
echo "hvprof-report --diff a b -l:   $diff s"
echo "ratio diff / (2 x report): $(python3 -c "print(f'{$diff/(2*$report):.2f}')")  (target <= 1)"
"$bin/hvprof-report" --session-dir="$work/s" --diff a b -l -t 0.5 | sed -n '1,4p'
