#!/usr/bin/env bash
# Builds hvprof as users build it, beyond the two tested builds (scripts/run-tests.sh: GCC
# RelWithDebInfo, and clang with the sanitizers), with warnings as errors, and runs each one's
# demo for a moment:
#   release  GCC, -O3 (GCC warns differently at -O3)
#   debug    clang, -O0, without NDEBUG
# Each builds the programs and every library they link; the tests and benchmarks are compiled
# by the two tested builds. CI builds neither (.ci/run says why): the normal build compiles at
# -O3, as release does.
#   scripts/build-types.sh [release] [debug]      (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(release debug)
scripts/install-deps.sh >/dev/null
for config in "${configs[@]}"; do
  start=$(date +%s)
  dir=$(scripts/configure.sh "$config")
  targets=(hvprof hvprofd hvprof-hv hvprof-report hvprof-symbolize)
  ninja -C "$dir" "${targets[@]}" >"$dir/build.log" 2>&1 || { tail -n 60 "$dir/build.log" >&2; echo "build-types: $config failed to build" >&2; exit 1; }
  # It builds; its programs also start and profile.
  work=$(mktemp -d)
  if ! "$dir/bin/hvprof" run --platform=sim --session-dir="$work" --duration=100ms >"$work/run.log" 2>&1; then
    cat "$work/run.log" >&2
    rm -rf "$work"
    echo "build-types: the $config build's hvprof run failed" >&2
    exit 1
  fi
  rm -rf "$work"
  echo "build-types: $config ($dir) built and ran in $(( $(date +%s) - start ))s"
done
