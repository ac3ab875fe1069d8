#!/usr/bin/env bash
# Scheduling records (issue 21, item 6), measured where they pass:
#   1. the engine: Engine::RecordSched, one record into a pCPU's scheduling ring
#      (build/bin/sample_path_bench RecordSched), as records per second of one CPU;
#   2. the agent: drain plus store into sched.hvs on one thread (build/bin/agent_bench
#      DrainAndStoreSched), as records per second;
#   3. the report: hvprof-report --sched on a sim session of 64 vCPUs (16 domains of 4 on 16
#      pCPUs, each vCPU wanting a CPU 70% of the time) over SECONDS simulated seconds, against
#      perf sched timehist -s on a perf.data of a similar number of events (perf sched record -a
#      of linux_sched_mix: more spinning threads than CPUs and a napping one), as the time per
#      record of each, best of 3.
#   bench/sched/run.sh [SECONDS]      (default 10; needs root and linux-perf for 3's peer)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-10}
ninja -C build sample_path_bench agent_bench hvprof hvprofd hvprof-hv hvprof-report linux_sched_mix >/dev/null
bin=$PWD/build/bin
mix=$PWD/build/tests/fixtures/linux_sched_mix
work=$(mktemp -d /tmp/hvprof-sched-bench.XXXXXX)
hv_pid=
cleanup() {
  "$bin/hvprof" --shutdown --session-dir="$work/s" --run-dir="$work/run" >/dev/null 2>&1 || true
  [ -n "$hv_pid" ] && kill "$hv_pid" 2>/dev/null && wait "$hv_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

build/bin/sample_path_bench --benchmark_filter='^RecordSched$' --benchmark_min_time=1 --benchmark_format=json \
  >"$work/engine.json" 2>/dev/null
build/bin/agent_bench --benchmark_filter='^DrainAndStoreSched' --benchmark_format=json >"$work/agent.json" 2>/dev/null

python3 bench/scale/make_scenario.py 16 16 4 "$work/sched64.json" --speed=max --load=0.7
"$bin/hvprof-hv" --platform=sim --scenario="$work/sched64.json" --speed=max --run-dir="$work/run" \
  --log-level=warning &
hv_pid=$!
for _ in $(seq 200); do [ -S "$work/run/domain-0.sock" ] && break; sleep 0.05; done
hv() { "$bin/hvprof" --session-dir="$work/s" --run-dir="$work/run" "$@" >/dev/null; }
record_start=$(date +%s.%N)
hv --start-daemon --passive-domains=all --sched -e CPU_CLK_UNHALTED:3000000
hv --start
hv --run-sim="${seconds}s"
hv --stop
hv --shutdown
record_end=$(date +%s.%N)
kill "$hv_pid"; wait "$hv_pid" 2>/dev/null || true; hv_pid=
session=$(ls -d "$work"/s/samples/*/ | head -n 1)

best_of_3() {  # command... -> the shortest wall time in seconds
  python3 - "$@" <<'PY'
import subprocess, sys, time
best = None
for _ in range(3):
    start = time.perf_counter()
    subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    elapsed = time.perf_counter() - start
    best = elapsed if best is None else min(best, elapsed)
print(f"{best:.4f}")
PY
}
report_seconds=$(best_of_3 "$bin/hvprof-report" --session-dir="$work/s" "$session" --sched)
peak_kib=$(/usr/bin/time -f %M "$bin/hvprof-report" --session-dir="$work/s" "$session" --sched 2>&1 >/dev/null | tail -n 1)

perf_events=0
perf_seconds=
if command -v perf >/dev/null && [ "$(id -u)" = 0 ]; then
  records=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['sched']['records'])" "$session/session.json")
  count_events() { perf script -i "$1" -F event 2>/dev/null | wc -l; }
  # Calibrate: how many events a second of the workload gives, then record about as many as the
  # session has records (at most a minute).
  perf sched record -a -B -N -o "$work/calibrate.data" -- "$mix" 1000 8 >/dev/null 2>&1
  per_second=$(count_events "$work/calibrate.data")
  ms=$(python3 -c "print(max(1000, min(60000, int(1000 * $records / max(1, $per_second)))))")
  perf sched record -a -B -N -o "$work/perf.data" -- "$mix" "$ms" 8 >/dev/null 2>&1
  perf_events=$(count_events "$work/perf.data")
  perf_seconds=$(best_of_3 perf sched timehist -i "$work/perf.data" -s)
fi

python3 - "$work/engine.json" "$work/agent.json" "$session/session.json" "$report_seconds" "$peak_kib" \
  "$perf_events" "${perf_seconds:-0}" "$record_start" "$record_end" "$seconds" <<'PY'
import json, sys
engine, agent, meta = (json.load(open(p)) for p in sys.argv[1:4])
report_s, peak_kib, perf_events, perf_s = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
record_s = float(sys.argv[9]) - float(sys.argv[8])
sim_seconds = float(sys.argv[10])
def figure(name, ours, peer, ratio, goal, result):
    print("\t".join(["FIGURE", name, ours, peer, ratio, goal, result]))
b = engine["benchmarks"][0]
ns = b["cpu_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
print(f"engine: {ns:.1f} ns per scheduling record, {1e9 / ns / 1e6:.1f}M records/s on one CPU")
figure("engine RecordSched: records per second of one CPU", f"{1e3 / ns:.1f}M/s ({ns:.1f} ns)", "-", "-", "info", "info")
a = agent["benchmarks"][0]
rate = a["items_per_second"]
print(f"agent: drain + store {rate / 1e6:.2f}M records/s on one thread")
figure("agent drain+store of scheduling records", f"{rate / 1e6:.2f}M/s", "-", "-", "info", "info")
sched = meta["sched"]
records = sched["records"]
bytes_ = sched["file"]["bytes"]
lost = sum(sched["lost"].values())
print(f"session: {records} scheduling records of 64 vCPUs in {sim_seconds:g} simulated s, {bytes_ / records:.1f} bytes each "
      f"on disk, {lost} lost; recorded in {record_s:.1f} s")
figure("sim 64 vCPUs: scheduling records lost", str(lost), "-", "-", "0", "pass" if lost == 0 else "fail")
ours_ns = report_s * 1e9 / records
print(f"hvprof-report --sched: {report_s:.3f} s for {records} records ({ours_ns:.0f} ns each), peak {peak_kib / 1024:.1f} MiB "
      f"({peak_kib * 1024 / records:.0f} bytes per record)")
if perf_events and perf_s:
    perf_ns = perf_s * 1e9 / perf_events
    ratio = perf_ns / ours_ns
    print(f"perf sched timehist -s: {perf_s:.3f} s for {perf_events} events ({perf_ns:.0f} ns each): "
          f"hvprof is {ratio:.1f}x faster per record")
    figure("--sched report time per record vs perf sched timehist -s", f"{report_s:.2f} s / {records}",
           f"{perf_s:.2f} s / {perf_events}", f"{ratio:.1f}x", ">= 1x", "pass" if ratio >= 1 else "fail")
else:
    print("perf sched timehist: not measured (needs root and linux-perf)")
    figure("--sched report time", f"{report_s:.2f} s / {records}", "not measured", "-", ">= 1x", "info")
PY
