#!/bin/sh
# guest.sh: PV guests (domUs) for the tests, run in the dom0 that tests/qemu boots (busybox sh).
# build-image.sh installs it in dom0 as /usr/local/bin/guest.sh.
#
# A guest boots dom0's own kernel (/boot/vmlinuz) with an initramfs made of dom0's own root (the
# same /init, busybox, Xen modules, hvprof's programs and libraries) plus the guest's test
# archive: /test/guest-NAME/cmd.1, cmd.2, ... and env, which the harness puts in dom0's test
# archive (qemu_harness.h, Dom0Options::guests). The /init runs those commands in the guest
# and frames their results on the guest's console, which xenconsoled logs here.
#
#   guest.sh create NAME [MEMORY_MB]   creates the guest paused (xl create -p) and prints its
#                                      domain id; starts xenconsoled first if it is not running
#   guest.sh wait NAME KEY VALUE [SECONDS]
#                                      waits until the guest has written VALUE to its xenstore
#                                      key data/KEY (/local/domain/ID/data/KEY; default 60 s)
#   guest.sh tell NAME KEY VALUE       writes VALUE to the guest's data/KEY, for it to wait on
#   guest.sh finish NAME [SECONDS]     waits until the guest has powered off (default 90 s) and
#                                      prints its console log: the framed results
# and in the guest, where the same script is:
#   guest.sh post KEY VALUE            writes VALUE to this guest's data/KEY, for dom0's wait
#   guest.sh await KEY VALUE [SECONDS] waits until dom0 has told this guest KEY=VALUE
# Exit status: 0, or 1 with a message (a timeout names what it waited for).
set -u

console_dir=/var/log/xen/console
die() {
  echo "guest.sh: $*" >&2
  exit 1
}

domid() { xl domid "$1" 2>/dev/null; }

# Runs CHECK ARGS... every 0.1 s until it succeeds (status 0), or SECONDS have passed (status 1).
poll() {
  seconds=$1
  shift
  tenths=0
  until "$@"; do
    [ $tenths -ge $((seconds * 10)) ] && return 1
    usleep 100000
    tenths=$((tenths + 1))
  done
}

# Whether xenstore PATH holds VALUE (a path without a leading / is this domain's own).
holds() { [ "$(xenstore-read "$1" 2>/dev/null)" = "$2" ]; }

# The guest's root: dom0's, less what is dom0's own (its test archive, its sessions and logs,
# the guest kernel). Made once per boot.
base_archive() {
  base=/tmp/guest-base.cpio
  [ -s "$base" ] && return 0
  (cd / && find . -xdev \( -path ./tmp -o -path ./test -o -path ./boot -o -path ./var/lib/hvprof \
    -o -path ./var/log -o -path ./root -o -path ./run \) -prune -o -print |
    cpio -o -H newc >"$base.tmp" 2>/dev/null) || die "cannot archive dom0's root for the guest"
  mv "$base.tmp" "$base"
}

create() {
  name=$1
  memory=${2:-512}
  [ -d "/test/guest-$name" ] || die "no /test/guest-$name: the test gives the guest's commands"
  [ -r /boot/vmlinuz ] || die "no /boot/vmlinuz in dom0's image (build-image.sh puts it there)"
  if ! pidof xenconsoled >/dev/null; then
    mkdir -p "$console_dir"
    /usr/lib/xen-4.17/bin/xenconsoled --log=guest --log-dir="$console_dir" --pid-file=/run/xenconsoled.pid ||
      die "xenconsoled did not start"
  fi
  base_archive
  work=/tmp/guest-$name
  rm -rf "$work"
  mkdir -p "$work/root/test"
  cp -a "/test/guest-$name/." "$work/root/test/"
  (cd "$work/root" && find . -mindepth 1 | cpio -o -H newc >"$work/test.cpio" 2>/dev/null) ||
    die "cannot archive the guest's commands"
  cat "$base" "$work/test.cpio" >"$work/initrd.img"
  cat >"$work/xl.cfg" <<EOF
name = "$name"
type = "pv"
kernel = "/boot/vmlinuz"
ramdisk = "$work/initrd.img"
extra = "console=hvc0 quiet panic=-1"
memory = $memory
vcpus = 1
on_poweroff = "destroy"
on_reboot = "destroy"
on_crash = "destroy"
EOF
  rm -f "$console_dir/guest-$name.log"
  xl create -p "$work/xl.cfg" >"$work/xl.log" 2>&1 || die "xl create failed: $(tail -n 5 "$work/xl.log")"
  id=$(domid "$name") || die "xl created $name but does not know its id"
  echo "$id"
}

wait_key() {
  name=$1 key=$2 value=$3 seconds=${4:-60}
  id=$(domid "$name") || die "no guest $name"
  path=/local/domain/$id/data/$key
  written() {
    holds "$path" "$value" && return 0
    domid "$name" >/dev/null || die "guest $name is gone; it never wrote $value to $path"
    return 1
  }
  poll "$seconds" written ||
    die "guest $name did not write $value to $path within $seconds s (it says '$(xenstore-read "$path" 2>/dev/null)')"
  echo "$path = $value"
}

tell() {
  name=$1 key=$2 value=$3
  id=$(domid "$name") || die "no guest $name"
  xenstore-write "/local/domain/$id/data/$key" "$value" || die "cannot write /local/domain/$id/data/$key"
}

finish() {
  name=$1 seconds=${2:-90}
  gone() { ! domid "$name" >/dev/null; }
  if ! poll "$seconds" gone; then
    xl destroy "$name" 2>/dev/null
    cat "$console_dir/guest-$name.log" 2>/dev/null
    die "guest $name was still running after $seconds s and was destroyed"
  fi
  [ -r "$console_dir/guest-$name.log" ] || die "no console log of $name in $console_dir"
  cat "$console_dir/guest-$name.log"
}

# In the guest: xenstore paths without a leading / are the guest's own (/local/domain/ID/...).
post() {
  xenstore-write "data/$1" "$2" || die "cannot write data/$1 (run this in a guest)"
}

await() {
  key=$1 value=$2 seconds=${3:-60}
  poll "$seconds" holds "data/$key" "$value" || die "dom0 did not tell this guest $key=$value within $seconds s"
}

[ $# -ge 1 ] || die "usage: guest.sh create|wait|tell|finish NAME ... (dom0), post|await KEY VALUE (guest)"
action=$1
shift
case "$action" in
  create) [ $# -ge 1 ] || die "usage: guest.sh create NAME [MEMORY_MB]"; create "$@" ;;
  wait) [ $# -ge 3 ] || die "usage: guest.sh wait NAME KEY VALUE [SECONDS]"; wait_key "$@" ;;
  tell) [ $# -eq 3 ] || die "usage: guest.sh tell NAME KEY VALUE"; tell "$@" ;;
  finish) [ $# -ge 1 ] || die "usage: guest.sh finish NAME [SECONDS]"; finish "$@" ;;
  post) [ $# -eq 2 ] || die "usage: guest.sh post KEY VALUE"; post "$@" ;;
  await) [ $# -ge 2 ] || die "usage: guest.sh await KEY VALUE [SECONDS]"; await "$@" ;;
  *) die "unknown action $action: create, wait, tell, finish, post or await" ;;
esac
