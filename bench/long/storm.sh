#!/usr/bin/env bash
# The workload of issue 42: short processes started without pause, as a build server or a CI
# runner starts them all day, beside one thread that spins. Each loop starts ten /bin/true and one
# short python3 with four threads.
#   storm.sh SECONDS [TIMES_FILE]
# TIMES_FILE gets the wall clock (seconds since the epoch) at the start and at the end, and the
# loops run, so the caller can tell its own overhead from the workload's time.
set -u
seconds=${1:?usage: storm.sh SECONDS [TIMES_FILE]}
times=${2:-/dev/null}
start=$(date +%s.%N)
end=$(( ${start%.*} + seconds ))
( while [ "$(date +%s)" -lt "$end" ]; do :; done ) &
spin=$!
loops=0
while [ "$(date +%s)" -lt "$end" ]; do
  for _ in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done
  python3 -c 'import threading; t=[threading.Thread(target=sum, args=(range(20000),)) for _ in range(4)]; [x.start() for x in t]; [x.join() for x in t]'
  loops=$((loops + 1))
done
wait "$spin"
echo "$start $(date +%s.%N) $loops" >"$times"
