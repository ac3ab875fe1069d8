#!/usr/bin/env bash
# Symbolizer benchmark (issues 3 and 22): hvprof-symbolize vs eu-addr2line -f and
# llvm-symbolizer --functions, on xen-syms and on the largest DWARF image installed (Debian's
# vmlinux from linux-image-amd64-dbg), with 2e5 and 1e6 addresses, uniform and hot-skewed.
# Besides its prose it prints one FIGURE line per goal (see bench.py).
#
#   bench/symbolizer/run.sh              install what is missing, build, run everything
#   bench/symbolizer/run.sh --quick      2e5 addresses only
#   bench/symbolizer/run.sh --no-vmlinux skip the 5.6 GB kernel debug package and its image
#
# The program is the normal build's (scripts/configure.sh normal, build/); address files and
# results go to build/bench-symbolizer/ (results.json).
set -euo pipefail
cd "$(dirname "$0")/../.."

sizes=200000,1000000
with_vmlinux=1
for arg in "$@"; do
  case "$arg" in
    --quick) sizes=200000 ;;
    --no-vmlinux) with_vmlinux=0 ;;
    *) echo "usage: $0 [--quick] [--no-vmlinux]" >&2; exit 2 ;;
  esac
done

packages=(time llvm elfutils binutils python3 xen-hypervisor-4.17-amd64-dbg)
[ "$with_vmlinux" = 1 ] && packages+=(linux-image-amd64-dbg)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  echo "bench: installing ${missing[*]} (linux-image-amd64-dbg is an 858 MB download)"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
fi

build=$(scripts/configure.sh normal)
ninja -C "$build" -j"$(nproc)" hvprof-symbolize >/dev/null

images=(--image /usr/lib/debug/boot/xen-syms-4.17-amd64)
if [ "$with_vmlinux" = 1 ]; then
  vmlinux=$(ls -S /usr/lib/debug/boot/vmlinux-* 2>/dev/null | head -n 1 || true)
  if [ -z "$vmlinux" ]; then
    echo "bench: no /usr/lib/debug/boot/vmlinux-* (linux-image-amd64-dbg)" >&2
    exit 1
  fi
  images+=(--image "$vmlinux")
fi

exec python3 bench/symbolizer/bench.py --hvprof "$build/bin/hvprof-symbolize" \
  --workdir "$build/bench-symbolizer" --sizes "$sizes" "${images[@]}"
