#!/usr/bin/env bash
# Puts the System.map of Debian 12's current kernel into ~/.cache/hvprof/, for simulated guest
# kernels on machines where /proc/kallsyms is unreadable (kptr_restrict, or a container).
# Debian ships the real System.map only in the kernel's -dbg package (about 850 MB to
# download); nothing is installed, the package is only unpacked in a temporary directory.
set -euo pipefail

dest=${HVPROF_CACHE:-${HOME:-/root}/.cache/hvprof}
mkdir -p "$dest"
if ls /usr/lib/debug/boot/System.map-* >/dev/null 2>&1; then
  cp /usr/lib/debug/boot/System.map-* "$dest/"
  echo "fetch-kernel-map: copied from the installed -dbg package: $(ls "$dest"/System.map-* | tail -n 1)"
  exit 0
fi
image=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$image" ]; then
  echo "fetch-kernel-map: cannot find Debian's kernel package (is apt configured? run apt-get update)" >&2
  exit 1
fi
work=$(mktemp -d)
chmod 0755 "$work"
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "fetch-kernel-map: downloading ${image}-dbg (about 850 MB) for its System.map"
apt-get download -q "${image}-dbg" >/dev/null
dpkg-deb --fsys-tarfile ./*.deb | tar -x --wildcards './usr/lib/debug/boot/System.map-*'
cp usr/lib/debug/boot/System.map-* "$dest/"
echo "fetch-kernel-map: $(ls "$dest"/System.map-* | tail -n 1)"
