#!/usr/bin/env bash
# What the build-id cache costs per session (issue 41, item 3): `hvprof run --platform=linux` of
# a workload that runs code in a dozen shared libraries (python3 importing ssl, sqlite3, decimal,
# hashlib and zlib, then xz), with the cache and with --build-id-cache=none; and perf record of
# the same workload with its build-id cache (~/.debug of a fresh HOME: perf 6.1 does not read
# PERF_BUILDID_DIR) and with -N -B (no cache, no build-ids read at the end).
# Each pair runs in turns, RUNS times (default 3); the median is taken.
#   sudo bench/buildid-cache/run.sh [RUNS]
# Measured, for each tool: the wall time the cache adds to a run whose images are not cached yet
# (the first session after a rebuild or an upgrade) and to one whose images are (every later
# session), and the bytes the cache holds after one session. Prints FIGURE lines
# (bench/run-all.sh), each hvprof beside perf; no goal: they say what the cache costs. perf's
# bytes and entries include its copy of kallsyms and the vdso, which hvprof does not cache.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
for tool in perf xz python3; do
  command -v "$tool" >/dev/null || { echo "build-id cache bench: needs $tool (scripts/install-deps.sh)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "build-id cache bench: run it as root (system-wide profiling)" >&2; exit 1; }
ninja -C build hvprof hvprofd hvprof-hv hvprof-report >/dev/null
bin=$PWD/build/bin
work=$(mktemp -d /tmp/hvprof-buildid-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

workload='for i in 1 2 3; do python3 -c "import ssl, sqlite3, decimal, hashlib, zlib
for _ in range(2000): hashlib.sha256(zlib.compress(bytes(20000))).digest()"; xz -6 -c /usr/bin/python3 >/dev/null; done'

py() { local code=$1; shift; python3 -c "import sys, statistics; $code" "$@"; }
now() { date +%s.%N; }
median() { py "print(f'{statistics.median(float(x) for x in sys.argv[1:]):.3f}')" "$@"; }
figure() {  # name hvprof peer: one FIGURE line, no goal
  local ratio="-"
  if py "sys.exit(0 if float('$3') > 0 else 1)"; then ratio=$(py "print(f'{float(\"$2\") / float(\"$3\"):.3g}')"); fi
  printf 'FIGURE\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$ratio" "-" "info"
}
timed() {  # prints the wall seconds of "$@"
  local start; start=$(now)
  "$@" >/dev/null 2>>"$work/log" || { echo "build-id cache bench: failed: $*" >&2; tail -5 "$work/log" >&2; exit 1; }
  py "print(f'{$(now) - $start:.3f}')"
}
hvprof_run() {  # CACHE: one hvprof run of the workload into a session directory of its own
  rm -rf "$work/sessions"
  "$bin/hvprof" run --platform=linux --session-dir="$work/sessions" --run-dir="$work/run" \
    --build-id-cache="$1" -- sh -c "$workload"
}
perf_run() {  # HOME|none: the cache is HOME/.debug
  if [ "$1" = none ]; then
    perf record -N -B -a -F 4000 -o "$work/perf.data" -- sh -c "$workload"
  else
    mkdir -p "$1"
    HOME="$1" perf record -a -F 4000 -o "$work/perf.data" -- sh -c "$workload"
  fi
}

declare -A t
for ((r = 0; r < runs; ++r)); do
  # Cold: a fresh cache, as after a rebuild; warm: the same cache again.
  rm -rf "$work/hv-cache" "$work/perf-home"
  t[hv_none]+=" $(timed hvprof_run none)"
  t[hv_cold]+=" $(timed hvprof_run "$work/hv-cache")"
  t[hv_warm]+=" $(timed hvprof_run "$work/hv-cache")"
  t[perf_none]+=" $(timed perf_run none)"
  t[perf_cold]+=" $(timed perf_run "$work/perf-home")"
  t[perf_warm]+=" $(timed perf_run "$work/perf-home")"
done
hv_bytes=$(du -sb "$work/hv-cache" | cut -f1)
perf_bytes=$(du -sb "$work/perf-home/.debug" | cut -f1)
hv_images=$(find "$work/hv-cache/.build-id" -type f ! -name '*.debug' | wc -l)
perf_images=$(find "$work/perf-home/.debug/.build-id" -mindepth 2 -maxdepth 2 | wc -l)
for key in hv_none hv_cold hv_warm perf_none perf_cold perf_warm; do
  # shellcheck disable=SC2086
  declare "m_$key=$(median ${t[$key]})"
done
cold_hv=$(py "print(f'{max(0.0, $m_hv_cold - $m_hv_none):.3f}')")
warm_hv=$(py "print(f'{max(0.0, $m_hv_warm - $m_hv_none):.3f}')")
cold_perf=$(py "print(f'{max(0.0, $m_perf_cold - $m_perf_none):.3f}')")
warm_perf=$(py "print(f'{max(0.0, $m_perf_warm - $m_perf_none):.3f}')")
echo "hvprof run: ${m_hv_none} s without a cache, ${m_hv_cold} s filling one, ${m_hv_warm} s with it filled" \
  "(median of $runs); ${hv_images} images, ${hv_bytes} bytes cached"
echo "perf record: ${m_perf_none} s with -N, ${m_perf_cold} s filling ~/.debug, ${m_perf_warm} s with it filled;" \
  "${perf_images} build-ids, ${perf_bytes} bytes cached"
figure "build-id cache: bytes kept after one session" "$hv_bytes" "$perf_bytes"
figure "build-id cache: images kept after one session" "$hv_images" "$perf_images"
figure "build-id cache: seconds added to a session, images new" "$cold_hv" "$cold_perf"
figure "build-id cache: seconds added to a session, images cached" "$warm_hv" "$warm_perf"
