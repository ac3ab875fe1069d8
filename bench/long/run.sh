#!/usr/bin/env bash
# Long runs on a busy host (issue 42): `hvprof run --platform=linux -F 10000 --callgraph=16` of
# storm.sh (short processes without pause beside a spinning thread) for each length given, and
# `perf record -a -g -F 10000 --no-buildid-cache` of the same workload for the same length, one
# after the other.
# Measured for each tool: the session's bytes per sample (hvprof: every file of the session;
# perf: perf.data), hvprof's aggregate against its raw samples and its context bytes per
# process, the recording daemons' peak memory and their memory at minute 1 and at the end of the
# workload, their CPU in the first and the last minute, the end-of-run delay (from the workload's
# end to the tool's exit), and the report's time and peak memory (`hvprof-report -l` against
# `perf report --stdio --sort dso,sym`, the latter capped at PERF_REPORT_GB of memory (default 16)
# and 30 minutes: beyond, it is said not to finish).
#   sudo bench/long/run.sh [MINUTES...]     (default: 1 5 30; NO_PERF=1 skips perf, KEEP=1 keeps
#                                            the sessions and logs in /tmp)
# Prints each run's figures and FIGURE lines (bench/run-all.sh): per length, the aggregate's
# size over the raw samples' (goal < 1), hvprof's memory growth from minute 1 to the end (goal
# < 64 MiB), its CPU in the last minute over the first (goal <= 1.5), the end-of-run delay
# (goal < 2 s, beside perf record's), the session's bytes per sample and the report's time
# and memory (beside perf's).
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=("$@")
[ ${#minutes[@]} -gt 0 ] || minutes=(1 5 30)
command -v perf >/dev/null || [ "${NO_PERF:-0}" = 1 ] || {
  echo "long bench: needs perf (apt-get install linux-perf), or NO_PERF=1" >&2
  exit 1
}
ninja -C build hvprof hvprofd hvprof-hv hvprof-report >/dev/null
bin=$PWD/build/bin
here=$PWD/bench/long
work=$(mktemp -d /tmp/hvprof-long-bench.XXXXXX)
monitor_pid=
cleanup() {
  local status=$?
  [ -z "$monitor_pid" ] || kill "$monitor_pid" 2>/dev/null || true
  # A failed run keeps what it made: half an hour of storm is not to be thrown away.
  if [ "${KEEP:-0}" = 1 ] || [ "$status" != 0 ]; then echo "long bench: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

py() { python3 -c "import json, sys; $1"; }
now() { date +%s.%N; }
watch() {  # OUT PATTERN...: starts the monitor; prints when it started
  local out=$1; shift
  python3 "$here/monitor.py" "$out" 1 "$@" &
  monitor_pid=$!
}
unwatch() {
  kill "$monitor_pid" 2>/dev/null || true
  wait "$monitor_pid" 2>/dev/null || true
  monitor_pid=
}
figure() {  # name hvprof peer goal result: one FIGURE line (ratio hvprof/peer, or "-")
  local ratio="-"
  if [ "$3" != "-" ] && py "sys.exit(0 if float('$3') > 0 else 1)"; then
    ratio=$(py "print(f'{float(\"$2\") / float(\"$3\"):.3g}')")
  fi
  printf 'FIGURE\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$ratio" "$4" "$5"
}
verdict() { py "sys.exit(0 if $1 else 1)" && echo pass || echo fail; }

for m in "${minutes[@]}"; do
  seconds=$((m * 60))
  window=$((seconds < 60 ? seconds : 60))
  echo "== $m min: hvprof run --platform=linux -F 10000 --callgraph=16 -- storm.sh $seconds"
  run=$work/run-$m
  mkdir -p "$run"
  start=$(now)
  # The daemons: hvprofd by its setup file in the session directory, hvprof-hv by its arguments
  # (hvprof run gives it a run directory of its own).
  watch "$run/hvprof.monitor" "--setup=$run/s/" "hvprof-hv --platform=linux"
  "$bin/hvprof" run --platform=linux -F 10000 --callgraph=16 --run-dir="$run/rundir" --session-dir="$run/s" \
    -- "$here/storm.sh" "$seconds" "$run/hvprof.times" >"$run/hvprof.out" 2>"$run/hvprof.err" || {
    echo "hvprof run failed:" >&2
    tail -5 "$run/hvprof.err" >&2
    exit 1
  }
  finished=$(now)
  unwatch
  read -r storm_start storm_end loops <"$run/hvprof.times"
  session=$(ls -d "$run"/s/samples/run-* | head -n 1)
  # Exit status 3: reported, with warnings (samples lost, say), which are shown.
  report_status=0
  /usr/bin/time -f '%e %M' -o "$run/report.time" "$bin/hvprof-report" "$session" -l >"$run/report.txt" \
    2>"$run/report.err" || report_status=$?
  if [ "$report_status" != 0 ] && [ "$report_status" != 3 ]; then
    echo "hvprof-report -l failed (exit status $report_status) on $session:" >&2
    tail -5 "$run/report.err" >&2
    exit 1
  fi
  if [ "$report_status" != 0 ]; then  # its warnings are in the report's text and on stderr
    { grep -E '^(Warning|warning):' "$run/report.txt" "$run/report.err" -h || true; } | head -10 | sed 's/^/   report: /'
  fi
  "$bin/hvprof-report" "$session" -l -t 100 --format=json >"$run/report.json" 2>/dev/null || [ $? = 3 ]
  read -r report_s report_kb < <(tail -n 1 "$run/report.time")
  summary=$(python3 "$here/monitor.py" --summary "$run/hvprof.monitor" "$window" \
    "$(py "print($storm_end - $start)")")
  echo "$summary" >"$run/hvprof.summary"
  bytes() { stat -c %s "$session/$1" 2>/dev/null || echo 0; }
  samples_bytes=$(bytes samples.hvs)
  aggregate_bytes=$(bytes aggregate.hva)
  context_bytes=$(bytes context.hvc)
  metadata_bytes=$(bytes session.json)
  session_bytes=$(du -sb "$session" | cut -f1)
  samples=$(py "print(json.load(open('$run/report.json'))['session']['samples'])")
  processes=$(py "print(json.load(open('$run/report.json'))['session']['processes'])")
  delay=$(py "print(f'{$finished - $storm_end:.2f}')")
  h() { py "s = json.load(open('$run/hvprof.summary'))['all']; print(round(s['$1'], 2))"; }
  cat <<TEXT
   $loops loops, $processes processes, $samples samples; ran $(py "print(f'{$finished - $start:.1f}')") s for a workload of $(py "print(f'{$storm_end - $storm_start:.1f}')") s: end-of-run delay $delay s
   session $session_bytes bytes ($(py "print(f'{$session_bytes / max($samples, 1):.1f}')") per sample): samples.hvs $samples_bytes, aggregate.hva $aggregate_bytes ($(py "print(f'{$aggregate_bytes / max($samples_bytes, 1):.2f}')") of the raw samples), context.hvc $context_bytes ($(py "print(f'{$context_bytes / max($processes, 1):.0f}')") per process), session.json $metadata_bytes
   daemons (hvprof-hv + hvprofd): peak $(h peak_rss_mb) MiB; $(h rss_at_window_mb) MiB at ${window} s, $(h rss_at_end_mb) MiB at the workload's end; CPU $(h cpu_first) of a CPU in the first ${window} s, $(h cpu_last) in the last
   hvprof-report -l: $report_s s, peak $((report_kb / 1024)) MiB
TEXT
  # Per thread (CPU of a CPU, then wake-ups per second, first window -> last): the thread to look
  # at when the daemons' CPU grows.
  py "
s = json.load(open('$run/hvprof.summary'))
f = lambda v, d: '-' if v is None else f'{v:.{d}f}'
for name in ('hvprof-hv', 'hvprofd'):
    for thread, t in s.get(name, {}).get('threads', {}).items():
        print(f'   thread {name}:{thread}: CPU {f(t[\"cpu_first\"], 3)} -> {f(t[\"cpu_last\"], 3)}, '
              f'wake-ups {f(t[\"wakeups_first\"], 0)} -> {f(t[\"wakeups_last\"], 0)} per s')
"
  sed 's/^/     /' "$run/hvprof.summary" | head -40 >"$run/summary.indented"

  perf_bytes=- perf_bps=- perf_delay=- perf_peak=- perf_report_s=- perf_report_mb=- perf_samples=-
  if [ "${NO_PERF:-0}" != 1 ]; then
    echo "== $m min: perf record --no-buildid-cache -a -g -F 10000 -- storm.sh $seconds"
    start=$(now)
    watch "$run/perf.monitor" "$run/perf.data"
    # --no-buildid-cache: perf 6.1 aborts in its build-id collection at the end of such runs here.
    perf record --no-buildid-cache -a -g -F 10000 -o "$run/perf.data" -- "$here/storm.sh" "$seconds" "$run/perf.times" \
      >"$run/perf.out" 2>"$run/perf.err" || { echo "perf record failed:" >&2; tail -5 "$run/perf.err" >&2; exit 1; }
    finished=$(now)
    unwatch
    read -r storm_start storm_end loops <"$run/perf.times"
    perf_delay=$(py "print(f'{$finished - $storm_end:.2f}')")
    perf_bytes=$(stat -c %s "$run/perf.data")
    perf_summary=$(python3 "$here/monitor.py" --summary "$run/perf.monitor" "$window" "$(py "print($storm_end - $start)")")
    perf_peak=$(py "print(round(json.loads('''$perf_summary''')['all']['peak_rss_mb'], 2))")
    perf_samples=$(perf report -i "$run/perf.data" --stats 2>/dev/null | awk '/^ *SAMPLE events:/ {print $3; exit}')
    perf_samples=${perf_samples:-0}
    perf_bps=$(py "print(f'{$perf_bytes / max($perf_samples, 1):.1f}')")
    echo "   $loops loops, $perf_samples samples; end-of-run delay $perf_delay s; perf.data $perf_bytes bytes ($perf_bps per sample); perf record peak $perf_peak MiB"
    limit_kb=$(( ${PERF_REPORT_GB:-16} * 1024 * 1024 ))
    if (ulimit -v "$limit_kb"; timeout 1800 /usr/bin/time -f '%e %M' -o "$run/perf-report.time" \
          perf report -i "$run/perf.data" --stdio --sort dso,sym >/dev/null 2>"$run/perf-report.err"); then
      read -r perf_report_s perf_report_kb < <(tail -n 1 "$run/perf-report.time")
      perf_report_mb=$((perf_report_kb / 1024))
      echo "   perf report --stdio --sort dso,sym: $perf_report_s s, peak $perf_report_mb MiB"
    else
      echo "   perf report did not finish within ${PERF_REPORT_GB:-16} GiB and 30 minutes: $(tail -1 "$run/perf-report.err")"
    fi
    rm -f "$run/perf.data"
  fi

  agg_ratio=$(py "print(f'{$aggregate_bytes / max($samples_bytes, 1):.3f}')")
  growth=$(py "s = json.load(open('$run/hvprof.summary'))['all']; print(round(s['rss_at_end_mb'] - s['rss_at_window_mb'], 1))")
  cpu_ratio=$(py "s = json.load(open('$run/hvprof.summary'))['all']; print(round(s['cpu_last'] / max(s['cpu_first'], 1e-6), 2))")
  bps=$(py "print(f'{$session_bytes / max($samples, 1):.1f}')")
  figure "long.${m}min.aggregate_over_raw" "$aggregate_bytes" "$samples_bytes" "<1" "$(verdict "$aggregate_bytes < $samples_bytes")"
  figure "long.${m}min.daemon_rss_growth_mib" "$growth" "-" "<64" "$(verdict "$growth < 64")"
  figure "long.${m}min.daemon_cpu_last_over_first" "$cpu_ratio" "-" "<=1.5" "$(verdict "$cpu_ratio <= 1.5")"
  figure "long.${m}min.end_delay_s" "$delay" "$perf_delay" "<2" "$(verdict "$delay < 2")"
  figure "long.${m}min.bytes_per_sample" "$bps" "$perf_bps" "info" info
  figure "long.${m}min.daemon_peak_rss_mib" "$(h peak_rss_mb)" "$perf_peak" "info" info
  figure "long.${m}min.report_s" "$report_s" "$perf_report_s" "info" info
  figure "long.${m}min.report_peak_mib" "$((report_kb / 1024))" "$perf_report_mb" "info" info
  rm -rf "$run/s"
done
