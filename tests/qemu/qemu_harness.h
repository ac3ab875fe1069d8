// Real Xen 4.17 under QEMU's software CPU: boots Debian's hypervisor with a PV dom0 whose
// initramfs holds busybox, the Xen device modules, xenstored and hvprof's programs, runs shell
// commands in dom0 and returns each one's output and exit status.
//
//   auto boot = RunInDom0({"hvprof --help", "ls /dev/xen"});
//   if (!boot) return;                      // skipped, with the reason (no QEMU, no Xen...)
//   CHECK(boot->at(0).status == 0);         // a failing test case prints boot->Describe()
//
// How it works (tests/qemu/build-image.sh builds the image, dom0-init.sh is dom0's /init):
// - build-image.sh writes build/qemu/{xen,vmlinux,initrd.img}, caching what comes from Debian
//   packages; it exits 77, naming the package, when something is missing, and the test skips.
// - Each boot appends a small cpio archive to initrd.img (Linux unpacks concatenated archives
//   into one initramfs) with /test/cmd.1, /test/cmd.2, ... and /test/env.
// - QEMU has two serial ports. The first carries Xen's console, with dom0's hvc0 on it: the
//   log for people (console.log). The second is dom0's /dev/ttyS1 and carries only the results,
//   framed with byte counts so that any output survives (dom0-init.sh describes the lines).
//   Xen interleaves its own messages with dom0's on the console and drops characters when its
//   transmit buffer is full, so results never go there. The result channel is slow (about
//   7 KB/s: each port access of a PV dom0 traps into Xen, under TCG): keep outputs to a few KB
//   (| head, grep) and read big files in dom0.
// - QEMU runs with a deadline and dies with the test process (PR_SET_PDEATHSIG): no QEMU is
//   left behind, whatever happens to the test.
//
// By hand:
//   ctest --test-dir build -R qemu_xen_dom0_lifecycle --output-on-failure
//   build/tests/qemu_tests qemu_xen_dom0_lifecycle -s          # the same, with every check printed
// and an interactive dom0 shell as build-image.sh's header says.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "temp_dir.h"

