#!/usr/bin/env bash
# The cost of a diff (issue 20): `hvprof-report --diff A B -l` on two sessions of SAMPLES
# samples each, against reporting one of them twice (`hvprof-report A -l`, run two times), in
# the same run. Target: the diff takes no longer than the two reports (a FIGURE line, bench/README.md).
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

# shellcheck source=bench/report/record_sim.sh
. bench/report/record_sim.sh
record() {  # seed, name
  record_sim bench/data/throughput.json "$samples" "$1"
  mv "$work/s/samples/current" "$work/s/samples/$2"
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
python3 -c "
d, r = $diff, $report
ratio = d / (2 * r)
print(f'FIGURE\tdiff: hvprof-report --diff A B -l against two hvprof-report -l, wall (best of $runs)\t{d:.3f} s\t{2*r:.3f} s\t{ratio:.2f}x\t<=1x\t' + ('pass' if ratio <= 1 else 'fail'))
"
