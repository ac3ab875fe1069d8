#!/usr/bin/env bash
# Builds Xen with hvprof's engine inside (CONFIG_HVPROF): Debian 12's Xen 4.17 source, or an
# upstream tree, with the patch series of xen-engine/patches/, configured with its fragment.
#
#   xen-engine/build-xen.sh [--upstream DIR] [--jobs N] [WORKDIR]
#
#   WORKDIR         where sources and builds go (default: build/xen-hypervisor in this checkout)
#   --upstream DIR  an upstream Xen tree (a git checkout: its HEAD; else the directory as it is)
#                   with patches/upstream/, instead of Debian's 4.17 with patches/4.17/
#   --jobs N        make's -j (default: nproc)
#
# Debian's 4.17: when apt knows no source for xen, a deb-src line for bookworm main goes into
# /etc/apt/sources.list.d/hvprof-xen-src.sources (root only) and apt-get update runs; then
# `apt-get source xen` (about 5 MB) into WORKDIR/4.17/src, unpacked with Debian's own patches.
# The series applies to a copy (WORKDIR/4.17/tree); the build is out of tree (WORKDIR/4.17/build,
# make O=...), configured as Debian configures its hypervisor (debian/xen-kconfig) plus
# patches/4.17/hvprof.config, then `make olddefconfig`. An upstream tree is copied to
# WORKDIR/upstream/tree and configured from its defaults plus patches/upstream/hvprof.config.
# The engine and its host are compiled from this checkout (HVPROF_SRC), never copied into Xen.
#
# Idempotent: a second run reuses the source, the patched tree and the configuration when
# nothing they come from changed, and make rebuilds only what changed (hvprof's files included).
#
# Exit status: 0 built; 77 a required package, apt's source or the upstream tree is not there
# (the message names it); 1 anything else failed.
#
# Debian packages it needs (scripts/install-deps.sh): build-essential (gcc, g++, make), flex,
# bison, python3, patch, dpkg-dev (dpkg-source), xz-utils, gzip, and git for --upstream.
set -euo pipefail

here=$(dirname "$(realpath "$0")")
hvprof_src=$(realpath "$here/..")
upstream=""
jobs=$(nproc 2>/dev/null || echo 2)
workdir=""

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 1
}
missing() {
  echo "build-xen: $*" >&2
  exit 77
}
fail() {
  echo "build-xen: $*" >&2
  exit 1
}
say() { echo "build-xen: $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --upstream) [ $# -ge 2 ] || usage; upstream=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) [ -z "$workdir" ] || usage; workdir=$1; shift ;;
  esac
done
workdir=$(realpath -m "${workdir:-$hvprof_src/build/xen-hypervisor}")

# --- what the build needs ------------------------------------------------------------------
need() {  # COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 || missing "$1 not found: install $2 (apt-get install $2)"
}
need gcc build-essential
need g++ build-essential
need make build-essential
need flex flex
need bison bison
need python3 python3
need patch patch
need gzip gzip
if [ -n "$upstream" ]; then
  [ -d "$upstream/xen" ] && [ -f "$upstream/xen/Makefile" ] ||
    missing "--upstream $upstream: not a Xen tree (no xen/Makefile)"
  upstream=$(realpath "$upstream")
  series_dir=$here/patches/upstream
  flavour=upstream
else
  need apt-get apt
  need dpkg-source dpkg-dev
  need xz xz-utils
  series_dir=$here/patches/4.17
  flavour=4.17
fi
[ -f "$series_dir/series" ] || fail "$series_dir/series not found"
[ -f "$hvprof_src/hypervisor-pmu/src/engine.cpp" ] || fail "$hvprof_src is not an hvprof checkout"

base=$workdir/$flavour
mkdir -p "$base"
exec 9>"$base/.lock"
flock -n 9 || fail "another build-xen.sh is using $base"

stamp_ok() { [ -e "$1.stamp" ] && [ "$(cat "$1.stamp")" = "$2" ]; }
set_stamp() { printf '%s\n' "$2" >"$1.stamp"; }
series_key=$(cd "$series_dir" && cat series $(cat series) | sha256sum | cut -c1-16)

# --- the source ------------------------------------------------------------------------------
if [ -z "$upstream" ]; then
  src=$base/src
  mkdir -p "$src"
  pristine=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'xen-4.17*' | sort -V | tail -n 1)
  if [ -z "$pristine" ] || ! stamp_ok "$pristine" unpacked; then
    if ! apt-cache showsrc xen 2>/dev/null | grep -q '^Version: 4\.17'; then
      sources=/etc/apt/sources.list.d/hvprof-xen-src.sources
      if [ ! -e "$sources" ]; then
        [ "$(id -u)" -eq 0 ] ||
          missing "apt has no source for xen 4.17: add 'deb-src http://deb.debian.org/debian bookworm main' to apt's sources and run apt-get update (or run this as root)"
        say "adding $sources (deb-src, bookworm main) and running apt-get update"
        cat >"$sources" <<'EOF'
