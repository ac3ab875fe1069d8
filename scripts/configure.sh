#!/usr/bin/env bash
# Configures one of the project's build directories as its scripts and CI build them, and prints
# the directory. One place for each build's compiler, type and options:
#   scripts/configure.sh normal    build/          GCC, RelWithDebInfo at -O3 with line tables only
#                                                  (-O3 -g1): the tested build
#   scripts/configure.sh asan      build-asan/     clang, ASan+UBSan (-O1 -g1, asserts on), with the libFuzzer
#                                                  targets: tested again, and fuzzed
#   scripts/configure.sh tsan      build-tsan/     GCC, ThreadSanitizer
#   scripts/configure.sh release   build-release/  GCC, Release (-O3), as users build
#   scripts/configure.sh debug     build-debug/    clang, Debug (-O0 -g, asserts on)
# Warnings are errors in all of them (HVPROF_WERROR), never in a user's own cmake.
set -euo pipefail
cd "$(dirname "$0")/.."

compiler=gcc
case "${1:-}" in
  # -g1: full DWARF (-g) took 40% of a file's compile time (store/src/session.cpp: 20 s against
  # 12 s), and no test reads more than line tables of hvprof's own code (the fixtures that are
  # symbolized set their own -g). The code is the same: -g never changes what GCC generates.
  # For a debugger's view of locals, use the debug build.
  # -O3: the code a Release build (-O3 -DNDEBUG) generates, so the tested programs are a Release's
  # and GCC's -O3 warnings are errors here; it cost 3% of a file's compile time over -O2, and
  # spares CI a third build of the programs.
  normal) dir=build
          args=("-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O3 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O3 -g1 -DNDEBUG") ;;
  asan) dir=build-asan; compiler=clang
        args=(-DHVPROF_SANITIZE=address,undefined -DHVPROF_BUILD_FUZZERS=ON -DHVPROF_BUILD_BENCH=OFF) ;;
  tsan) dir=build-tsan; args=(-DHVPROF_SANITIZE=thread -DHVPROF_BUILD_BENCH=OFF) ;;
  release) dir=build-release; args=(-DCMAKE_BUILD_TYPE=Release) ;;
  debug) dir=build-debug; compiler=clang; args=(-DCMAKE_BUILD_TYPE=Debug) ;;
  *) echo "usage: scripts/configure.sh normal|asan|tsan|release|debug" >&2; exit 2 ;;
esac
# GCC is the system's c++ (as a user's cmake finds it); clang is asked for by name.
uses_clang=0
if [ -f "$dir/CMakeCache.txt" ] && grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$dir/CMakeCache.txt"; then
  uses_clang=1
fi
if [ "$compiler" = clang ]; then
  export CC=clang CXX=clang++
  [ -f "$dir/CMakeCache.txt" ] && [ "$uses_clang" = 0 ] && rm -rf "$dir"  # CMake keeps the first compiler
else
  unset CC CXX
  [ "$uses_clang" = 1 ] && rm -rf "$dir"
fi
cmake -S . -B "$dir" -G Ninja -DHVPROF_WERROR=ON "${args[@]}" >/dev/null
echo "$dir"
