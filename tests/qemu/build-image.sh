#!/usr/bin/env bash
# Builds what tests/qemu boots: Debian's Xen 4.17 with a PV dom0 whose initramfs holds busybox,
# the Xen device modules, hvprof's programs and their shared libraries.
#
#   tests/qemu/build-image.sh CACHE_DIR BIN_DIR
#     CACHE_DIR  e.g. build/qemu; BIN_DIR  hvprof's programs, e.g. build/bin
#
# Writes into CACHE_DIR:
#   xen          the hypervisor, gunzipped from /boot/xen-4.17-amd64.gz (QEMU's -kernel)
#   vmlinux      dom0's kernel, the ELF decompressed from linux-image-6.1.*-amd64's vmlinuz
#                (Xen loads it as it is; decompressing the bzImage costs Xen ~4 s under TCG)
#   initrd.img   dom0's initramfs: three concatenated cpio archives, system.cpio.gz (busybox,
#                modules, Xen's tools, /init = dom0-init.sh, guest.sh), hvprof.cpio (the
#                programs and libraries) and boot.cpio (/boot/vmlinuz, the kernel guests boot);
#                the tests append a fourth, with their commands (see dom0-init.sh)
#   image.info   the versions it was built from
# What comes from packages is cached, keyed by the packages' versions; a rebuild after a change
# of hvprof redoes only hvprof.cpio. The kernel package is fetched with `apt-get download`
# (network, apt lists) unless HVPROF_QEMU_KERNEL_DEB names a local .deb.
# Exit status: 0 built; 77 something is missing (the message names the package); 1 failed.
#
# By hand: build hvprof (ninja -C build), then
#   ctest --test-dir build -R qemu_xen_dom0_lifecycle --output-on-failure     # one case
#   tests/qemu/build-image.sh build/qemu build/bin                  # or just the image, then:
#   qemu-system-x86_64 -accel tcg -cpu qemu64 -smp 2 -m 2048 -nographic -nodefaults \
#     -serial stdio -no-reboot -monitor none -kernel build/qemu/xen \
#     -append "console=com1 com1=115200,8n1 dom0_mem=1024M,max:1024M" \
#     -initrd "build/qemu/vmlinux console=hvc0 earlyprintk=xen panic=-1,build/qemu/initrd.img"
# gives a root shell in dom0 (without a test archive, /init starts one), with xenstored running
# and hvprof in /usr/local/bin. `poweroff -f` ends QEMU, and so does Ctrl-a x. -cpu qemu64:
# Xen's xenoprof says x86-64/hammer, which hvprof knows; core2duo gives i386/core_2.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 CACHE_DIR BIN_DIR" >&2
  exit 1
fi
cache=$(realpath -m "$1")
bin_dir=$(realpath -m "$2")
here=$(dirname "$(realpath "$0")")
programs=(hvprof hvprofd hvprof-report)
xen_package=xen-hypervisor-4.17-amd64
xen_gz=/boot/xen-4.17-amd64.gz
xen_modules=(xen-privcmd xen-evtchn xenfs xen-gntdev xen-gntalloc)
# Xen's tools, where Debian puts them: /init starts xenstored and xen-init-dom0 as xencommons
# does (without xenstored, libxenstore's reads block forever on /dev/xen/xenbus); xl and the
# xenstore-* commands, and xenconsoled (the guests' consoles, logged), are there for tests of guests.
xen_utils_package=xen-utils-4.17
xen_tools=(/usr/lib/xen-4.17/bin/xenstored /usr/lib/xen-4.17/bin/xen-init-dom0 /usr/lib/xen-4.17/bin/xl
           /usr/lib/xen-4.17/bin/xenconsoled /usr/bin/xenstore)

