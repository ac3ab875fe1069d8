// What Xen 4.17's xenoprof answers at the points where docs/xen.md said the fake Xen
// (tests/xen-fake) was not known to copy it: xenoprof_probe (xenoprof_probe.cpp) runs each
// scenario in dom0, all in one boot (about 25 s), and every answer is compared with what Xen
// 4.17.7 gave under QEMU (xenoprof_probe_expected.h, with the reasons), as facts about Xen: a
// different answer fails the case.
//
// By hand: build/tests/qemu_tests qemu_xenoprof_quirks -s  (prints every scenario's output).
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "qemu_harness.h"
#include "xenoprof_probe_expected.h"

namespace hvprof::testing {
namespace {

// The probe's output, line by line, against what Xen said.
void CheckOutput(const Dom0Result& result, const std::string& expected_text) {
  INFO("command: " << result.command << "\noutput:\n" << result.output);
  CHECK(result.status == 0);
  const std::vector<std::string> seen = xenoprof_probe::Lines(result.output);
  const std::vector<std::string> expected = xenoprof_probe::Lines(expected_text);
  for (size_t i = 0; i < expected.size() || i < seen.size(); ++i) {
    INFO("line " << i + 1);
    CHECK((i < seen.size() ? seen[i] : "(no line)") == (i < expected.size() ? expected[i] : "(no line)"));
  }
}

// One boot, every scenario in turn.
TEST_CASE("qemu_xenoprof_quirks") {
  Dom0Options options;
  options.files.emplace_back("/usr/local/bin/xenoprof_probe", XenoprofProbe());
  const auto& scenarios = xenoprof_probe::Scenarios();
  std::vector<std::string> commands;
  for (const auto& [name, expected] : scenarios) commands.push_back("xenoprof_probe " + name);
  const auto boot = RunInDom0(commands, options);
  if (!boot) return;
  std::printf("qemu_xenoprof_quirks: QEMU ran %.1f s; dom0 ready at uptime %.1f s, done at %.1f s\n", boot->seconds,
              boot->dom0_ready_uptime, boot->dom0_done_uptime);
  REQUIRE(boot->completed);
  REQUIRE(boot->results.size() == scenarios.size());
  CHECK(boot->xen_version.find("Xen version 4.17.") != std::string::npos);
  for (size_t i = 0; i < scenarios.size(); ++i) {
    INFO("scenario " << scenarios[i].first);
    CheckOutput(boot->at(i), scenarios[i].second);
  }
}

}  // namespace
}  // namespace hvprof::testing
