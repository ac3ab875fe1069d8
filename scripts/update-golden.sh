#!/usr/bin/env bash
# Regenerates the expected outputs of the report golden tests (tests/golden/) from the current
# build. Run it after a reviewed change to the reports, then read `git diff tests/golden`.
set -euo pipefail
cd "$(dirname "$0")/.."
ninja -C build hvprof hvprofd hvprof-hv hvprof-report
tests/golden/run_golden.sh build --update
