// hvprof's own programs in the dom0 of a real Xen 4.17, booted under QEMU (qemu_harness.h).
// Under QEMU's software CPU the counters never overflow, so profiles are empty: these cases
// check what Xen answers, not samples. A failing case prints its whole boot: each command
// with its output and status, and the console.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "qemu_harness.h"
#include "skip.h"

namespace hvprof::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }


// Every command of the boot exited with 0.
void CheckAllSucceeded(const XenBoot& boot) {
  for (size_t i = 0; i < boot.results.size(); ++i) {
    INFO("command " << i + 1 << ": " << boot.at(i).command);
    CHECK(boot.at(i).status == 0);
  }
}

void PrintTimes(const char* name, const XenBoot& boot) {
  std::printf("%s: QEMU ran %.1f s; dom0 ready at uptime %.1f s, done at %.1f s\n", name, boot.seconds,
              boot.dom0_ready_uptime, boot.dom0_done_uptime);
}

TEST_CASE("qemu_harness_cpio_archive") {
  const std::string archive = CpioArchive({{"test/cmd.1", "echo hi\n"}, {"a/b/c", ""}});
  // newc: each header starts with the magic; directories come first, the trailer last.
  CHECK(archive.rfind("070701", 0) == 0);
  CHECK(archive.size() % 4 == 0);
  CHECK(Contains(archive, std::string("test/cmd.1") + '\0'));
  CHECK(Contains(archive, "echo hi\n"));
  CHECK(archive.find(std::string("a/b") + '\0') < archive.find(std::string("a/b/c") + '\0'));
  CHECK(Contains(archive.substr(archive.size() - 124), std::string("TRAILER!!!") + '\0'));
}

// A boot that overruns its deadline: QEMU is ended (SIGTERM, then SIGKILL) and reaped, and the
// harness says so.
TEST_CASE("qemu_harness_deadline") {
  Dom0Options options;
  options.timeout_seconds = 3;
  const auto boot = RunInDom0({"sleep 600"}, options);
  if (!boot) return;
  CHECK(boot->timed_out);
  CHECK(!boot->completed);
  CHECK(boot->seconds < 3 + 5 + 2);
  CHECK(Contains(boot->problem, "was killed"));
}

TEST_CASE("qemu_xen_dom0_lifecycle") {
  const auto boot = RunInDom0({
      "hvprof --start-daemon --platform=xen",
      "hvprof --status",
      "hvprof --start",
      "hvprof --status",
      "hvprof --stop",
      "hvprof --shutdown",
      "hvprof-report",
      "cat /var/lib/hvprof/samples/current/session.json",
      "ls -l /dev/xen/privcmd /dev/xen/evtchn",
      "cat /sys/hypervisor/type /sys/hypervisor/version/major /sys/hypervisor/version/minor /proc/xen/capabilities",
      "hvprof --help",
  });
  if (!boot) return;
  PrintTimes("qemu_xen_dom0_lifecycle", *boot);
  REQUIRE(boot->completed);
  CHECK(Contains(boot->xen_version, "Xen version 4.17."));
  // dom0 as hvprof finds it: Xen's devices, /sys/hypervisor and control_d.
  CHECK(Contains(boot->at(8).output, "/dev/xen/privcmd"));
  CHECK(boot->at(9).output == "xen\n4\n17\ncontrol_d\n");
  CHECK(Contains(boot->at(10).output, "Usage: hvprof ACTION"));
  CheckAllSucceeded(*boot);
  CHECK(Contains(boot->at(0).output, "profiling set up on Xen 4.17 (xen, x86-64/hammer)"));
  CHECK(Contains(boot->at(1).output, "profiling off"));
  CHECK(Contains(boot->at(1).output, "machine: Xen 4.17 (xen), 2 CPUs, x86-64/hammer"));
  CHECK(Contains(boot->at(3).output, "profiling on"));
  CHECK(Contains(boot->at(4).output, "profiling stopped"));
  CHECK(Contains(boot->at(5).output, "profiling shut down"));

  // The report: empty (no counter overflows under TCG) but whole, and its header says what Xen said.
  const std::string& report = boot->at(6).output;
  CHECK(Contains(report, "Platform: xen (Xen 4.17); CPU: x86-64/hammer, 2 CPUs"));
  CHECK(Contains(report, "Lost samples: none"));
  CHECK(Contains(report, "(0 samples in all)"));

  const auto session = nlohmann::json::parse(boot->at(7).output, nullptr, false);
  REQUIRE(!session.is_discarded());
  INFO(session.dump(2));
  CHECK(session.value("cpu_type", "") == "x86-64/hammer");
  // dom0's vCPUs: Xen 4.17's xenstore does not list them; its buffers (one per vCPU) do.
  REQUIRE(session["domains"].size() == 1);
  CHECK(session["domains"][0]["vcpus"] == 2);
}

