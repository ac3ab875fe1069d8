#!/usr/bin/env bash
# The linux platform against perf, in one run, on the same workloads at the same rates (issue 8):
#   workloads: the hot-function fixture (a fixed number of rounds) and `xz -9 -T1` on a
#              generated file;
#   rates:     1 kHz, 10 kHz and the highest the kernel allows (kernel.perf_event_max_sample_rate);
#   tools:     `hvprof run --platform=linux -e CPU_CLOCK:NS` with NS = 1e9 / RATE (the cpu-clock
#              timer's period), and `perf record -a -F RATE -e cpu-clock`.
# For each it prints the workload's slowdown against unprofiled runs (its own wall time, not the
# tool's start-up), the samples taken and the wall time each added, and the top 10 symbols of
# perf with both tools' shares (of the samples outside the idle loop).
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

# xz inputs: word-like text, compressible but not trivially (about 0.85 s of xz -9 per MB).
python3 - "$work" <<'PY'
import random, sys
random.seed(8)
words = ["".join(random.choice("etaoinshrdlucmfwyp") for _ in range(random.randint(2, 9))) for _ in range(5000)]
text = []
size = 0
while size < 12 << 20:
    line = " ".join(random.choice(words) for _ in range(4000)) + "\n"
    text.append(line)
    size += len(line)
data = "".join(text).encode()
for mb in (1, 3, 12):
    open(f"{sys.argv[1]}/input{mb}", "wb").write(data[:mb << 20])
PY

# Work per rate (1 kHz, 10 kHz, max): about 10 s, 2 s and 0.4 s unprofiled, so that each
# rate takes ten thousand samples or more and the top rate (which slows work down ~20x in a
# VM) stays short.
max_rate=$(sysctl -n kernel.perf_event_max_sample_rate)
python3 bench/linux/compare.py --work="$work" --repeats="$repeats" \
  --rates="1000,10000,$max_rate" --bin=build/bin \
  --workload="hotspots|25000,5000,1000|build/tests/fixtures/linux_hotspots --rounds {}" \
  --workload="xz|12,3,1|xz -9 -T1 -c $work/input{}"
