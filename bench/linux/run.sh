#!/usr/bin/env bash
# The linux platform against perf, in one run, on the same workloads at the same rates (issue 8):
#   workloads: the hot-function fixture (a fixed number of rounds) and `xz -9 -T1` on a
#              generated file;
#   rates:     1 kHz, 10 kHz and the highest the kernel allows (kernel.perf_event_max_sample_rate);
#   tools:     `hvprof run --platform=linux -e CPU_CLOCK:NS` with NS = 1e9 / RATE (the cpu-clock
#              timer's period), and `perf record -a -F RATE -e cpu-clock`.
# For each it prints the workload's slowdown against unprofiled runs (its own wall time, not the
# tool's start-up), samples taken, and the top 10 symbols of perf with both tools' shares.
# Symbols perf and hvprof cannot name (stripped libraries) are pooled per image on both sides.
# Needs root (or kernel.perf_event_paranoid <= -1) and linux-perf.
#   bench/linux/run.sh [REPEATS]     (default 3 runs per configuration; medians are printed)
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=${1:-3}
command -v perf >/dev/null || { echo "linux bench: needs perf: apt-get install linux-perf" >&2; exit 1; }
ninja -C build hvprof hvprofd hvprof-hv hvprof-report linux_hotspots >/dev/null
work=$(mktemp -d /tmp/hvprof-linux-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# xz input: 24 MB of word-like text, compressible but not trivially.
python3 - "$work/input" <<'PY'
import random, sys
random.seed(8)
words = ["".join(random.choice("etaoinshrdlucmfwyp") for _ in range(random.randint(2, 9))) for _ in range(5000)]
with open(sys.argv[1], "w") as out:
    while out.tell() < 24 << 20:
        out.write(" ".join(random.choice(words) for _ in range(4000)) + "\n")
PY

max_rate=$(sysctl -n kernel.perf_event_max_sample_rate)
python3 bench/linux/compare.py --work="$work" --repeats="$repeats" \
  --rates="1000,10000,$max_rate" --bin=build/bin \
  --workload="hotspots=build/tests/fixtures/linux_hotspots --rounds 8000" \
  --workload="xz=xz -9 -T1 -c $work/input"