// A Core 2 (family 6 model 15): Xen's xenoprof names it i386/core_2 and drives it with its P6
// driver (two general counters). hvprof sets up its events there, and a failed setup leaves no
// daemon behind that later commands would take for a dead one.
TEST_CASE("qemu_xen_core2") {
  Dom0Options options;
  options.cpu = "core2duo";
  const auto boot = RunInDom0({
      "hvprof --list-events --cpu-type=i386/core_2 | head -3",
      "hvprof --start-daemon --platform=xen --event=INST_RETIRED:60000 --event=CPU_CLK_UNHALTED:100000",
      "hvprof --status",
      "hvprof --shutdown",
      "hvprof --start-daemon --platform=xen --event=CPU_CLK_UNHALTED:100000 --event=INST_RETIRED:60000 "
      "--event=LLC_MISSES:6000",
      "hvprof --status",
      "tail -3 /var/lib/hvprof/hvprofd.log",
  }, options);
  if (!boot) return;
  PrintTimes("qemu_xen_core2", *boot);
  REQUIRE(boot->completed);
  INFO(boot->Describe());
  CHECK(boot->at(0).status == 0);
  CHECK(Contains(boot->at(0).output, "Events for i386/core_2"));
  CHECK(boot->at(1).status == 0);
  CHECK(Contains(boot->at(1).output, "profiling set up on Xen 4.17 (xen, i386/core_2)"));
  CHECK(boot->at(2).status == 0);
  CHECK(Contains(boot->at(2).output, "i386/core_2"));
  CHECK(boot->at(3).status == 0);
  // Three events on two counters: refused, and nothing is left that looks like a dead hvprofd.
  CHECK(boot->at(4).status != 0);
  CHECK(!Contains(boot->at(5).output, "died without shutting down"));
  CHECK(!Contains(boot->at(6).output, "an earlier hvprofd left behind"));
  CHECK(Contains(boot->at(6).output, "undid the xenoprof setup this hvprofd had made before it failed"));
}

// hvprofd killed while Xen profiles: xenoprof stays set up, with dom0 its primary. The next
// --start-daemon unwinds that state on the real hypervisor and continues the session; the
// session of the killed one says it is incomplete until then. --reset empties the session.
TEST_CASE("qemu_xen_recovery") {
  const auto boot = RunInDom0({
      "hvprof --start-daemon --platform=xen",
      "hvprof --start",
      "kill -9 $(head -1 /var/lib/hvprof/lock) && sleep 1 && hvprof --status",
      "hvprof-report | grep -i -m1 incomplete",
      "hvprof --start-daemon --platform=xen",
      "hvprof --status",
      "hvprof --start",
      "hvprof --stop",
      "hvprof --reset",
      "ls /var/lib/hvprof/samples/current | sort | tr '\\n' ' '",
      "hvprof --shutdown",
      "tail -4 /var/lib/hvprof/hvprofd.log",
  });
  if (!boot) return;
  PrintTimes("qemu_xen_recovery", *boot);
  REQUIRE(boot->completed);
  INFO(boot->Describe());
  CHECK(boot->at(0).status == 0);
  CHECK(boot->at(1).status == 0);
  // The killed daemon is seen as dead, and its session as incomplete.
  CHECK(Contains(boot->at(2).output, "died without shutting down"));
  CHECK(boot->at(3).status == 0);
  CHECK(Contains(boot->at(3).output, "incomplete"));
  // Xen still had dom0 profiling: the new hvprofd unwinds it and sets up again.
  CHECK(boot->at(4).status == 0);
  CHECK(Contains(boot->at(4).output, "profiling set up on Xen 4.17"));
  CHECK(Contains(boot->at(5).output, "hvprofd: running; profiling off"));
  CHECK(!Contains(boot->at(5).output, "died without shutting down"));
  CHECK(boot->at(6).status == 0);
  CHECK(boot->at(7).status == 0);
  CHECK(boot->at(8).status == 0);
  CHECK(boot->at(10).status == 0);
  CHECK(Contains(boot->at(11).output, "recovered the xenoprof state an earlier hvprofd left behind"));
  CHECK(Contains(boot->at(11).output, "(it was still profiling)"));
}

