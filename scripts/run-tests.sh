#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through CTest.
#   scripts/run-tests.sh            normal build in build/
#   scripts/run-tests.sh --asan     ASan+UBSan build in build-asan/
#   scripts/run-tests.sh --tsan     TSan build in build-tsan/
# Extra arguments after -- go to ctest (e.g. -- -R engine).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
cmake_args=(-DHVPROF_WERROR=ON)
case "${1:-}" in
  --asan) build_dir=build-asan; cmake_args+=(-DHVPROF_SANITIZE=address,undefined -DHVPROF_BUILD_BENCH=OFF); shift ;;
  --tsan) build_dir=build-tsan; cmake_args+=(-DHVPROF_SANITIZE=thread -DHVPROF_BUILD_BENCH=OFF); shift ;;
esac
[ "${1:-}" = "--" ] && shift

scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja "${cmake_args[@]}" >/dev/null
ninja -C "$build_dir"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" "$@"