namespace hvprof::testing {

// A PV guest (domU) the test starts from dom0 with tests/qemu/guest.sh (installed in dom0):
// `guest.sh create NAME` makes it, paused, from dom0's own kernel and root plus these commands;
// `xl unpause NAME` lets it run them; `guest.sh finish NAME` waits until it has powered off and
// prints its results, which ParseGuest reads. The guest and dom0 wait for each other through
// xenstore: `guest.sh post KEY VALUE` / `guest.sh await KEY VALUE` in the guest, `guest.sh wait
// NAME KEY VALUE` / `guest.sh tell NAME KEY VALUE` in dom0.
struct GuestOptions {
  std::string name;                   // xl's name for it
  std::vector<std::string> commands;  // busybox sh snippets, run in order in /root as root
  int command_timeout_seconds = 60;
};

// A guest that waits until dom0 runs `guest.sh tell NAME dom0 GO`, spins in a shell loop for
// `seconds`, posts "spin done" (`guest.sh wait NAME spin done` in dom0), and stays alive until
// dom0 runs `guest.sh tell NAME dom0 stopped` (a guest that ends takes its xenstore keys).
GuestOptions SpinningGuest(const std::string& name, const std::string& go, int seconds = 6);

struct Dom0Options {
  // QEMU's CPU model. Under TCG, xenoprof runs on two: qemu64 (AMD family 15; Xen says
  // x86-64/hammer, 4 counters) and core2duo (Xen says i386/core_2, 2 counters). Nehalem and
  // later make Xen's init fail with ENODEV. Neither counts anything: no samples arrive.
  std::string cpu = "qemu64";
  // "tcg" (QEMU's software CPU: no counter ever overflows) or "kvm" (with cpu = "host": where
  // /dev/kvm exists and KVM gives its guests a PMU, Xen's counters count and samples arrive).
  std::string accel = "tcg";
  int timeout_seconds = 240;          // the whole boot; QEMU is killed past it
  int memory_mb = 2048;               // the machine's: Xen, dom0's 1 GiB, and the guests'
  int command_timeout_seconds = 60;   // each command; killed past it (status 137)
  // Extra files for the test archive: absolute path in dom0, contents (made executable).
  std::vector<std::pair<std::string, std::string>> files;
  // The hypervisor to boot (an uncompressed multiboot image, as build-xen.sh's build/xen);
  // empty: the image's, Debian's Xen 4.17.
  std::string xen;
  std::string xen_arguments;   // appended to Xen's command line
  std::string dom0_arguments;  // appended to dom0's kernel command line
  std::vector<GuestOptions> guests;  // their commands, in dom0 as /test/guest-NAME/
};

struct Dom0Result {
  std::string command;
  std::string output;  // stdout and stderr together, as they came
  int status = -1;     // exit status; -1 if the command never finished
};

struct XenBoot {
  std::vector<Dom0Result> results;  // one per command, in order
  bool completed = false;           // dom0 reported every command and powered off
  bool timed_out = false;           // QEMU was killed at the deadline
  int qemu_status = -1;             // QEMU's exit status (128 + signal if killed)
  std::string qemu_output;          // what QEMU itself printed
  double seconds = 0;               // QEMU's wall time, start to exit
  double dom0_ready_uptime = 0;     // dom0's uptime when the first command started
  double dom0_done_uptime = 0;      // and after the last
  std::string console;              // the first serial port: Xen and dom0's console
  std::string channel;              // the second: the raw result channel
  std::string xen_version;          // "(XEN) Xen version 4.17.7 (Debian ...) ..."
  std::vector<std::string> xen_lines;  // every "(XEN) " line of the console
  std::string image_info;           // build-image.sh's image.info
  std::string problem;              // what went wrong with the boot itself, if anything
  // Commands whose end frame the result channel lost, their status read from the console's
  // copy of it instead (the two ports lose bytes independently), for the failure message.
  std::string recovered;
  std::shared_ptr<TempDir> dir;     // console.log, results.log, initrd.img live here

  const Dom0Result& at(size_t i) const { return results.at(i); }
  // Everything, for a failure message: the boot, each command with its output, the console.
  // The test case prints the last boot's when it fails.
  std::string Describe() const;
};

// What a guest ran, from what `guest.sh finish NAME` printed in dom0 (its console, framed as
// dom0-init.sh describes).
struct GuestRun {
  std::vector<Dom0Result> results;  // one per command, in order
  bool completed = false;           // the guest reported every command before it powered off
  std::string problem;
  const Dom0Result& at(size_t i) const { return results.at(i); }
  std::string Describe() const;
};
GuestRun ParseGuest(const std::string& console, const GuestOptions& guest);

// Boots Xen and runs `commands` (each a busybox sh snippet, run in /root as root) one after
// another in dom0. Returns nullopt if the test was skipped (SkipTest has said why).
std::optional<XenBoot> RunInDom0(const std::vector<std::string>& commands, const Dom0Options& options = {});

// Xen 4.17 with hvprof's engine inside, as xen-engine/build-xen.sh builds it (Debian's source
// and the patch series; a few minutes the first time, seconds after): where its image and
// symbols are. Returns nullopt if the test was skipped (SkipTest has said why: no source, no
// flex...).
struct EngineXen {
  std::string xen;       // the multiboot image QEMU boots (Dom0Options::xen)
  std::string xen_syms;  // its symbols, with frame pointers (hvprof's --xen)
  std::string built;     // what build-xen.sh said
};
std::optional<EngineXen> BuildEngineXen();

// The xenoprof_probe program (xenoprof_probe.cpp), to put into dom0 with Dom0Options::files as
// /usr/local/bin/xenoprof_probe; guests get it from there too.
std::string XenoprofProbe();

// A newc cpio archive of `files` (path without the leading '/', contents), with the parent
// directories they need; exposed for the harness's own test.
std::string CpioArchive(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace hvprof::testing
