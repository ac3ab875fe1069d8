# Sourced by the report benchmarks: record_sim SCENARIO SAMPLES [SEED] records a sim session of
# about SAMPLES samples (every guest passive, one sample per 6000 cycles: a scenario of 8 busy
# CPUs at 3 GHz gives 4M samples per simulated second) as $work/s/samples/current. Needs $bin and
# $work; keeps the hvprof-hv it runs in $hv_pid while it runs, for the caller's cleanup.
record_sim() {
  local scenario=$1 samples=$2 seed=${3:-}
  "$bin/hvprof-hv" --platform=sim --scenario="$scenario" --speed=max ${seed:+--seed="$seed"} \
    --run-dir="$work/run" --log-level=warning &
  hv_pid=$!
  for _ in $(seq 200); do [ -S "$work/run/domain-0.sock" ] && break; sleep 0.05; done
  hv() { "$bin/hvprof" --session-dir="$work/s" --run-dir="$work/run" "$@" >/dev/null; }
  hv --start-daemon --passive-domains=1,2,3 -e CPU_CLK_UNHALTED:6000
  hv --start
  hv --run-sim="$(( samples / 4000 ))ms"
  hv --stop
  hv --shutdown
  kill "$hv_pid"; wait "$hv_pid" 2>/dev/null || true; hv_pid=
}