// Samples from the real hypervisor: only where QEMU can use KVM and KVM gives its guests a PMU
// (QEMU's software CPU counts nothing). dom0 runs a user-mode busy loop on one vCPU while
// profiling; Xen drops idle samples, so most of what arrives is that loop: dom0 user mode.
TEST_CASE("qemu_xen_kvm_samples") {
  const int kvm = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm < 0) {
    SkipTest(std::string("no usable /dev/kvm (") + std::strerror(errno) +
             "): under QEMU's software CPU Xen's counters never overflow, so no sample can arrive; this case "
             "needs KVM with a vPMU");
    return;
  }
  ::close(kvm);
  std::ifstream enable_pmu("/sys/module/kvm/parameters/enable_pmu");
  std::string pmu;
  if (enable_pmu >> pmu && pmu == "N") {
    SkipTest("KVM gives its guests no PMU (kvm.enable_pmu=N): Xen's counters would never overflow");
    return;
  }
  Dom0Options options;
  options.accel = "kvm";
  options.cpu = "host";
  const auto boot = RunInDom0({
      "hvprof --start-daemon --platform=xen",
      "hvprof --start",
      "timeout 3 sh -c 'while :; do :; done'; true",
      "hvprof --stop",
      "cat /var/lib/hvprof/samples/current/session.json",
      "hvprof-report -t 2 | head -40",
      "hvprof --shutdown",
  }, options);
  if (!boot) return;
  PrintTimes("qemu_xen_kvm_samples", *boot);
  REQUIRE(boot->completed);
  INFO(boot->Describe());
  CheckAllSucceeded(*boot);
  const auto session = nlohmann::json::parse(boot->at(4).output, nullptr, false);
  REQUIRE(!session.is_discarded());
  const uint64_t stored = session.value("samples_stored", uint64_t{0});
  uint64_t dom0 = 0;
  uint64_t dom0_user = 0;
  REQUIRE(session.contains("samples_by_domain_mode"));
  const nlohmann::json& by_mode = session["samples_by_domain_mode"];
  REQUIRE(by_mode.is_object());
  for (auto it = by_mode.begin(); it != by_mode.end(); ++it) {
    if (it.key().rfind("0/", 0) == 0) dom0 += it.value().get<uint64_t>();
    if (it.key() == "0/user") dom0_user = it.value().get<uint64_t>();
  }
  CHECK(stored > 100);
  CHECK(dom0 > 100);
  CHECK(dom0_user * 2 > dom0);
}

