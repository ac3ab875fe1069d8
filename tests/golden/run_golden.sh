#!/usr/bin/env bash
# Golden diff tests of hvprof-report: profiles the fixed scenario in this directory on the
# simulated machine (deterministic at maximum speed), checks the session against the simulator's
# ground truth (check_truth.py), then runs every case of cases.txt and compares its output with
# expected/NAME.out.
#   run_golden.sh BUILD_DIR            compare (exit 1 on any difference)
#   run_golden.sh BUILD_DIR --update   rewrite the expected outputs
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run_golden.sh BUILD_DIR [--update]}" && pwd)
update=${2:-}
bin=$build/bin
work=$(mktemp -d /tmp/hvprof-golden-XXXXXX)
hv_pid=
cleanup() {
  "$bin/hvprof" --shutdown --session-dir="$work/sessions" >/dev/null 2>&1
  [ -n "$hv_pid" ] && kill "$hv_pid" 2>/dev/null && wait "$hv_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/hvprof-hv" --platform=sim --scenario="$here/scenario.json" --run-dir="$work/run" --speed=max \
  --ground-truth="$work/truth.json" 2>"$work/hv.log" &
hv_pid=$!
for _ in $(seq 200); do [ -S "$work/run/domain-0.sock" ] && break; sleep 0.05; done
if ! "$bin/hvprof" run --run-dir="$work/run" --session-dir="$work/sessions" \
     --passive-domains=pv-guest,hvm-guest --event=CPU_CLK_UNHALTED:20000 --event=INST_RETIRED:40000 \
     --duration=500ms >"$work/run.out" 2>&1; then
  echo "golden: profiling the scenario failed:"; cat "$work/run.out" "$work/hv.log"; exit 1
fi
session=$(ls -d "$work"/sessions/samples/run-* | head -n 1)
# hvprof-hv writes the ground truth as it ends. The session the outputs come from must agree with
# it before any output is compared: a regenerated expected/ that moved the counts fails here.
kill "$hv_pid" && wait "$hv_pid" 2>/dev/null
hv_pid=
if ! python3 "$here/check_truth.py" "$work/truth.json" "$session" "$bin/hvprof-report"; then
  echo "golden: the session disagrees with the simulator's ground truth"; exit 1
fi

failures=0
cases=0
while IFS='|' read -r name args; do
  name=$(echo "$name" | xargs)
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  cases=$((cases + 1))
  # shellcheck disable=SC2086
  "$bin/hvprof-report" "$session" $args >"$work/out" 2>"$work/err"
  status=$?
  { echo "exit status: $status"; cat "$work/out"; } |
    sed -e "s|$session|<SESSION>|g" -e 's|"id": "[0-9a-f]*"|"id": "<ID>"|' >"$work/actual"
  expected="$here/expected/$name.out"
  if [ "$update" = "--update" ]; then
    cp "$work/actual" "$expected"
  elif ! diff -u "$expected" "$work/actual" >"$work/diff"; then
    echo "golden: case '$name' ($args) differs:"; head -n 40 "$work/diff"; cat "$work/err"
    failures=$((failures + 1))
  fi
done <"$here/cases.txt"

if [ "$update" = "--update" ]; then
  echo "golden: wrote $cases expected outputs in $here/expected; review them with git diff"
  exit 0
fi
echo "golden: $((cases - failures)) of $cases cases match"
[ $failures -eq 0 ]
