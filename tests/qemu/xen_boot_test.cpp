// hvprof's own programs in the dom0 of a real Xen 4.17, booted under QEMU (qemu_harness.h).
// Under QEMU's software CPU the counters never overflow, so profiles are empty: these cases
// check what Xen answers, not samples. A failing case prints its whole boot: each command
// with its output and status, and the console.

#include <cstdio>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "qemu_harness.h"

namespace hvprof::testing {
namespace {

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

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
  for (size_t i = 0; i < boot->results.size(); ++i) {
    INFO("command " << i + 1 << ": " << boot->at(i).command);
    CHECK(boot->at(i).status == 0);
  }
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

}  // namespace
}  // namespace hvprof::testing
