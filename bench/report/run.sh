#!/usr/bin/env bash
# Report time for a session of ~10M samples (issue 6), against `perf report` on a perf.data
# of a similar size recorded on this machine in the same run.
#   hvprof: a sim session on bench/data/throughput.json with dom0's kernel as the vmlinux of
#           linux-image-amd64-dbg (ELF with DWARF, ~630 MB) and xen-syms, samples spread over
#           2000 kernel and 500 libc functions per domain; reported by symbol (-l), from the
#           session's aggregate and from the raw samples (--raw-samples), with --timing.
#   perf:   `perf record -a -e cpu-clock -c 10000` while two `xz -9` run, for PERF_SECONDS
#           (default 50, about 10M samples on 2 CPUs), then `perf report --stdio --sort dso,sym`.
# Needs root for perf (or kernel.perf_event_paranoid <= 0). Prints samples per second of both,
# and two machine-readable lines (FIGURE<TAB>name<TAB>hvprof<TAB>peer<TAB>ratio<TAB>goal<TAB>
# pass|fail|info): the raw-samples report against perf report in samples per second (goal
# >=10x, issue 22 item 7), and hvprof-report's peak memory per million samples (information;
# its ratio is hvprof's over perf report's).
#   bench/report/run.sh [SAMPLES]      (default 10000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
samples=${1:-10000000}
perf_seconds=${PERF_SECONDS:-50}
ninja -C build hvprof hvprofd hvprof-hv hvprof-report >/dev/null
bin=$PWD/build/bin
vmlinux=$(ls /usr/lib/debug/boot/vmlinux-* 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$vmlinux" ]; then
  echo "report bench: needs a vmlinux with symbols: apt-get install linux-image-amd64-dbg" >&2
  exit 1
fi
work=$(mktemp -d /tmp/hvprof-report-bench.XXXXXX)
hv_pid=
cleanup() {
  [ -n "$hv_pid" ] && kill "$hv_pid" 2>/dev/null && wait "$hv_pid" 2>/dev/null
  [ -n "${load_pids:-}" ] && kill "${load_pids[@]}" 2>/dev/null
  pkill -f "xz -9c $vmlinux" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

python3 - "$vmlinux" "$work/scenario.json" <<'PY'
import json, sys
scenario = json.load(open("bench/data/throughput.json"))
scenario["name"] = "report-bench"
for domain in scenario["domains"]:
    if domain["id"] == 0:
        domain["kernel"] = {"elf": sys.argv[1]}
    domain["workload"]["kernel"]["auto"]["count"] = 2000
    domain["workload"]["user"]["auto"]["count"] = 500
json.dump(scenario, open(sys.argv[2], "w"), indent=1)
PY

echo "== hvprof: recording a session of $samples samples (sim, max speed)"
# shellcheck source=bench/report/record_sim.sh
. bench/report/record_sim.sh
record_sim "$work/scenario.json" "$samples"
session=$work/s/samples/current

report() {  # label, extra options
  local label=$1; shift
  local start end
  start=$(date +%s.%N)
  /usr/bin/time -f %M -o "$work/rss.txt" \
    "$bin/hvprof-report" "$session" -l "$@" --timing >"$work/report.txt" 2>"$work/timing.txt"
  end=$(date +%s.%N)
  echo "-- hvprof-report -l $* ($label): $(python3 -c "print(f'{$end-$start:.2f}')") s wall," \
    "peak RSS $(( $(cat "$work/rss.txt") / 1024 )) MiB"
  sed 's/^/   /' "$work/timing.txt"
}
echo "== hvprof-report, cold page cache for the images is not forced; second runs are warm"
report "aggregate"
report "raw samples" --raw-samples
hvprof_total=$(awk '/^timing:/ {print $2}' "$work/timing.txt")
hvprof_wall=$(awk '/total:/ {gsub(";", "", $2); print $2}' "$work/timing.txt")
hvprof_processing=$(awk '/without symbol tables:/ {print $(NF-1)}' "$work/timing.txt")
hvprof_rss=$(cat "$work/rss.txt")
head -12 "$work/report.txt" | tail -6

echo
echo "== perf: recording $perf_seconds s of cpu-clock every 10 us on all CPUs, two xz -9 running"
load_pids=()
for _ in 1 2; do (while :; do xz -9c "$vmlinux" >/dev/null; done) & load_pids+=($!); done
perf record -q -o "$work/perf.data" -a -e cpu-clock -c 10000 -- sleep "$perf_seconds" 2>"$work/perf-record.txt" || {
  echo "perf record failed (needs root or kernel.perf_event_paranoid <= 0):" >&2
  cat "$work/perf-record.txt" >&2
  exit 1
}
kill "${load_pids[@]}" 2>/dev/null; wait "${load_pids[@]}" 2>/dev/null || true
pkill -f "xz -9c $vmlinux" 2>/dev/null || true
perf_samples=$(perf report -i "$work/perf.data" --stdio --sort dso 2>/dev/null | awk '/^# Samples:/ {print $3; exit}')
perf report -i "$work/perf.data" --stdio --sort dso,sym >/dev/null 2>&1  # warm the caches
start=$(date +%s.%N)
/usr/bin/time -f %M -o "$work/perf-rss.txt" \
  perf report -i "$work/perf.data" --stdio --sort dso,sym >"$work/perf-report.txt" 2>/dev/null
end=$(date +%s.%N)
perf_rss=$(cat "$work/perf-rss.txt")
perf_exact=$(perf script -i "$work/perf.data" -F ip 2>/dev/null | wc -l)
python3 - "$hvprof_total" "$hvprof_wall" "$hvprof_processing" "$perf_exact" "$start" "$end" "$perf_samples" \
  "$hvprof_rss" "$perf_rss" <<'PY'
import sys
hv_samples, hv_wall, hv_processing = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
perf_samples, start, end = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
hv_rss, perf_rss = int(sys.argv[8]) / 1024, int(sys.argv[9]) / 1024  # MiB
perf_wall = end - start
print(f"-- perf report --stdio --sort dso,sym: {perf_samples} samples ({sys.argv[7]}) in {perf_wall:.2f} s, "
      f"peak RSS {perf_rss:.0f} MiB")
print()
hv_rate, perf_rate = hv_samples / hv_wall, perf_samples / perf_wall
ratio = hv_rate / perf_rate
print(f"hvprof-report -l --raw-samples: {hv_samples} samples in {hv_wall:.2f} s: {hv_rate/1e6:.1f}M samples/s;"
      f" {hv_processing:.2f} s without loading symbol tables; peak RSS {hv_rss:.0f} MiB")
print(f"perf report:                    {perf_samples} samples in {perf_wall:.2f} s: {perf_rate/1e6:.2f}M samples/s;"
      f" peak RSS {perf_rss:.0f} MiB")
print(f"ratio (samples/s, hvprof / perf): {ratio:.1f}x")
hv_per_m, perf_per_m = hv_rss / (hv_samples / 1e6), perf_rss / (perf_samples / 1e6)
print(f"memory per million samples: hvprof-report {hv_per_m:.1f} MiB, perf report {perf_per_m:.1f} MiB")
print()
print(f"FIGURE\treport: hvprof-report -l --raw-samples vs perf report --sort dso,sym, samples/s\t"
      f"{hv_rate/1e6:.2f} M samples/s\t{perf_rate/1e6:.2f} M samples/s\t{ratio:.1f}x\t>=10x\t"
      f"{'pass' if ratio >= 10 else 'fail'}")
print(f"FIGURE\treport: peak memory per million samples (hvprof-report --raw-samples, perf report)\t"
      f"{hv_per_m:.1f} MiB\t{perf_per_m:.1f} MiB\t{hv_per_m/perf_per_m:.2f}x\t-\tinfo")
PY