// A PV guest started with xl (tests/qemu/guest.sh): dom0 profiles it as a passive domain, then
// as an active one whose own agent joins from inside; the guest cannot run what only dom0 may
// (checked with raw ops, as xenoprof_probe's guest-refusals runs them, and with hvprof) nor map
// another domain's memory. dom0 and the guest wait for each other through xenstore.
TEST_CASE("qemu_xen_guest") {
  const std::string self = "$(xenstore-read domid)";
  GuestOptions guest;
  guest.name = "g1";
  guest.command_timeout_seconds = 150;
  guest.commands = {
      // Debian 12's kernel has the XSA-482 fix: privcmd passes no hypercall in a guest unless
      // loaded with unrestricted=1. The agent says so, then works once it is.
      "hvprof --platform=xen --domain=" + self + " --start-daemon",                                   // 0
      "umount /proc/xen && rmmod xenfs && rmmod xen-privcmd && insmod /lib/modules/xen/xen-privcmd.ko unrestricted=1 "
      "&& insmod /lib/modules/xen/xenfs.ko && mount -t xenfs xenfs /proc/xen",                       // 1
      "hvprof --platform=xen --domain=" + self + " --start-daemon --event=CPU_CLK_UNHALTED:100000",    // 2
      "hvprof --domain=" + self + " --start",                                                         // 3
      "guest.sh post hvprof joined && guest.sh await dom0 profiling 120",                              // 4
      "hvprof --domain=" + self + " --shutdown",                                                      // 5
      "hvprof --platform=xen --start-daemon --passive-domains=0 --session-dir=/tmp/not-dom0",         // 6
      "xenoprof_probe guest-init",                                                                    // 7
      "hvprof --domain=" + self + " --shutdown",                                                      // 8
      "xenoprof_probe guest-refusals",                                                                // 9
      "hvprof --domain=" + self + " --shutdown",                                                      // 10
      "guest.sh post hvprof probed && guest.sh await dom0 stopped 120",                                // 11
      "hvprof --domain=" + self + " --status",                                                        // 12
      "hvprof-report --session-dir=/var/lib/hvprof/domain-" + self,                                   // 13
      "hvprof --domain=" + self + " --shutdown",                                                      // 14
  };

  Dom0Options options;
  // A guest's boot under the emulator inside the emulator: about 10 s here, several times that
  // on a loaded machine. dom0's waits for it get room (guest.sh's own limits are below these).
  options.command_timeout_seconds = 150;
  options.timeout_seconds = 420;
  options.guests.push_back(guest);
  options.files.emplace_back("/usr/local/bin/xenoprof_probe", XenoprofProbe());
  const auto boot = RunInDom0({
      "guest.sh create g1",                                            // 0
      "hvprof --start-daemon --platform=xen --passive-domains=g1",     // 1
      "hvprof --status",                                               // 2
      "hvprof --start && hvprof --stop",                               // 3
      "hvprof --shutdown",                                             // 4
      "hvprof --start-daemon --platform=xen --active-domains=g1",      // 5
      "hvprof --start",                                                // 6
      "xl unpause g1 && guest.sh wait g1 hvprof joined 120",           // 7
      "hvprof --start",                                                // 8
      "hvprof --status",                                               // 9
      "guest.sh tell g1 dom0 profiling && guest.sh wait g1 hvprof probed 120",  // 10
      "hvprof --stop && guest.sh tell g1 dom0 stopped",                // 11
      "guest.sh finish g1 120",                                        // 12
      "hvprof --status",                                               // 13
      "hvprof --shutdown",                                             // 14
      "hvprof-report --by-domain",                                     // 15
  }, options);
  if (!boot) return;
  PrintTimes("qemu_xen_guest", *boot);
  REQUIRE(boot->completed);
  INFO(boot->Describe());
  for (size_t i : {0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
    INFO("dom0 command " << i + 1 << ": " << boot->at(i).command);
    CHECK(boot->at(i).status == 0);
  }
  const std::string domid = boot->at(0).output.substr(0, boot->at(0).output.find('\n'));
  CHECK(domid == "1");
  // Passive: dom0 finds the guest by its name and sets it up.
  CHECK(Contains(boot->at(2).output, "g1"));
  CHECK(Contains(boot->at(2).output, "passive"));
  // Active: Xen refuses start until the guest's agent has joined, and dom0 names who it waits for.
  CHECK(boot->at(6).status != 0);
  CHECK(Contains(boot->at(6).output, "every active domain has joined (dom1 (g1))"));
  CHECK(Contains(boot->at(8).output, "profiling started"));
  CHECK(Contains(boot->at(9).output, "profiling on"));
  CHECK(Contains(boot->at(11).output, "profiling stopped"));

  const GuestRun run = ParseGuest(boot->at(12).output, guest);
  INFO("guest g1:\n" << run.Describe());
  REQUIRE(run.completed);
  for (size_t i : {1, 2, 3, 4, 7, 9, 10, 11, 12, 13, 14}) {
    INFO("guest command " << i + 1 << ": " << run.at(i).command);
    CHECK(run.at(i).status == 0);
  }
  // Debian 12's guest kernel blocks privcmd's hypercalls: the agent says so and how to lift it.
  CHECK(run.at(0).status != 0);
  CHECK(Contains(run.at(0).output, "lets no hypercall through /dev/xen/privcmd"));
  CHECK(Contains(run.at(0).output, "xen_privcmd.unrestricted=1"));
  CHECK(Contains(run.at(2).output, "guest agent ready in dom1 (g1) on Xen 4.17"));
  CHECK(Contains(run.at(3).output, "dom1 (g1) joined profiling"));
  // Xen refuses the guest's disable_virq while dom0 profiles; the agent stays and says why.
  CHECK(run.at(5).status != 0);
  CHECK(Contains(run.at(5).output, "dom0 is still profiling"));
  // hvprof in the guest, set up as if it were dom0: refused before anything reaches Xen.
  CHECK(run.at(6).status != 0);
  CHECK(Contains(run.at(6).output, "this is a Xen guest"));
  // Another process's init changes nothing: the agent still cannot leave while dom0 profiles.
  CHECK(Contains(run.at(7).output, "xen_version: 0 OK 4.17\n"));
  CHECK(Contains(run.at(7).output, "init: 0 OK primary=0 "));
  CHECK(run.at(8).status != 0);
  CHECK(Contains(run.at(8).output, "dom0 is still profiling"));
  // Raw ops: hypercalls get through, but only dom0, the primary profiler, may run these; Xen
  // says EPERM to the guest and will not map dom0's memory for it. The guest's own buffer is
  // its agent's (EBUSY).
  const std::string& probe = run.at(9).output;
  CHECK(Contains(probe, "get_buffer@agent-holds-it: -16 EBUSY\n"));
  for (const char* op : {"reset_active_list", "reset_passive_list", "set_active(0)", "set_passive(0)",
                         "reserve_counters", "counter(0)", "setup_events", "start", "stop", "release_counters",
                         "shutdown", "set_backtrace", "map-dom0-page"}) {
    INFO(op);
    CHECK(Contains(probe, std::string(op) + ": -1 EPERM\n"));
  }
  // But that refused get_buffer made Xen forget the guest was active (init did not, above; the
  // fake plays it the same way): Xen stops recording its samples, and now lets it leave while
  // dom0 still profiles.
  CHECK(run.at(10).status == 0);
  CHECK(Contains(run.at(10).output, "profiling shut down in dom1 (g1)"));
  // Its own report: the session it wrote when it left, with dom0's event named.
  CHECK(Contains(run.at(13).output, "Platform: xen (Xen 4.17)"));
  CHECK(Contains(run.at(13).output, "Counted CPU_CLK_UNHALTED events"));
  CHECK(Contains(run.at(13).output, "Lost samples: none"));
  // Once the guest left, dom0 shuts down cleanly.
  CHECK(Contains(boot->at(14).output, "profiling shut down"));
}

// --sched on the real Xen 4.17 (issue 21): dom0 reads Xen's trace buffers while a PV guest
// spins, and the session has runstate records for dom0 and the guest; the pCPUs' time adds up.
TEST_CASE("qemu_xen_sched") {
  const GuestOptions guest = SpinningGuest("g1", "tracing");
  Dom0Options options;
  options.command_timeout_seconds = 150;
  options.timeout_seconds = 420;
  options.guests.push_back(guest);
  const auto boot = RunInDom0({
      "guest.sh create g1",                                                // 0
      "hvprof --start-daemon --platform=xen --sched",                      // 1
      "hvprof --start",                                                    // 2
      "xl unpause g1 && guest.sh tell g1 dom0 tracing",                    // 3
      "guest.sh wait g1 spin done 120",                                    // 4
      "hvprof --status | grep -e sched -e mask",                           // 5
      "hvprof --stop && guest.sh tell g1 dom0 stopped",                    // 6
      "guest.sh finish g1 120 >/dev/null",                                 // 7
      "hvprof --shutdown",                                                 // 8
      "hvprof-report --sched --format=json --top=1",                       // 9
      "grep -o '\"source\": *\"[a-z]*\"' /var/lib/hvprof/samples/current/session.json",  // 10
  }, options);
  if (!boot) return;
  PrintTimes("qemu_xen_sched", *boot);
  REQUIRE(boot->completed);
  INFO(boot->Describe());
  CheckAllSucceeded(*boot);
  CHECK(Contains(boot->at(5).output, "scheduling records from xentrace"));
  CHECK(Contains(boot->at(5).output, "0x00029000"));
  CHECK(Contains(boot->at(10).output, "xentrace"));
  const auto sched = nlohmann::json::parse(boot->at(9).output, nullptr, false);
  REQUIRE(!sched.is_discarded());
  const double window = sched["window"]["ns"].get<double>();
  CHECK(window > 1e9);
  // Runstate records for dom0's vCPUs and the guest's; the guest spun for about 6 s.
  double guest_running = 0;
  bool dom0_seen = false;
  for (const nlohmann::json& entity : sched["entities"]) {
    if (entity["domain"] == 0) dom0_seen = true;
    if (entity["domain"] == 1) guest_running += entity["running_ns"].get<double>();
  }
  CHECK(dom0_seen);
  CHECK(guest_running > 3e9);
  // Every pCPU's time is accounted: busy + idle + unknown is the window, and little is unknown.
  REQUIRE(sched["pcpus"].size() == 2);
  double accounted = 0;
  for (const nlohmann::json& cpu : sched["pcpus"]) {
    accounted += cpu["busy_ns"].get<double>() + cpu["idle_ns"].get<double>();
  }
  std::printf("qemu_xen_sched: window %.3f s, guest ran %.3f s, pCPUs busy+idle %.3f s of %.3f s; records %s\n",
              window / 1e9, guest_running / 1e9, accounted / 1e9, 2 * window / 1e9, sched["records"].dump().c_str());
  CHECK(std::abs(accounted - 2 * window) <= 0.02 * 2 * window);
  CHECK(sched["records"]["lost_records"] == 0);
}

}  // namespace
}  // namespace hvprof::testing
