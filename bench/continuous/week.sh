#!/usr/bin/env bash
# A simulated week of continuous mode on the sim (issue 43), every window against the sim's ground
# truth, with both daemons' memory and the windows' disk against their budget each simulated day:
# continuous_week (bench/continuous_week.cpp) says how.
#   bench/continuous/week.sh [DAYS=7] [WINDOW=10m] [KEEP_SIZE=256M] [KEEP_AGE=2d]
set -euo pipefail
cd "$(dirname "$0")/../.."
ninja -C build continuous_week hvprof hvprofd hvprof-hv >/dev/null
exec build/bin/continuous_week "$@"
