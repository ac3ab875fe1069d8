#!/usr/bin/env bash
# The engine's sample path (hypervisor-pmu/): what one sample costs from the PMI to its record
# in a ring, on the MSR-level fake platform (build/bin/sample_path_bench, Google Benchmark), in
# ns per sample, v2 and legacy rings. There is no outside peer: the figures are for comparing
# runs of this script before and after a change to the engine (issue 22: "nothing in the
# engine's sample path gets slower"); bench/README.md says how.
#   bench/engine.sh [MIN_TIME_SECONDS]      (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
ninja -C build sample_path_bench >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
build/bin/sample_path_bench --benchmark_filter='^(RingWrite|RecordSample(V2|Legacy))' --benchmark_min_time="${1:-1}" --benchmark_format=json >"$out"
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
for b in data["benchmarks"]:
    ns = b["cpu_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
    print(f"{b['name']:<24} {ns:8.1f} ns per sample")
    print("\t".join(["FIGURE", f"engine {b['name']}: CPU time per sample", f"{ns:.1f} ns", "-", "-",
                     "no slower than before", "info"]))
PY