# Added by hvprof's xen-engine/build-xen.sh: Debian 12's source of Xen 4.17.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
      fi
      if [ "$(id -u)" -eq 0 ]; then
        apt-get update -q >"$base/apt-update.log" 2>&1 ||
          missing "apt-get update failed: $(tail -n 3 "$base/apt-update.log" | tr '\n' ' ')"
      fi
      apt-cache showsrc xen 2>/dev/null | grep -q '^Version: 4\.17' ||
        missing "apt knows no source of xen 4.17 (bookworm's deb-src): $(apt-cache showsrc xen 2>&1 | grep '^Version' | tr '\n' ' ')"
    fi
    rm -rf "$src.tmp"
    mkdir -p "$src.tmp"
    say "apt-get source xen (Debian 12's Xen 4.17)"
    (cd "$src.tmp" && apt-get source -q --download-only xen >"$base/apt-source.log" 2>&1) ||
      missing "apt-get source xen failed (no network, or the source is not reachable): $(grep -E '^(E|W):' "$base/apt-source.log" | head -n 3 | tr '\n' ' ')"
    dsc=$(ls "$src.tmp"/xen_4.17*.dsc 2>/dev/null | head -n 1)
    [ -n "$dsc" ] || missing "apt-get source xen gave no xen 4.17 source: $(ls "$src.tmp" | tr '\n' ' ')"
    version=$(basename "$dsc" .dsc | sed 's/^xen_//')
    (cd "$src.tmp" && dpkg-source -x "$(basename "$dsc")" "xen-$version" >"$base/dpkg-source.log" 2>&1) ||
      fail "dpkg-source -x $(basename "$dsc") failed: $(tail -n 3 "$base/dpkg-source.log" | tr '\n' ' ')"
    rm -rf "$src"
    mv "$src.tmp" "$src"
    pristine=$src/xen-$version
    set_stamp "$pristine" unpacked
  fi
  origin=$(basename "$pristine")
  origin_key=$origin
  copy_source() { cp -a "$pristine" "$1"; rm -f "$1.stamp"; }
  base_config=$pristine/debian/xen-kconfig
else
  if git -C "$upstream" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    need git git
    head=$(git -C "$upstream" rev-parse HEAD)
    origin="upstream $(git -C "$upstream" describe --always --tags HEAD 2>/dev/null || echo "$head")"
    origin_key=$head
    git -C "$upstream" diff --quiet HEAD -- 2>/dev/null ||
      say "$upstream has changes not committed: building its HEAD ($head) without them"
    copy_source() { mkdir -p "$1" && git -C "$upstream" archive HEAD | tar -x -C "$1"; }
  else
    origin="upstream $upstream"
    origin_key=$(find "$upstream" -path "$upstream/.git" -prune -o -type f -printf '%T@ %s %p\n' | sort | sha256sum | cut -c1-16)
    copy_source() { cp -a "$upstream" "$1"; rm -rf "$1/.git"; }
  fi
  base_config=""
fi

