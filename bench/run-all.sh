#!/usr/bin/env bash
# Every benchmark of the project in one run, and one table of what they measured (issue 22):
#   figure | hvprof | peer | ratio | goal | result
# Each benchmark prints its figures as lines "FIGURE<TAB>name<TAB>hvprof<TAB>peer<TAB>ratio<TAB>goal
# <TAB>pass|fail|info" beside its own prose (bench/README.md); this script runs them one after
# the other (they must not share the 2 CPUs), keeps each one's full output in a log directory,
# and prints the table, then the benchmarks that failed to run. Exit status: 0 when every goal
# held, 1 when a goal failed, 2 when a benchmark could not run.
#   bench/run-all.sh [--quick] [--only NAME[,NAME...]] [--list]
# --quick runs each benchmark at its smallest useful size (minutes, not an hour); --only runs the
# named ones (see --list). Needs root and linux-perf for the linux and report benchmarks.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
only=""
list=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only="$2"; shift ;;
    --only=*) only="${1#--only=}" ;;
    --list) list=1 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-all: unknown argument '$1' (--quick, --only NAMES, --list)" >&2; exit 2 ;;
  esac
  shift
done

# name | full command | quick command
benches=(
  "engine|bench/engine.sh 1|bench/engine.sh 0.2"
  "agent|bench/agent/run.sh 10s|bench/agent/run.sh 3s"
  "scale|bench/scale/run.sh 5|bench/scale/run.sh 2"
  "linux-default|bench/linux/busy_default.sh 3 24|bench/linux/busy_default.sh 1 8"
  "linux-under-load|python3 bench/linux/under_load.py --runs 3|python3 bench/linux/under_load.py --runs 1 --rounds 1000"
  "symbolizer|bench/symbolizer/run.sh|bench/symbolizer/run.sh --quick --no-vmlinux"
  "report|bench/report/run.sh|PERF_SECONDS=10 bench/report/run.sh"
  "report-stacks|bench/report/stacks.sh|bench/report/stacks.sh 8"
  "report-diff|bench/report/diff.sh|bench/report/diff.sh 2000000"
  "sched|bench/sched/run.sh 10|bench/sched/run.sh 2"
  "long|bench/long/run.sh 1 5 30|bench/long/run.sh 1"
  "sim-day|bench/long/sim-day.sh 24 60|bench/long/sim-day.sh 1 15"
  "buildid-cache|bench/buildid-cache/run.sh 3|bench/buildid-cache/run.sh 1"
  "continuous-overhead|bench/continuous/overhead.sh 120 60s|bench/continuous/overhead.sh 30 10s"
  "continuous-week|bench/continuous/week.sh 7 10m|bench/continuous/week.sh 1 10m"
)
if [ "$list" = 1 ]; then
  for entry in "${benches[@]}"; do IFS='|' read -r name full short <<<"$entry"; echo "$name: $full"; done
  exit 0
fi

ninja -C build sample_path_bench agent_bench sim_bench continuous_week hvprof hvprofd hvprof-hv hvprof-report \
  hvprof-symbolize linux_hotspots linux_sched_mix >/dev/null || { echo "run-all: the build failed" >&2; exit 2; }
logs=$(mktemp -d /tmp/hvprof-bench.XXXXXX)
figures="$logs/figures.tsv"
: >"$figures"
broken=()
for entry in "${benches[@]}"; do
  IFS='|' read -r name full short <<<"$entry"
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  command=$full
  [ "$quick" = 1 ] && command=$short
  echo "== $name: $command" >&2
  start=$(date +%s)
  bash -c "$command" >"$logs/$name.log" 2>&1
  status=$?
  echo "   $(( $(date +%s) - start )) s, exit $status, log $logs/$name.log" >&2
  grep -P '^FIGURE\t' "$logs/$name.log" | cut -f2- >>"$figures"
  [ "$status" = 0 ] || broken+=("$name (exit $status: $(tail -1 "$logs/$name.log"))")
done

python3 - "$figures" <<'PY'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
rows = [r + [""] * (6 - len(r)) for r in rows]
head = ["figure", "hvprof", "peer", "ratio", "goal", "result"]
widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
print(line(head))
print("-+-".join("-" * w for w in widths))
for r in rows:
    print(line(r[:6]))
failed = sum(r[5] == "fail" for r in rows)
print(f"\n{len(rows)} figures: {sum(r[5] == 'pass' for r in rows)} pass, {failed} fail, "
      f"{sum(r[5] == 'info' for r in rows)} info")
PY
for b in "${broken[@]}"; do echo "could not run: $b"; done
echo "logs: $logs"
[ ${#broken[@]} -eq 0 ] || exit 2
grep -qP '\tfail$' "$figures" && exit 1
exit 0