missing() {
  echo "build-image: $*" >&2
  exit 77
}
fail() {
  echo "build-image: $*" >&2
  exit 1
}
package_version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# What the image is made of: each missing piece names its package.
command -v dpkg-query >/dev/null || missing "dpkg-query not found: the image is built from Debian packages"
[ -r "$xen_gz" ] || missing "$xen_gz not found: install $xen_package (apt-get install $xen_package)"
if ! installed busybox-static || [ ! -x /bin/busybox ]; then
  missing "no static busybox: install busybox-static (apt-get install busybox-static)"
fi
for tool in "${xen_tools[@]}"; do
  [ -x "$tool" ] || missing "$tool not found: install $xen_utils_package (apt-get install $xen_utils_package)"
done
command -v cpio >/dev/null || missing "cpio not found: install cpio (apt-get install cpio)"
command -v xz >/dev/null || missing "xz not found: install xz-utils"
for tool in gzip dpkg-deb tar strip ldd flock sha256sum; do
  command -v "$tool" >/dev/null || missing "$tool not found (install-deps.sh installs what the image needs)"
done
for program in "${programs[@]}"; do
  [ -x "$bin_dir/$program" ] || fail "$bin_dir/$program not found: build hvprof first (ninja -C $(dirname "$bin_dir"))"
done

mkdir -p "$cache"
# One builder at a time (ctest -j runs tests in parallel).
exec 9>"$cache/.lock"
flock 9

script_key=$(cat "$0" "$here/dom0-init.sh" "$here/guest.sh" | sha256sum | cut -c1-16)
stamp_ok() { [ -e "$1" ] && [ -e "$1.key" ] && [ "$(cat "$1.key")" = "$2" ]; }
set_stamp() { printf '%s\n' "$2" >"$1.key"; }

# --- Xen --------------------------------------------------------------------------------------
xen_key="$xen_package $(package_version $xen_package) $(stat -c '%s %Y' "$xen_gz")"
if ! stamp_ok "$cache/xen" "$xen_key"; then
  gzip -dc "$xen_gz" >"$cache/xen.tmp"
  mv "$cache/xen.tmp" "$cache/xen"
  set_stamp "$cache/xen" "$xen_key"
fi

