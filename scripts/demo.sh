#!/usr/bin/env bash
# One command from a fresh Debian 12 checkout to a profile: installs the packages, builds, and
# profiles the simulated host of examples/default.json with `hvprof run --platform=sim` (which
# starts and ends its own hvprof-hv), printing the report by symbol and then by domain.
#   scripts/demo.sh [SCENARIO] [DURATION]      (defaults: examples/default.json 2s)
# The session is kept in build/demo/ for hvprof-report.
set -euo pipefail
cd "$(dirname "$0")/.."

scenario=${1:-examples/default.json}
duration=${2:-2s}
work=$PWD/build/demo

scripts/install-deps.sh
ninja -C "$(scripts/configure.sh normal)" hvprof hvprof-hv hvprofd hvprof-report

rm -rf "$work"
mkdir -p "$work"
bin=$PWD/build/bin
"$bin/hvprof" run --platform=sim --scenario="$scenario" --session-dir="$work/sessions" \
  --duration="$duration" --json="$work/summary.json"

session=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["session"])' "$work/summary.json")
echo
echo "== The same session by image and domain: hvprof-report $session --by-domain -t 2 =="
"$bin/hvprof-report" "$session" --by-domain -t 2 --no-header
echo
echo "More: build/bin/hvprof-report $session -l --domain=dom0 --mode=kernel"
