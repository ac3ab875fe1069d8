#!/usr/bin/env bash
# What continuous mode costs on this host (issue 43): `hvprof --start-daemon --platform=linux
# --continuous=WINDOW -g` at its default rate (99 Hz per CPU) against `perf record -F 99 -a -g`
# at the same rate, each for SECONDS, one after the other, while a busy loop keeps one CPU
# working. Prints the CPU time each profiler's processes took (hvprofd and hvprof-hv; perf),
# as a share of the machine (SECONDS x CPUs) and as a ratio, and the disk each wrote. The goal
# is at most 1% of the machine. Needs root (or perf_event_paranoid <= -1) and linux-perf.
#   bench/continuous/overhead.sh [SECONDS=120] [WINDOW=60s]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-120}
window=${2:-60s}
ninja -C build hvprof hvprofd hvprof-hv >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-continuous-bench.XXXXXX)
loop=
cleanup() {
  "$bin/hvprof" --session-dir="$work/s" --shutdown >/dev/null 2>&1 || true
  [ -n "$loop" ] && kill "$loop" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"; }  # utime stime cutime cstime
hz=$(getconf CLK_TCK)
cpus=$(nproc)

(while :; do :; done) &
loop=$!

"$bin/hvprof" --start-daemon --platform=linux --session-dir="$work/s" --run-dir="$work/run" \
  --continuous="$window" -g >"$work/start.log" 2>&1 || { cat "$work/start.log" >&2; exit 1; }
agent=$(head -n 1 "$work/s/lock")
hv=$(head -n 1 "$work/run/hvprof-hv.pid")
a0=$(ticks "$agent"); h0=$(ticks "$hv")
sleep "$seconds"
a1=$(ticks "$agent"); h1=$(ticks "$hv")
windows=$(ls -d "$work/s/samples"/window-* 2>/dev/null | wc -l)
hvprof_bytes=$(du -sb "$work/s/samples" | cut -f1)
"$bin/hvprof" --session-dir="$work/s" --shutdown >/dev/null

# perf runs 3 s longer than it is measured: its ticks are read 1 s after it starts and SECONDS
# later, while it still runs (as hvprof's are: neither start-up nor the end counts).
perf record -F 99 -a -g -q -o "$work/perf.data" -- sleep "$((seconds + 3))" >"$work/perf.log" 2>&1 &
perf_pid=$!
sleep 1
p0=$(ticks "$perf_pid")
sleep "$seconds"
p1=$(ticks "$perf_pid")
wait "$perf_pid"
perf_bytes=$(stat -c %s "$work/perf.data")
python3 - "$seconds" "$cpus" "$hz" "$((a1 - a0))" "$((h1 - h0))" "$p0" "$p1" "$windows" "$hvprof_bytes" "$perf_bytes" "$window" <<'PY'
import sys
seconds, cpus, hz, agent, hv, p0, p1, windows, hvprof_bytes, perf_bytes = (float(x) for x in sys.argv[1:11])
window = sys.argv[11]
hvprof_s = (agent + hv) / hz
perf_s = max(p1 - p0, 0) / hz
machine = seconds * cpus
print(f"{seconds:.0f} s on {cpus:.0f} CPUs, one busy, 99 samples/s per CPU with call chains:")
print(f"  hvprof continuous ({window} windows, {windows:.0f} closed)  hvprofd {agent / hz:.2f} s + hvprof-hv {hv / hz:.2f} s CPU"
      f" = {100 * hvprof_s / machine:.3f}% of the machine; {hvprof_bytes / 1e6:.1f} MB on disk")
print(f"  perf record -F 99 -a -g                 {perf_s:.2f} s CPU = {100 * perf_s / machine:.3f}% of the machine;"
      f" {perf_bytes / 1e6:.1f} MB perf.data")
ratio = hvprof_s / perf_s if perf_s > 0 else float("inf")
print(f"  hvprof / perf CPU: {ratio:.1f}x")
share = 100 * hvprof_s / machine
print("\t".join(["FIGURE", "continuous 99 Hz -g: CPU, share of the machine", f"{share:.3f}%", f"{100 * perf_s / machine:.3f}%",
                 f"{ratio:.1f}x", "<=1%", "pass" if share <= 1 else "fail"]))
print("\t".join(["FIGURE", "continuous 99 Hz -g: bytes on disk", f"{hvprof_bytes / 1e6:.1f}MB", f"{perf_bytes / 1e6:.1f}MB",
                 f"{hvprof_bytes / perf_bytes:.2f}x" if perf_bytes else "-", "info", "info"]))
PY
