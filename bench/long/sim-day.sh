#!/usr/bin/env bash
# An accelerated day on the sim (issue 42): the default scenario with dom0's application started
# PER_SECOND times a simulated second (each run a short process of its own, as on a build server),
# profiled system-wide (hypervisor, dom0, the guests) for HOURS simulated hours at RATE samples a
# second per CPU with call chains. The sim's clock runs as fast as the machine allows: the session
# is drained and dumped every simulated STEP as a long run's is.
#   bench/long/sim-day.sh [HOURS] [STEP_MINUTES]   (default 24 and 60; PER_SECOND (default 20),
#                                                  RATE (default 100), KEEP=1 keeps the session)
# Prints, per step, the simulated time, the wall time, both daemons' resident memory and the
# session's bytes; at the end the session's bytes per sample and per process, the aggregate against
# the raw samples, the end of the run (--stop and --shutdown) and `hvprof-report -l`'s time and peak
# memory, and FIGURE lines (bench/run-all.sh): the daemons' memory at the last step over the first
# (goal: within 64 MiB), the aggregate over the raw samples (goal < 1), the report's time.
# No peer: perf cannot profile a simulated machine; bench/long/run.sh has perf beside hvprof on this
# host's own storm.
set -euo pipefail
cd "$(dirname "$0")/../.."
hours=${1:-24}
step_minutes=${2:-60}
per_second=${PER_SECOND:-20}
rate=${RATE:-100}
ninja -C build hvprof hvprofd hvprof-hv hvprof-report >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-sim-day.XXXXXX)
cleanup() {
  "$bin/hvprof" --run-dir="$work/run" --session-dir="$work/s" --shutdown >/dev/null 2>&1 || true
  if [ "${KEEP:-0}" = 1 ]; then echo "sim day: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
py() { python3 -c "import json, sys; $1"; }
now() { date +%s.%N; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# The default scenario at the sim's full speed (its clock advances when dom0 asks), with 10 ms
# scheduler slices and runs of one function of about 8 ms (the sim's cost is per slice and per
# run: a day of the default 1 ms and 12 us takes hours), dom0's first program churned: runs of 50 ms under 150 pids taken in turn (1201-1350, below qemu-dm's).
py "
d = json.load(open('examples/default.json'))
d['run'] = {'speed': 'max', 'duration_ms': 0}
d['machine']['slice_us'] = 10000
d['machine']['burst_cycles'] = 20000000
d['domains'][0]['processes'][0]['churn'] = {'per_second': $per_second, 'lifetime_ms': 50, 'pids': 150}
json.dump(d, open('$work/scenario.json', 'w'), indent=1)"
cpus=$(py "print(json.load(open('$work/scenario.json'))['machine']['cpus'])")
mhz=$(py "print(json.load(open('$work/scenario.json'))['machine']['mhz'])")
count=$((mhz * 1000000 / rate))
hv=("$bin/hvprof" --run-dir="$work/run" --session-dir="$work/s")
"${hv[@]}" --start-daemon --platform=sim --scenario="$work/scenario.json" \
  --event="CPU_CLK_UNHALTED:$count" --callgraph=16 >"$work/start.out" 2>&1 || {
  cat "$work/start.out" >&2
  exit 1
}
"${hv[@]}" --start >/dev/null
hv_pid=$(pgrep -f "hvprof-hv .*$work/run" | head -n 1)
agent_pid=$(pgrep -f "hvprofd .*$work/s" | head -n 1)
echo "== sim day: ${hours} h simulated of the default scenario ($cpus CPUs), dom0's program started $per_second times a second, $rate samples/s per CPU, call chains 16 deep"
printf '%8s %8s %10s %10s %12s\n' "sim h" "wall s" "hv MiB" "agent MiB" "session MB"
steps=$((hours * 60 / step_minutes))
started=$(now)
first_mib=
last_mib=
for ((i = 1; i <= steps; i++)); do
  "${hv[@]}" --run-sim="${step_minutes}m" >/dev/null
  "${hv[@]}" --dump >/dev/null
  hv_kib=$(rss_kib "$hv_pid")
  agent_kib=$(rss_kib "$agent_pid")
  session=$work/s/samples/current
  bytes=$(du -sb "$session" | cut -f1)
  last_mib=$(((hv_kib + agent_kib) / 1024))
  [ -n "$first_mib" ] || first_mib=$last_mib
  printf '%8s %8.0f %10d %10d %12.1f\n' "$(py "print(f'{$i * $step_minutes / 60:g}')")" \
    "$(py "print($(now) - $started)")" $((hv_kib / 1024)) $((agent_kib / 1024)) "$(py "print($bytes / 1e6)")"
done
stop_start=$(now)
"${hv[@]}" --stop >/dev/null
"${hv[@]}" --shutdown >/dev/null
end_s=$(py "print(f'{$(now) - $stop_start:.2f}')")
session=$work/s/samples/current
/usr/bin/time -f '%e %M' -o "$work/report.time" "$bin/hvprof-report" "$session" -l >"$work/report.txt" 2>&1
"$bin/hvprof-report" "$session" -l -t 5 --format=json >"$work/report.json"
read -r report_s report_kb < <(tail -n 1 "$work/report.time")
samples=$(py "print(json.load(open('$work/report.json'))['session']['samples'])")
processes=$(py "print(json.load(open('$work/report.json'))['session']['processes'])")
bytes() { stat -c %s "$session/$1" 2>/dev/null || echo 0; }
session_bytes=$(du -sb "$session" | cut -f1)
samples_bytes=$(bytes samples.hvs)
aggregate_bytes=$(bytes aggregate.hva)
context_bytes=$(bytes context.hvc)
cat <<TEXT
   $processes processes, $samples samples in $(py "print(f'{$(now) - $started:.0f}')") s of wall time
   session $session_bytes bytes ($(py "print(f'{$session_bytes / max($samples, 1):.1f}')") per sample): samples.hvs $samples_bytes, aggregate.hva $aggregate_bytes ($(py "print(f'{$aggregate_bytes / max($samples_bytes, 1):.2f}')") of the raw samples), context.hvc $context_bytes ($(py "print(f'{$context_bytes / max($processes, 1):.0f}')") per process), session.json $(bytes session.json)
   daemons (hvprof-hv + hvprofd): $first_mib MiB after the first step, $last_mib MiB after the last
   --stop and --shutdown: $end_s s
   hvprof-report -l: $report_s s, peak $((report_kb / 1024)) MiB
TEXT
growth=$((last_mib - first_mib))
verdict() { py "sys.exit(0 if $1 else 1)" && echo pass || echo fail; }
printf 'FIGURE\t%s\t%s\t%s\t%s\t%s\t%s\n' "long.sim_day.daemon_rss_growth_mib" "$growth" - - "<64" "$(verdict "$growth < 64")"
printf 'FIGURE\t%s\t%s\t%s\t%s\t%s\t%s\n' "long.sim_day.aggregate_over_raw" "$aggregate_bytes" "$samples_bytes" \
  "$(py "print(f'{$aggregate_bytes / max($samples_bytes, 1):.3g}')")" "<1" "$(verdict "$aggregate_bytes < $samples_bytes")"
printf 'FIGURE\t%s\t%s\t%s\t%s\t%s\t%s\n' "long.sim_day.report_s" "$report_s" - - info info
