#!/usr/bin/env bash
# One command from a fresh Debian 12 checkout to a profile: installs the packages, builds,
# starts the simulated host of examples/default.json, profiles it with `hvprof run` and
# prints the report by symbol and by domain.
#   scripts/demo.sh [SCENARIO] [DURATION]      (defaults: examples/default.json 2s)
# The session is kept in build/demo/ for hvprof-report.
set -euo pipefail
cd "$(dirname "$0")/.."

scenario=${1:-examples/default.json}
duration=${2:-2s}
work=$PWD/build/demo

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DHVPROF_WERROR=ON >/dev/null
ninja -C build hvprof hvprof-hv hvprofd hvprof-report

rm -rf "$work"
mkdir -p "$work/run" "$work/sessions"
bin=$PWD/build/bin

"$bin/hvprof-hv" --platform=sim --scenario="$scenario" --speed=max \
  --run-dir="$work/run" --ground-truth="$work/ground-truth.json" >"$work/hvprof-hv.log" 2>&1 &
hv_pid=$!
trap 'kill "$hv_pid" 2>/dev/null || true; wait "$hv_pid" 2>/dev/null || true' EXIT

for _ in $(seq 100); do
  [ -S "$work/run/domain-0.sock" ] && break
  kill -0 "$hv_pid" 2>/dev/null || { cat "$work/hvprof-hv.log" >&2; exit 1; }
  sleep 0.05
done

# Every guest of the scenario is profiled passively from dom0.
guests=$(python3 -c 'import json,sys
print(",".join(str(d["id"]) for d in json.load(open(sys.argv[1]))["domains"] if d["id"] != 0))' "$scenario")

common=(--session-dir="$work/sessions" --run-dir="$work/run")
"$bin/hvprof" run "${common[@]}" ${guests:+--passive-domains="$guests"} \
  --duration="$duration" --json="$work/summary.json"

session=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["session"])' "$work/summary.json")
echo
echo "== The same session by image and domain: hvprof-report $session --by-domain -t 2 =="
"$bin/hvprof-report" "$session" --by-domain -t 2 --no-header
echo
echo "More: build/bin/hvprof-report $session -l --domain=dom0 --mode=kernel"