# --- dom0's kernel and modules ----------------------------------------------------------------
# The version linux-image-amd64 depends on (linux-image-6.1.0-N-amd64 on Debian 12), or the deb
# given; extracted once per version into kernel-VERSION/.
extract_kernel() {  # DEB DIR
  local deb=$1 dir=$2 tmp="$2.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp/x"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards '*/boot/vmlinuz-*' '*/modules/*/kernel/drivers/xen/*' ||
    fail "$deb: cannot extract boot/vmlinuz-* and the Xen modules"
  local vmlinuz
  vmlinuz=$(find "$tmp/x" -path '*/boot/vmlinuz-*' -type f | head -n 1)
  [ -n "$vmlinuz" ] || fail "$deb has no boot/vmlinuz-*"
  mkdir -p "$tmp/modules"
  local module file
  for module in "${xen_modules[@]}"; do
    file=$(find "$tmp/x" -path '*/drivers/xen/*' -name "$module.ko*" | head -n 1)
    [ -n "$file" ] || fail "$deb has no drivers/xen/.../$module.ko"
    case "$file" in  # busybox insmod reads plain modules only
      *.ko) cp "$file" "$tmp/modules/$module.ko" ;;
      *.ko.xz) xz -dc "$file" >"$tmp/modules/$module.ko" ;;
      *.ko.gz) gzip -dc "$file" >"$tmp/modules/$module.ko" ;;
      *.ko.zst) zstd -qdc "$file" >"$tmp/modules/$module.ko" || fail "$file: install zstd to decompress it" ;;
      *) fail "$file: unknown module compression" ;;
    esac
  done
  # The bzImage's payload (boot protocol 2.08+: offset at 0x248, length at 0x24c, after the
  # setup sectors) is the compressed vmlinux.
  local sectors offset length start
  sectors=$(od -An -tu1 -j$((0x1f1)) -N1 "$vmlinuz" | tr -d ' ')
  offset=$(od -An -tu4 -j$((0x248)) -N4 "$vmlinuz" | tr -d ' ')
  length=$(od -An -tu4 -j$((0x24c)) -N4 "$vmlinuz" | tr -d ' ')
  [ "$sectors" -eq 0 ] && sectors=4
  start=$(((sectors + 1) * 512 + offset))
  local magic
  magic=$(od -An -tx1 -j"$start" -N4 "$vmlinuz" | tr -d ' ')
  local decompress=()
  case "$magic" in
    fd377a58) decompress=(xz -dc --single-stream) ;;
    1f8b*) decompress=(gzip -dc) ;;
    28b52ffd) decompress=(zstd -qdc) ;;
  esac
  dd if="$vmlinuz" of="$tmp/payload" iflag=skip_bytes,count_bytes skip="$start" count="$length" status=none
  if [ ${#decompress[@]} -gt 0 ] && "${decompress[@]}" <"$tmp/payload" >"$tmp/vmlinux" 2>/dev/null &&
    [ "$(od -An -tx1 -N4 "$tmp/vmlinux" | tr -d ' ')" = 7f454c46 ]; then
    rm "$tmp/payload"
  else
    echo "build-image: could not decompress $(basename "$vmlinuz") (payload magic $magic); Xen boots the bzImage, slower" >&2
    cp "$vmlinuz" "$tmp/vmlinux"
  fi
  cp "$vmlinuz" "$tmp/vmlinuz"  # guests boot it (libxenguest decompresses it in dom0)
  basename "$vmlinuz" | sed 's/^vmlinuz-//' >"$tmp/release"
  rm -rf "$tmp/x" "$dir"
  mv "$tmp" "$dir"
}

# An extracted kernel of KEY in DIR, with what every later step takes from it (directories
# extracted before guests booted the bzImage have no vmlinuz).
kernel_ready() { stamp_ok "$1" "$2" && [ -e "$1/vmlinuz" ]; }

if [ -n "${HVPROF_QEMU_KERNEL_DEB:-}" ]; then
  [ -r "$HVPROF_QEMU_KERNEL_DEB" ] || missing "HVPROF_QEMU_KERNEL_DEB=$HVPROF_QEMU_KERNEL_DEB: no such file"
  kernel_key="$(dpkg-deb -f "$HVPROF_QEMU_KERNEL_DEB" Package Version | tr '\n' ' ')"
  kernel_dir="$cache/kernel-$(echo "$kernel_key" | tr -c 'A-Za-z0-9.+~-' '_')"
  kernel_ready "$kernel_dir" "$kernel_key" || { extract_kernel "$HVPROF_QEMU_KERNEL_DEB" "$kernel_dir" && set_stamp "$kernel_dir" "$kernel_key"; }
else
  # Asking apt takes a second or two; its answer changes only with its lists.
  lists_key=$(find /var/lib/apt/lists -maxdepth 1 -printf '%f %s %T@\n' 2>/dev/null | sort | sha256sum | cut -c1-16)
  if stamp_ok "$cache/kernel-package" "$lists_key"; then
    read -r kernel_package kernel_version <"$cache/kernel-package"
  else
    kernel_package=$(apt-cache depends linux-image-amd64 2>/dev/null |
      sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n 1 || true)
    kernel_version=""
    [ -n "$kernel_package" ] &&
      kernel_version=$(apt-cache policy "$kernel_package" 2>/dev/null | sed -n 's/^ *Candidate: //p' | head -n 1)
    if [ -n "$kernel_package" ] && [ -n "$kernel_version" ] && [ "$kernel_version" != "(none)" ]; then
      echo "$kernel_package $kernel_version" >"$cache/kernel-package"
      set_stamp "$cache/kernel-package" "$lists_key"
    fi
  fi
  if [ -z "$kernel_package" ] || [ -z "$kernel_version" ] || [ "$kernel_version" = "(none)" ]; then
    # No apt lists (offline): the newest kernel already extracted will do.
    kernel_dir=$(find "$cache" -maxdepth 1 -name 'kernel-*' ! -name '*.tmp' -type d 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$kernel_dir" ] || [ ! -e "$kernel_dir.key" ]; then
      missing "apt knows no linux-image-amd64 (dom0's kernel comes from linux-image-6.1.*-amd64): run apt-get update, or set HVPROF_QEMU_KERNEL_DEB to the package's .deb"
    fi
    kernel_key=$(cat "$kernel_dir.key")
    kernel_ready "$kernel_dir" "$kernel_key" ||
      missing "$kernel_dir predates guests (no vmlinuz) and apt knows no kernel to extract again: run apt-get update"
  else
    kernel_key="$kernel_package $kernel_version"
    kernel_dir="$cache/kernel-$kernel_package-$kernel_version"
    if ! kernel_ready "$kernel_dir" "$kernel_key"; then
      deb="/var/cache/apt/archives/${kernel_package}_${kernel_version}_amd64.deb"
      if [ ! -r "$deb" ]; then
        mkdir -p "$cache/download"
        rm -f "$cache/download/"*.deb
        (cd "$cache/download" && apt-get download -q "$kernel_package=$kernel_version" >download.log 2>&1) ||
          missing "apt-get download $kernel_package=$kernel_version failed (dom0's kernel; needs the network): $(tail -n 3 "$cache/download/download.log" | tr '\n' ' ')"
        deb=$(ls "$cache/download/"*.deb)
      fi
      extract_kernel "$deb" "$kernel_dir"
      set_stamp "$kernel_dir" "$kernel_key"
      rm -rf "$cache/download"
    fi
  fi
fi

# --- system.cpio.gz: busybox, the modules, /init ------------------------------------------------
pad4() {  # pads a file with zeros to a multiple of 4 bytes: the kernel looks for the next
  # archive of a concatenated initramfs at a 4-byte boundary
  local size
  size=$(stat -c %s "$1")
  if [ $((size % 4)) -ne 0 ]; then head -c $((4 - size % 4)) /dev/zero >>"$1"; fi
}
make_cpio() {  # DIR OUT [gzip]
  (cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$2.tmp"
  [ "${3:-}" = gzip ] && { gzip -1 -n -c "$2.tmp" >"$2.tmp.gz" && mv "$2.tmp.gz" "$2.tmp"; }
  pad4 "$2.tmp"
  mv "$2.tmp" "$2"
}

libraries() {  # the shared objects PROGRAMS need, as ldd resolves them, and the loader
  ldd "$@" 2>/dev/null | sed -n -e 's/^.* => \(\/[^ ]*\) (0x.*$/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (0x.*$/\1/p' | sort -u
}
copy_libraries() {  # ROOT PROGRAMS...: their libraries, at the paths ldd gives
  local root=$1 lib
  shift
  local libs
  mapfile -t libs < <(libraries "$@")
  [ ${#libs[@]} -gt 0 ] || fail "ldd found no libraries for $*"
  for lib in "${libs[@]}"; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

system_key="$script_key busybox-static $(package_version busybox-static) $kernel_key $xen_utils_package $(package_version $xen_utils_package)"
if ! stamp_ok "$cache/system.cpio.gz" "$system_key"; then
  root="$cache/system.root"
  rm -rf "$root"
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,root,etc,var/lib,var/log,lib/modules/xen}
  cp /bin/busybox "$root/bin/busybox"
  for applet in $(/bin/busybox --list-full); do
    [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
  done
  cp "$kernel_dir/modules/"*.ko "$root/lib/modules/xen/"
  for tool in "${xen_tools[@]}"; do
    mkdir -p "$root$(dirname "$tool")"
    cp -L "$tool" "$root$tool"
  done
  copy_libraries "$root" "${xen_tools[@]}"
  ln -s /usr/lib/xen-4.17/bin/xl "$root/usr/sbin/xl"
  ln -s /usr/lib/xen-4.17/bin/xenstored "$root/usr/sbin/xenstored"
  for command in read write ls list exists rm chmod watch; do
    ln -s xenstore "$root/usr/bin/xenstore-$command"
  done
  mkdir -p "$root/var/lib/xen" "$root/var/log/xen" "$root/etc/xen"
  ln -s /run "$root/var/run"
  install -m 0755 "$here/dom0-init.sh" "$root/init"
  install -D -m 0755 "$here/guest.sh" "$root/usr/local/bin/guest.sh"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  make_cpio "$root" "$cache/system.cpio.gz" gzip
  rm -rf "$root"
  set_stamp "$cache/system.cpio.gz" "$system_key"
fi

# --- hvprof.cpio: the programs, stripped of debug info, and their libraries -----------------------
# Kept uncompressed: building it stays fast, and the kernel does not have to inflate it under
# TCG.
paths=()
for program in "${programs[@]}"; do paths+=("$bin_dir/$program"); done
mapfile -t libs < <(libraries "${paths[@]}")
[ ${#libs[@]} -gt 0 ] || fail "ldd found no libraries for ${programs[*]}"
hvprof_key="$script_key $(stat -c '%n %s %Y' "${paths[@]}" | tr '\n' ' ') $(stat -L -c '%n %s %Y' "${libs[@]}" | sha256sum | cut -c1-16)"
if ! stamp_ok "$cache/hvprof.cpio" "$hvprof_key"; then
  root="$cache/hvprof.root"
  rm -rf "$root"
  mkdir -p "$root/usr/local/bin"
  for program in "${programs[@]}"; do
    strip --strip-debug -o "$root/usr/local/bin/$program" "$bin_dir/$program"
  done
  copy_libraries "$root" "${paths[@]}"
  make_cpio "$root" "$cache/hvprof.cpio"
  rm -rf "$root"
  set_stamp "$cache/hvprof.cpio" "$hvprof_key"
fi

# --- boot.cpio: the kernel guests boot, as /boot/vmlinuz ------------------------------------------
# Uncompressed: the bzImage is compressed already.
if ! stamp_ok "$cache/boot.cpio" "$kernel_key"; then
  root="$cache/boot.root"
  rm -rf "$root"
  mkdir -p "$root/boot"
  cp "$kernel_dir/vmlinuz" "$root/boot/vmlinuz"
  make_cpio "$root" "$cache/boot.cpio"
  rm -rf "$root"
  set_stamp "$cache/boot.cpio" "$kernel_key"
fi

# --- initrd.img and image.info --------------------------------------------------------------------
if ! stamp_ok "$cache/initrd.img" "$system_key $hvprof_key $kernel_key"; then
  cat "$cache/system.cpio.gz" "$cache/hvprof.cpio" "$cache/boot.cpio" >"$cache/initrd.img.tmp"
  mv "$cache/initrd.img.tmp" "$cache/initrd.img"
  set_stamp "$cache/initrd.img" "$system_key $hvprof_key $kernel_key"
fi
if ! stamp_ok "$cache/vmlinux" "$kernel_key"; then
  ln -f "$kernel_dir/vmlinux" "$cache/vmlinux" 2>/dev/null || cp "$kernel_dir/vmlinux" "$cache/vmlinux"
  set_stamp "$cache/vmlinux" "$kernel_key"
fi
{
  echo "xen_package=$xen_package $(package_version $xen_package)"
  echo "kernel_package=$kernel_key"
  echo "kernel_release=$(cat "$kernel_dir/release")"
  echo "xen_utils=$xen_utils_package $(package_version $xen_utils_package)"
  echo "busybox=$(package_version busybox-static)"
} >"$cache/image.info.tmp"
mv "$cache/image.info.tmp" "$cache/image.info"
echo "build-image: $cache/{xen,vmlinux,initrd.img} ($(tr '\n' ' ' <"$cache/image.info"))"
