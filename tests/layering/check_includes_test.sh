#!/usr/bin/env bash
# The layering check must fail on what it exists to catch: copies of the tree, each with one
# planted fault (an upward include, a component circle, a library folder missing from the
# table, user-space code in the engine's folder, a mode, the idle domain or the unknown pid
# spelt as a number), must each be refused with a message naming it.
set -u
source_dir=${1:?usage: check_includes_test.sh SOURCE_DIR}
# It copies the files git tracks; a source tree without git cannot be copied that way.
if ! git -C "$source_dir" rev-parse --git-dir >/dev/null 2>&1; then
  echo "skipped: $source_dir is not a git checkout"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fresh_copy() {
  rm -rf "$work/tree"
  mkdir -p "$work/tree"
  (cd "$source_dir" && git ls-files -z -- '*.h' '*.cpp' '*.c' '*CMakeLists.txt' 'scripts/*' |
     xargs -0 cp --parents -t "$work/tree")
}

expect_refusal() {  # NAME PATTERN
  local output
  output=$(cd "$work/tree" && bash scripts/check-layering.sh 2>&1)
  if [ $? -eq 0 ]; then
    echo "FAIL: $1: the check passed"; failures=$((failures + 1))
  elif ! grep -q -- "$2" <<<"$output"; then
    echo "FAIL: $1: refused without naming it (wanted '$2'):"; echo "$output"; failures=$((failures + 1))
  else
    echo "ok: $1"
  fi
}

fresh_copy
if ! (cd "$work/tree" && bash scripts/check-layering.sh >/dev/null); then
  echo "FAIL: the unchanged tree does not pass"; exit 1
fi

fresh_copy
sed -i '1i #include "hvprof/report/model.h"' "$work/tree/store/src/session.cpp"
expect_refusal "the store includes the report (upward)" 'store/src/session.cpp:1: includes "hvprof/report/model.h" of report/'

fresh_copy
sed -i '1i #include "hvprof/sim/machine.h"' "$work/tree/linux/src/perf_driver.cpp"
expect_refusal "one host includes another" 'of sim/, which linux/ may not use'

fresh_copy
sed -i '1i #include "hvprof/report/load.h"' "$work/tree/report/include/hvprof/report/model.h"
expect_refusal "a circle between the model and the loader" 'include circle between components'

fresh_copy
mkdir -p "$work/tree/newlib/src"
echo 'add_library(hvprof_newlib STATIC src/a.cpp)' >"$work/tree/newlib/CMakeLists.txt"
echo 'int a;' >"$work/tree/newlib/src/a.cpp"
expect_refusal "a library folder missing from the table" "newlib: a library folder not in"

fresh_copy
mkdir -p "$work/tree/hypervisor-pmu/hosted/src"
printf '#include <vector>\nstd::vector<int> v;\n' >"$work/tree/hypervisor-pmu/hosted/src/host.cpp"
expect_refusal "user-space code inside the engine's folder" 'hypervisor-pmu/hosted/src/host.cpp:1: includes <vector>'

fresh_copy
sed -i '$a bool IsHypervisorMode(unsigned mode) { return mode == 2; }' "$work/tree/report/src/model.cpp"
expect_refusal "a mode spelt as a number" 'report/src/model.cpp:.*a mode as a number'

fresh_copy
sed -i '$a inline constexpr unsigned kIdle = 0x7FFF;' "$work/tree/store/include/hvprof/store/session.h"
expect_refusal "the idle domain spelt as a number" 'store/include/hvprof/store/session.h:.*the idle domain'

fresh_copy
sed -i '$a inline constexpr unsigned kUnknown = 0xFFFFFFFF;' "$work/tree/linux/src/process_table.cpp"
expect_refusal "the unknown pid spelt as a number" 'linux/src/process_table.cpp:.*the unknown pid'

exit $((failures > 0))
