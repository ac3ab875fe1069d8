#!/usr/bin/env bash
# How hvprof grows with the host (issue 22, item 5), on the sim: from 2 pCPUs to 256 pCPUs with
# 2,000 vCPUs in 500 domains, every vCPU busy.
#   1. engine: ns per sample on the sample path (build/bin/sample_path_bench, fake platform);
#      goal: on the 256-pCPU host within 20% of the 2-pCPU one, with as many vCPUs running.
#      With every pCPU busy, one core stands in for 256 caches and most samples write a cold
#      ring slot: that figure, and another ring every sample, are printed for information.
#   2. agent: hvprof-hv runs the sim in real time at 1M samples/s in total, hvprofd drains every
#      ring with default settings for DURATION; goal: no loss. Also hvprofd's CPU share, and
#      memory: a vCPU ring's bytes, hvprofd's and hvprof-hv's resident memory per domain.
#   3. start: `hvprof --start-daemon --passive-domains=all` plus `hvprof --start` for 2,000
#      single-vCPU domains on 256 pCPUs; goal: under 2 s.
# Every figure at each size, then FIGURE lines for bench/run-all.sh.
#   bench/scale/run.sh [DURATION_SECONDS]     (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${1:-5}
ninja -C build hvprof hvprofd hvprof-hv sample_path_bench >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-scale-bench.XXXXXX)
hv_pid=
cleanup() {
  "$bin/hvprof" --shutdown --session-dir="$work/s" --run-dir="$work/run" >/dev/null 2>&1 || true
  if [ -n "$hv_pid" ]; then kill "$hv_pid" 2>/dev/null || true; wait "$hv_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
ticks=$(getconf CLK_TCK)
results=$work/results.tsv
: >"$results"

# ---- 1. engine
echo "== 1. the engine's sample path, ns per sample"
"$bin/sample_path_bench" --benchmark_filter='^RecordSampleScale' --benchmark_min_time=1 \
  --benchmark_format=json >"$work/engine.json" 2>/dev/null
python3 - "$work/engine.json" "$results" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
with open(sys.argv[2], "a") as out:
    for b in data["benchmarks"]:
        args = dict(part.split(":") for part in b["name"].split("/")[1:])
        ns = b["cpu_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
        if args["busy"] == "2":
            pattern, what = "own", "8 vCPUs running on 2 pCPUs"
        elif args["run"] == "1":
            pattern, what = "random", "every pCPU busy, another ring every sample"
        else:
            pattern, what = "busy", "every pCPU busy, 32 samples per slice"
        print(f"  {args['cpus']:>3} pCPUs, {args['domains']:>3} domains x {args['vcpus']} vCPUs, {what}: {ns:5.1f} ns")
        out.write(f"engine\t{pattern}\t{args['cpus']}\t{ns}\n")
PY

# ---- 2. agent at 1M samples/s
start_hv() {  # scenario
  "$bin/hvprof-hv" --platform=sim --scenario="$1" --run-dir="$work/run" --log-level=warning &
  hv_pid=$!
  for _ in $(seq 600); do [ -S "$work/run/domain-0.sock" ] && return; sleep 0.05; done
  echo "hvprof-hv did not start" >&2; exit 2
}
stop_hv() { kill "$hv_pid" 2>/dev/null || true; wait "$hv_pid" 2>/dev/null || true; hv_pid=; rm -rf "$work/run" "$work/s"; }
hvprof() { "$bin/hvprof" --session-dir="$work/s" --run-dir="$work/run" "$@" >/dev/null; }
agent_pid() { pgrep -n -f "hvprofd .*--setup=$work/s/" ; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

echo
echo "== 2. hvprofd at 1M samples/s in total, every vCPU busy, ${duration}s of real time"
for size in "2 4 2" "16 32 4" "64 125 4" "256 500 4"; do
  read -r cpus domains vcpus <<<"$size"
  scenario=$work/scale-$cpus.json
  bench/scale/make_scenario.py "$cpus" "$domains" "$vcpus" "$scenario"
  # Every pCPU is busy: 3e9 cycles a second each, one sample per COUNT cycles.
  count=$((cpus * 3000))
  start_hv "$scenario"
  hv_base=$(rss_kib "$hv_pid")
  hvprof --start-daemon --passive-domains=all -e "CPU_CLK_UNHALTED:$count"
  pid=$(agent_pid)
  agent_base=$(rss_kib "$pid")
  hvprof --start
  t0=$(cpu_ticks "$pid"); h0=$(cpu_ticks "$hv_pid"); w0=$(date +%s.%N)
  sleep "$duration"
  hvprof --stop
  t1=$(cpu_ticks "$pid"); h1=$(cpu_ticks "$hv_pid"); w1=$(date +%s.%N)
  agent_peak=$(rss_kib "$pid"); hv_peak=$(rss_kib "$hv_pid")
  python3 - "$work/s/samples/current/session.json" "$results" "$cpus" "$domains" "$vcpus" \
    "$t0" "$t1" "$h0" "$h1" "$w0" "$w1" "$ticks" "$agent_base" "$agent_peak" "$hv_base" "$hv_peak" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
out = sys.argv[2]
cpus, domains, vcpus = map(int, sys.argv[3:6])
t0, t1, h0, h1, w0, w1, ticks, agent_base, agent_peak, hv_base, hv_peak = map(float, sys.argv[6:])
seconds = (m["last_sample_ns"] - m["first_sample_ns"]) / 1e9
losses = m["losses"]
lost = sum(v for k, v in losses.items() if isinstance(v, int) and k != "unprofiled_domain")
stored = m["samples_stored"]
wall = w1 - w0
rate = stored / seconds if seconds > 0 else 0
ring_bytes = 4096 + 64 * m["buffers"]["capacity"] if "buffers" in m else 0
agent_cpu = 100 * (t1 - t0) / ticks / wall
hv_cpu = 100 * (h1 - h0) / ticks / wall
rings = sum(1 for r in m["rings"] if r["kind"] == "vcpu")
print(f"  {cpus:>3} pCPUs, {domains:>3} domains, {rings:>4} vCPU rings: {rate/1e6:.2f}M samples/s over "
      f"{seconds:.2f} s of sim time ({wall:.2f} s wall), lost {lost}; hvprofd {agent_cpu:.1f}% of a core, "
      f"hvprof-hv {hv_cpu:.1f}%; peak memory hvprofd {agent_peak/1024:.0f} MiB ({(agent_peak-agent_base)/domains:.0f} KiB "
      f"per domain after setup), hvprof-hv {hv_peak/1024:.0f} MiB")
with open(out, "a") as f:
    f.write(f"agent\t{cpus}\t{domains}\t{rings}\t{rate}\t{lost}\t{agent_cpu}\t{agent_peak/domains}\t{hv_peak/domains}\t{ring_bytes}\t{seconds/wall}\n")
PY
  hvprof --shutdown
  stop_hv
done

# ---- 3. session start
echo
echo "== 3. session start: --start-daemon --passive-domains=all, then --start"
for size in "2 4" "16 125" "64 500" "256 2000"; do
  read -r cpus domains <<<"$size"
  scenario=$work/start-$cpus.json
  bench/scale/make_scenario.py "$cpus" "$domains" 1 "$scenario"
  start_hv "$scenario"
  w0=$(date +%s.%N)
  hvprof --start-daemon --passive-domains=all
  w1=$(date +%s.%N)
  hvprof --start
  w2=$(date +%s.%N)
  python3 - "$results" "$cpus" "$domains" "$w0" "$w1" "$w2" <<'PY'
import sys
out = sys.argv[1]
cpus, domains = map(int, sys.argv[2:4])
w0, w1, w2 = map(float, sys.argv[4:])
print(f"  {cpus:>3} pCPUs, {domains:>4} domains: {w2 - w0:.2f} s (--start-daemon {w1 - w0:.2f} s, --start {w2 - w1:.2f} s)")
with open(out, "a") as f:
    f.write(f"start\t{cpus}\t{domains}\t{w2 - w0}\n")
PY
  hvprof --shutdown
  stop_hv
done

echo
python3 - "$results" <<'PY'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
engine = {(r[1], int(r[2])): float(r[3]) for r in rows if r[0] == "engine"}
agent = {int(r[1]): r for r in rows if r[0] == "agent"}
start = {int(r[1]): float(r[3]) for r in rows if r[0] == "start"}  # by pCPUs, as the others

def figure(name, hv, peer, ratio, goal, result):
    print("\t".join(["FIGURE", name, hv, peer, ratio, goal, result]))

print("how each figure grows from 2 to 256 pCPUs:")
for cpus in sorted({c for _, c in engine}):
    line = (f"  {cpus:>3} pCPUs: engine {engine.get(('own', cpus), engine.get(('busy', cpus), float('nan'))):.1f} ns/sample "
            f"(all busy {engine.get(('busy', cpus), float('nan')):.1f})")
    if cpus in agent:
        r = agent[cpus]
        line += (f"; agent {float(r[4])/1e6:.2f}M samples/s, lost {r[5]}, {float(r[6]):.1f}% of a core, "
                 f"{float(r[7]):.0f} KiB/domain")
    if cpus in start:
        line += f"; session start {start[cpus]:.2f} s"
    print(line)
base = engine.get(("busy", 2))
own, busy, rand = engine.get(("own", 256)), engine.get(("busy", 256)), engine.get(("random", 256))
if base and own:
    figure("scale: engine ns/sample, 256-pCPU 500-domain host vs 2 pCPUs (same vCPUs running)", f"{own:.1f} ns",
           f"{base:.1f} ns (2 pCPUs)", f"{own/base:.2f}x", "<= 1.2x", "pass" if own <= 1.2 * base else "fail")
if base and busy:
    figure("scale: engine ns/sample, all 256 pCPUs busy, 2000 rings on one core", f"{busy:.1f} ns",
           f"{base:.1f} ns (2 pCPUs)", f"{busy/base:.2f}x", "-", "info")
if engine.get(("random", 2)) and rand:
    figure("scale: engine ns/sample, another of 2000 rings every sample", f"{rand:.1f} ns",
           f"{engine[('random', 2)]:.1f} ns (2 pCPUs)", f"{rand/engine[('random', 2)]:.2f}x", "-", "info")
if 256 in agent:
    r = agent[256]
    rate, lost = float(r[4]), int(r[5])
    figure("scale: hvprofd at 1M samples/s, 256 pCPUs 2000 vCPUs, lost", f"{lost} of {rate/1e6:.2f}M/s", "-", "-",
           "no loss at >= 0.95M/s", "pass" if lost == 0 and rate >= 0.95e6 else "fail")
    figure("scale: hvprofd CPU at 1M samples/s, 256 pCPUs", f"{float(r[6]):.1f}% of a core", "-", "-", "-", "info")
    figure("scale: memory per vCPU ring (shared, default capacity)", f"{int(r[9])/1024:.0f} KiB", "-", "-", "-", "info")
    figure("scale: hvprofd peak memory per domain, 500 domains", f"{float(r[7]):.0f} KiB", "-", "-", "-", "info")
    figure("scale: hvprof-hv peak memory per domain, 500 domains", f"{float(r[8]):.0f} KiB", "-", "-", "-", "info")
if 256 in start:
    figure("scale: session start, 2000 domains on 256 pCPUs", f"{start[256]:.2f} s", "-", "-", "< 2 s",
           "pass" if start[256] < 2 else "fail")
PY