# --- the patched tree ------------------------------------------------------------------------
tree=$base/tree
tree_key="$origin_key $series_key"
if ! stamp_ok "$tree" "$tree_key"; then
  say "applying $(wc -l <"$series_dir/series") patches of $series_dir to $origin"
  rm -rf "$tree.tmp"
  copy_source "$tree.tmp"
  while read -r patch_name; do
    case "$patch_name" in ''|'#'*) continue ;; esac
    patch -d "$tree.tmp" -p1 --forward --batch --quiet <"$series_dir/$patch_name" >"$base/patch.log" 2>&1 ||
      fail "$patch_name does not apply to $origin: $(head -n 5 "$base/patch.log" | tr '\n' ' ')"
  done <"$series_dir/series"
  rm -rf "$tree" "$base/build"
  mv "$tree.tmp" "$tree"
  set_stamp "$tree" "$tree_key"
fi

# --- configuration ---------------------------------------------------------------------------
build=$base/build
mkdir -p "$build"
config_input=$( { [ -n "$base_config" ] && cat "$base_config"; cat "$series_dir/hvprof.config"; } )
if [ ! -e "$build/.config" ] || ! stamp_ok "$build/config" "$(printf '%s' "$config_input" | sha256sum | cut -c1-16)"; then
  printf '%s\n' "$config_input" >"$build/.config"
  make -C "$tree/xen" O="$build" olddefconfig >"$base/config.log" 2>&1 ||
    fail "make olddefconfig failed: $(tail -n 5 "$base/config.log" | tr '\n' ' ')"
  for option in CONFIG_HVPROF=y CONFIG_FRAME_POINTER=y; do
    grep -qx "$option" "$build/.config" || fail "$build/.config lacks $option after olddefconfig"
  done
  set_stamp "$build/config" "$(printf '%s' "$config_input" | sha256sum | cut -c1-16)"
fi

# --- build -----------------------------------------------------------------------------------
say "make -C $tree/xen O=$build -j$jobs HVPROF_SRC=$hvprof_src (log: $base/make.log)"
start=$(date +%s)
if ! make -C "$tree/xen" O="$build" -j"$jobs" HVPROF_SRC="$hvprof_src" >"$base/make.log" 2>&1; then
  grep -E -m 20 'error|Error' "$base/make.log" >&2 || tail -n 20 "$base/make.log" >&2
  fail "make failed (log: $base/make.log)"
fi
seconds=$(( $(date +%s) - start ))
[ -f "$build/xen.gz" ] && [ -f "$build/xen-syms" ] || fail "make left no xen.gz and xen-syms in $build"
version=$(make -s -C "$tree/xen" xenversion 2>/dev/null || echo "?")

name=xen-$version-hvprof
cat <<EOF
build-xen: Xen $version with hvprof's engine, from $origin (make: ${seconds} s)
  $build/xen.gz      the hypervisor (multiboot image, gzipped)
  $build/xen-syms    its symbols, with frame pointers: what hvprof symbolizes Xen's samples with
  $build/.config     its configuration (CONFIG_HVPROF=y, CONFIG_FRAME_POINTER=y)

Install and boot it on Debian 12 (as root), beside Debian's own Xen:
  cp $build/xen.gz /boot/$name.gz
  cp $build/.config /boot/$name.config
  mkdir -p /usr/lib/debug/boot && cp $build/xen-syms /usr/lib/debug/boot/xen-syms-$version-hvprof
  update-grub
update-grub's /etc/grub.d/20_linux_xen adds "Debian GNU/Linux, with Xen $version-hvprof and
Linux ..." entries (under "Advanced options ... with Xen hypervisor"); choose one at boot, or
make it the default with GRUB_DEFAULT in /etc/default/grub. Xen's boot options go in
GRUB_CMDLINE_XEN_DEFAULT: hvprof=auto (the default: the PMU if it counts, else the timer),
hvprof=timer or hvprof=pmu; keep vpmu off (the default) for the PMU. Xen says which it took:
  xl dmesg | grep hvprof
Then in dom0 (PV):
  hvprof --platform=xen --start-daemon --xen=/usr/lib/debug/boot/xen-syms-$version-hvprof ...
EOF
