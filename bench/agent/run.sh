#!/usr/bin/env bash
# The dom0 agent end to end (issue 5), on bench/data/throughput.json (8 busy vCPUs on 8 CPUs):
#   1. realtime: 100k samples/s per vCPU (CPU_CLK_UNHALTED:30000 at 3 GHz) with default rings
#      for DURATION (default 10s); reports losses, the agent's CPU share and peak memory.
#   2. full speed: the sim as fast as it goes (one sample per 6000 cycles) for 4 simulated
#      seconds; reports samples stored per wall second and per CPU second of the agent.
# Also runs build/bin/agent_bench (drain plus store on one thread).
#   bench/agent/run.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-10s}
ninja -C build hvprof hvprofd hvprof-hv agent_bench >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-agent-bench.XXXXXX)
hv_pid=
cleanup() {
  "$bin/hvprof" --shutdown --session-dir="$work/s" --run-dir="$work/run" >/dev/null 2>&1 || true
  [ -n "$hv_pid" ] && kill "$hv_pid" 2>/dev/null && wait "$hv_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ticks=$(getconf CLK_TCK)

start_hv() {  # speed
  "$bin/hvprof-hv" --platform=sim --scenario=bench/data/throughput.json --speed="$1" \
    --run-dir="$work/run" --log-level=warning &
  hv_pid=$!
  for _ in $(seq 100); do [ -S "$work/run/domain-0.sock" ] && return; sleep 0.05; done
  echo "hvprof-hv did not start" >&2; exit 1
}
stop_hv() { kill "$hv_pid"; wait "$hv_pid" 2>/dev/null || true; hv_pid=; rm -rf "$work/run" "$work/s"; }
agent_pid() { pgrep -n -f "hvprofd .*--session-dir=$work/s" || pgrep -n -f "hvprofd.*$work/s"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
peak_kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
hvprof() { "$bin/hvprof" --session-dir="$work/s" --run-dir="$work/run" "$@" >/dev/null; }
summary() {  # session dir -> "stored lost per-ring-rates"
  python3 - "$1/session.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
seconds = (m["last_sample_ns"] - m["first_sample_ns"]) / 1e9
l = m["losses"]
lost = l["ring_full"] + l["corrupt_index"] + l["no_ring"] + l["malformed_records"] + l["store_failed"]
vcpu = [r["drained"] / seconds for r in m["rings"] if r["kind"] == "vcpu" and r["drained"]]
fill = max(r["max_fill"] for r in m["rings"]) / m["buffers"]["capacity"]
print(m["samples_stored"], lost, len(vcpu), min(vcpu), max(vcpu), seconds, fill)
PY
}

echo "== 1. realtime, 8 vCPUs at 100k samples/s each, default rings, $duration"
start_hv realtime
hvprof --start-daemon --passive-domains=1,2,3 -e CPU_CLK_UNHALTED:30000
pid=$(agent_pid)
hvprof --start
t0=$(cpu_ticks "$pid"); w0=$(date +%s.%N)
sleep "${duration%s}"
hvprof --stop
t1=$(cpu_ticks "$pid"); w1=$(date +%s.%N)
peak=$(peak_kib "$pid")
read -r stored lost rings low high seconds fill < <(summary "$work/s/samples/current")
python3 - "$stored" "$lost" "$rings" "$low" "$high" "$seconds" "$fill" "$t0" "$t1" "$w0" "$w1" "$ticks" "$peak" <<'PY'
import sys
stored, lost, rings = map(int, sys.argv[1:4])
low, high, seconds, fill, t0, t1, w0, w1, ticks, peak = map(float, sys.argv[4:])
print(f"samples stored: {stored} over {seconds:.2f} s of the machine's clock; lost: {lost}")
print(f"per vCPU ring: {rings} rings, {low/1e3:.1f}k to {high/1e3:.1f}k samples/s; fullest ring {100*fill:.1f}%")
print(f"agent CPU: {100*(t1-t0)/ticks/(w1-w0):.1f}% of one core; peak memory (VmHWM): {peak/1024:.1f} MiB")
print(f"FIGURE\tagent: 8 vCPUs at 100k samples/s each (realtime sim), lost\t{lost} of {stored}\t-\t-\t0\t"
      f"{'pass' if lost == 0 else 'fail'}")
print(f"FIGURE\tagent: CPU at 800k samples/s (realtime sim)\t{100*(t1-t0)/ticks/(w1-w0):.1f}% of a core\t-\t-\t-\tinfo")
PY
hvprof --shutdown
stop_hv

echo
echo "== 2. full speed: the sim as fast as it goes, default event (every 6000 cycles), 4 s simulated"
start_hv max
hvprof --start-daemon --passive-domains=1,2,3 -e CPU_CLK_UNHALTED:6000
pid=$(agent_pid)
hvprof --start
t0=$(cpu_ticks "$pid"); w0=$(date +%s.%N)
hvprof --run-sim=4s
hvprof --stop
t1=$(cpu_ticks "$pid"); w1=$(date +%s.%N)
peak=$(peak_kib "$pid")
read -r stored lost rings low high seconds fill < <(summary "$work/s/samples/current")
python3 - "$stored" "$lost" "$t0" "$t1" "$w0" "$w1" "$ticks" "$peak" <<'PY'
import sys
stored, lost = map(int, sys.argv[1:3])
t0, t1, w0, w1, ticks, peak = map(float, sys.argv[3:])
cpu = (t1 - t0) / ticks
wall = w1 - w0
print(f"samples stored: {stored} (lost {lost}) in {wall:.2f} s wall: {stored/wall/1e6:.1f}M samples/s end to end")
print(f"agent: {cpu:.2f} CPU seconds, {stored/cpu/1e6:.1f}M samples per CPU second; peak memory {peak/1024:.1f} MiB")
print(f"FIGURE\tagent: samples stored per CPU second of hvprofd (sim at full speed)\t{stored/cpu/1e6:.1f}M/s\t-\t-\t-\tinfo")
PY
hvprof --shutdown
stop_hv

echo
echo "== 3. drain plus store alone, one thread (build/bin/agent_bench)"
"$bin/agent_bench" --benchmark_min_time=2 2>/dev/null | grep -E 'DrainAndStore|Benchmark'
