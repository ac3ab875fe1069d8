#!/bin/sh
# /init of the initramfs that tests/qemu/build-image.sh builds (busybox sh, PID 1), for dom0
# and, through tests/qemu/guest.sh, for PV guests (domUs) that dom0 starts with xl.
#
# It sets up what a PV domain needs for hvprof's xen platform (/dev/xen/*, xenfs on /proc/xen;
# in dom0 also xenstored), then runs the commands of the test archive appended to the initramfs:
#   /test/cmd.1, /test/cmd.2, ...  one shell snippet each, run in order by `sh` in /root;
#   /test/env                      optional, sourced first (HVPROF_COMMAND_TIMEOUT, ...).
# Each command's stdout and stderr go, together, to a file; then the result is sent on the
# second serial port (/dev/ttyS1, QEMU's second -serial), which carries nothing else:
#   @@hvprof-boot kernel=RELEASE caps=control_d uptime=SECONDS
#   @@hvprof-begin N
#   @@hvprof-output N BYTES      followed by exactly BYTES raw bytes, then a newline
#   @@hvprof-end N rc=STATUS
#   ...
#   @@hvprof-done uptime=SECONDS after the last command, then the machine powers off
# The same is echoed, for people, on the console (hvc0 -> Xen -> first serial port), where it
# is interleaved with Xen's and the kernel's messages. With no test archive, a shell is started
# on the console (see build-image.sh for how to boot the image by hand).
# In a guest (no control_d in /proc/xen/capabilities) the result channel is the guest's console,
# hvc0, which dom0's xenconsoled logs to /var/log/xen/console/guest-NAME.log (guest.sh reads
# it); the lines are the same, and the kernel is told to keep quiet on it.

export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root TERM=dumb

mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/shm /dev/pts /run /tmp /var/lib /var/log /root
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t devpts devpts /dev/pts
ip link set lo up 2>/dev/null

# The Xen devices, in dependency order (xenfs needs xen-privcmd).
for module in xen-privcmd xen-evtchn xenfs xen-gntdev xen-gntalloc; do
  insmod "/lib/modules/xen/$module.ko" || echo "@@hvprof-init: insmod $module failed" >/dev/console
done
mount -t xenfs xenfs /proc/xen || echo "@@hvprof-init: mounting xenfs on /proc/xen failed" >/dev/console

guest=
grep -q control_d /proc/xen/capabilities 2>/dev/null || guest=1

# xenstore, as Debian's xencommons starts it: xenstored, then xen-init-dom0 (dom0's name and id).
# A guest reaches dom0's xenstore through /dev/xen/xenbus.
start_xenstore() {
  mkdir -p /run/xenstored
  if ! XENSTORED_ROOTDIR=/run/xenstored xenstored --pid-file /run/xenstore.pid; then
    echo "@@hvprof-init: xenstored did not start" >/dev/console
    return
  fi
  tries=0
  until xenstore-read -s / >/dev/null 2>&1 || [ $tries -ge 100 ]; do
    usleep 100000
    tries=$((tries + 1))
  done
  /usr/lib/xen-4.17/bin/xen-init-dom0 >/dev/null || echo "@@hvprof-init: xen-init-dom0 failed" >/dev/console
}
[ -n "$guest" ] || start_xenstore

if [ ! -e /test/cmd.1 ]; then
  [ -n "$guest" ] && { echo "hvprof guest image: no /test/cmd.1"; poweroff -f; }
  echo "hvprof dom0 image: no /test/cmd.1, starting a shell; 'poweroff -f' ends QEMU"
  setsid cttyhack sh
  poweroff -f
fi

HVPROF_COMMAND_TIMEOUT=60
# shellcheck source=/dev/null
[ -r /test/env ] && . /test/env

# The result channel. raw: no \n -> \r\n and no echo, so the bytes arrive as written.
channel=/dev/ttyS1
if [ -n "$guest" ]; then
  channel=/dev/hvc0
  dmesg -n 1  # only emergencies from the kernel on the channel
fi
if ! exec 3>"$channel"; then
  echo "@@hvprof-init: cannot open $channel, the result channel" >/dev/console
  poweroff -f
fi
stty -F "$channel" raw -echo 115200 2>/dev/null
emit() { printf '%s\n' "$*" >&3; }
# What is echoed for people goes to the console; in a guest that is the channel itself.
say() { [ -n "$guest" ] || cat; }

emit "@@hvprof-boot kernel=$(uname -r) caps=$(cat /proc/xen/capabilities 2>/dev/null) uptime=$(cut -d' ' -f1 /proc/uptime)"
n=1
while [ -e "/test/cmd.$n" ]; do
  emit "@@hvprof-begin $n"
  echo "@@hvprof-begin $n: $(cat "/test/cmd.$n")" | say
  # Without fd 3: a daemon a command starts must not hold the channel open (its last close
  # is what waits for the UART, below).
  (cd /root && exec timeout -s KILL "$HVPROF_COMMAND_TIMEOUT" sh "/test/cmd.$n") >"/tmp/out.$n" 2>&1 </dev/null 3>&-
  status=$?
  emit "@@hvprof-output $n $(wc -c <"/tmp/out.$n")"
  cat "/tmp/out.$n" >&3
  emit ""
  emit "@@hvprof-end $n rc=$status"
  # The console is slow (~30 KB/s) and drops what it cannot send: only the start of long output.
  {
    head -c 2048 "/tmp/out.$n"
    [ "$(wc -c <"/tmp/out.$n")" -gt 2048 ] && echo "[... $(wc -c <"/tmp/out.$n") bytes in all, on the result channel]"
    echo "@@hvprof-end $n rc=$status"
  } | say
  n=$((n + 1))
done
emit "@@hvprof-done uptime=$(cut -d' ' -f1 /proc/uptime)"
# The last close of the tty waits until the UART has sent everything; only then power off.
exec 3>&-
echo "@@hvprof-done" | say
poweroff -f
