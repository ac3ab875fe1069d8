#!/usr/bin/env bash
# Installs the Debian 12 packages hvprof needs to build, test and benchmark.
# Idempotent: packages already present are skipped by apt. Needs root (or sudo).
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git python3
  clang llvm libclang-rt-14-dev
  # libraries
  libelf-dev libdw-dev elfutils
  libboost-program-options-dev
  catch2
  libxen-dev
  nlohmann-json3-dev libfmt-dev
  libprotobuf-dev protobuf-compiler
  zlib1g-dev
  libbenchmark-dev
  # real images and peers used by tests and benchmarks
  xen-hypervisor-4.17-amd64-dbg
  golang-go          # `go tool pprof` reads the pprof files in the tests
  chromium           # headless, network off, opens the HTML flame graph in the tests
  libpng-dev         # the browser tests read Chromium's screenshots of the pages
  libcurl4-openssl-dev  # --push sends profiles to Pyroscope
  libarchive-dev     # hvprof archive writes, and hvprof-report archive:FILE reads, tar archives
  libdebuginfod-dev  # images and debug info by build-id from debuginfod servers
  debuginfod         # the server the debuginfod tests run on loopback
  linux-perf         # the yardstick of the linux tests and benchmarks
  libc6-dbg binutils xz-utils
  systemtap-sdt-dev  # <sys/sdt.h>: the USDT probes of hvprofd and hvprof-hv (docs/probes.md)
  bpftrace           # the probes test attaches one and sees it fire (skipped without root)
  # packaging (cmake/HvprofInstall.cmake, scripts/test-package.sh): man pages made from --help,
  # the .deb's library dependencies (dpkg-shlibdeps), and what the package test checks with:
  # man and groff render the pages, bash-completion loads the completion, file sees stripping
  help2man dpkg-dev man-db groff-base bash-completion file
  # real Xen 4.17 under QEMU's software CPU (tests/qemu): the hypervisor, its tools for dom0
  # (xenstored, xl), the emulator, and busybox and cpio for dom0's initramfs. dom0's kernel is
  # fetched by tests/qemu/build-image.sh with `apt-get download`, never installed
  xen-hypervisor-4.17-amd64 xen-utils-4.17
  qemu-system-x86 busybox-static cpio
  # Xen with hvprof's engine (xen-engine/build-xen.sh builds Debian's 4.17 source, fetched with
  # `apt-get source`, with the patch series): Xen's build needs these beside build-essential
  flex bison patch
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
stamp=/var/lib/apt/periodic/update-success-stamp
if [ ! -e /var/lib/apt/lists/lock ] || [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e lock -e partial)" ]; then
  "${sudo_cmd[@]}" apt-get update -q
fi
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" || {
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}
