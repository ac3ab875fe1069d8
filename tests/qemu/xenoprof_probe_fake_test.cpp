// The fake Xen (tests/xen-fake) against what the real Xen 4.17 answered: xenoprof_probe runs
// every scenario of xenoprof_probe_expected.h with the fake preloaded, on an hvprof-hv running
// the example host (dom0 with 2 vCPUs, as in QEMU), and each op must get Xen's answer.
// Not compared, because hvprof's engine decides them and the fake cannot copy them: the CPU
// (the sim's PMU, not QEMU's), a ring's sample and loss counters (the engine restarts them with
// each buffer and each enable_virq; Xen never zeroes them), whether a later get_buffer hands out
// the same pages (the engine allocates afresh; the size is Xen's), and the scenario of a second
// enable_virq, which the engine refuses (Xen counts it twice).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "programs.h"
#include "temp_dir.h"
#include "xenoprof_probe_expected.h"

namespace hvprof::testing {
namespace {

// What the fake cannot copy, removed from a line of the probe's output.
std::string Comparable(std::string line) {
  static const std::regex cpu(" events=[0-9]+ cpu=[^ ]+");
  static const std::regex counts(" xen=[0-9]+ kernel=[0-9]+ user=[0-9]+ lost=[0-9]+");
  static const std::regex same(" same-buffer=(yes|no)");
  line = std::regex_replace(line, cpu, "");
  line = std::regex_replace(line, counts, "");
  return std::regex_replace(line, same, "");
}

// hvprof-hv on the example host, in `dir`; killed when the test ends.
class Hypervisor {
 public:
  explicit Hypervisor(const TempDir& dir) : run_dir_(dir.File("run")) {
    const std::string log = dir.File("hv.log");
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const std::string hv = Binary("hvprof-hv");
      const std::string scenario = std::string("--scenario=") + HVPROF_SOURCE_DIR + "/examples/default.json";
      const std::string run = "--run-dir=" + run_dir_;
      if (std::freopen(log.c_str(), "w", stderr) == nullptr) ::_exit(127);
      ::execl(hv.c_str(), hv.c_str(), "--platform=sim", scenario.c_str(), run.c_str(), "--speed=max", nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 1000 && !std::filesystem::exists(run_dir_ + "/domain-0.sock"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    REQUIRE(std::filesystem::exists(run_dir_ + "/domain-0.sock"));
  }
  ~Hypervisor() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  Hypervisor(const Hypervisor&) = delete;
  Hypervisor& operator=(const Hypervisor&) = delete;
  const std::string& run_dir() const { return run_dir_; }

 private:
  std::string run_dir_;
  pid_t pid_ = -1;
};

TEST_CASE("xen fake: xenoprof_probe gets the answers Xen 4.17 gave under QEMU", "[xen]") {
  TempDir dir;
  Hypervisor hypervisor(dir);
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::vector<std::string> environment = {
      std::string("LD_PRELOAD=") + HVPROF_FAKE_XEN_LIBRARY, "HVPROF_FAKE_XEN_RUN_DIR=" + hypervisor.run_dir(),
      "HVPROF_FAKE_XEN_DOMAIN=0",
      // The fake is preloaded ahead of the sanitizer runtime the probe links.
      std::string("ASAN_OPTIONS=") + (asan != nullptr ? std::string(asan) + ":" : "") + "verify_asan_link_order=0"};
  for (const auto& [name, expected_text] : xenoprof_probe::Scenarios()) {
    if (name == "duplicate-enable-virq") continue;  // the engine refuses a second enable_virq
    const CommandResult result = RunProgram({HVPROF_XENOPROF_PROBE, name}, environment);
    INFO("xenoprof_probe " << name << "\n" << result.out << result.err);
    CHECK(result.status == 0);
    CHECK(result.err.empty());
    const std::vector<std::string> seen = xenoprof_probe::Lines(result.out);
    const std::vector<std::string> expected = xenoprof_probe::Lines(expected_text);
    for (size_t i = 0; i < expected.size() || i < seen.size(); ++i) {
      INFO("line " << i + 1);
      CHECK((i < seen.size() ? Comparable(seen[i]) : "(no line)") ==
            (i < expected.size() ? Comparable(expected[i]) : "(no line)"));
    }
  }
}

}  // namespace
}  // namespace hvprof::testing
