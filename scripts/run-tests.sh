#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest.
#   scripts/run-tests.sh            normal build (GCC, RelWithDebInfo) in build/
#   scripts/run-tests.sh --asan     ASan+UBSan build (clang, with the fuzzers) in build-asan/
#   scripts/run-tests.sh --tsan     TSan build in build-tsan/
# (scripts/configure.sh says how each is configured.)
# Extra arguments after -- go to ctest (e.g. -- -R engine); without them, the run is checked
# for completeness (every Catch case started) and its skips are listed with their causes.
set -euo pipefail
cd "$(dirname "$0")/.."

config=normal
case "${1:-}" in
  --asan) config=asan; shift ;;
  --tsan) config=tsan; shift ;;
esac
[ "${1:-}" = "--" ] && shift

scripts/install-deps.sh
build_dir=$(scripts/configure.sh "$config")
ninja -C "$build_dir"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Every Catch case has one CTest entry; after a full run, every case started (and the skips are
# listed with their causes): scripts/check-test-count.py.
rm -f "$build_dir/Testing/hvprof-cases.log"
status=0
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" "$@" || status=$?
if [ $# -eq 0 ]; then
  python3 scripts/check-test-count.py "$build_dir" --ran || status=1
else
  python3 scripts/check-test-count.py "$build_dir" || status=1
fi
exit "$status"
