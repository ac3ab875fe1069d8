// pprof's Locations name every function at an address: a session whose samples fall in code
// inlined into another function (a fixture built here with DWARF) gives Locations with one
// Line per function, innermost first, as `go tool pprof` reads them.
#include <filesystem>
#include <regex>

#include <catch2/catch.hpp>

#include "hvprof/report/load.h"
#include "hvprof/report/writers/pprof.h"
#include "programs.h"
#include "skip.h"
#include "synthetic_session.h"
#include "temp_dir.h"

using namespace hvprof;

namespace {

// Every address of `function` in the fixture, from its symbol table.
std::vector<uint64_t> AddressesOf(const std::string& image, const std::string& function) {
  const testing::CommandResult nm = testing::RunProgram({"/usr/bin/nm", "-S", image});
  REQUIRE(nm.status == 0);
  std::smatch match;
  REQUIRE(std::regex_search(nm.out, match, std::regex("([0-9a-f]+) ([0-9a-f]+) T " + function + "\n")));
  const uint64_t start = std::stoull(match[1], nullptr, 16), size = std::stoull(match[2], nullptr, 16);
  std::vector<uint64_t> addresses;
  for (uint64_t a = start; a < start + size; ++a) addresses.push_back(a);
  return addresses;
}

// A session with one sample at every byte of the fixture's work(), some of them in the loop
// inlined from twice().
struct InlinedSession {
  testing::TempDir dir;
  std::string session;
  size_t addresses = 0;
};

void MakeInlinedSession(InlinedSession& made) {
  const std::string image = HVPROF_INLINED_FIXTURE;
  const std::vector<uint64_t> addresses = AddressesOf(image, "work");
  std::vector<store::StoredSample> samples;
  for (uint64_t address : addresses) {
    store::StoredSample s;
    s.ip = address;
    s.pid = s.tid = 100;
    s.period = 1000000;
    samples.push_back(s);
  }
  made.addresses = addresses.size();
  made.session = testing::WriteSyntheticSession(
      made.dir.File("session"), "linux", {{100, "inlined", {{image, 0x400000, 0x800000, 0, ""}}}}, samples);
}

report::LoadOptions InlineOptions() {
  report::LoadOptions options;
  options.stacks = true;
  options.inlines = true;
  return options;
}

}  // namespace

TEST_CASE("pprof locations carry one line per inlined function, innermost first", "[report][stacks][pprof]") {
  InlinedSession made;
  MakeInlinedSession(made);
  report::LoadOptions options = InlineOptions();
  auto profile = report::LoadProfile(made.session, options);
  REQUIRE(profile.has_value());
  uint64_t inlined = 0;
  for (const report::Entry& frame : profile.value().frames()) {
    if (frame.inlined == report::kNoIndex) continue;
    const report::InlineChain& chain = profile.value().inline_chains()[frame.inlined];
    REQUIRE(chain.calls.size() == 1);
    CHECK(chain.calls[0].function == "twice");
    CHECK(profile.value().symbols()[frame.symbol].name == "work");
    REQUIRE(chain.calls[0].line != report::kNoIndex);
    CHECK(profile.value().lines()[chain.calls[0].line].file.find("inlined.c") != std::string::npos);
    ++inlined;
  }
  CHECK(inlined > 0);
  CHECK(inlined < made.addresses);  // work() has code of its own too

  // Without asking, no chains: the other views do not pay for them.
  options.inlines = false;
  auto plain = report::LoadProfile(made.session, options);
  REQUIRE(plain.has_value());
  CHECK(plain.value().inline_chains().empty());
}

TEST_CASE("go tool pprof reads the inlined calls: twice, marked inline, above work", "[report][stacks][pprof]") {
  if (!std::filesystem::exists("/usr/bin/go") &&
      testing::SkipTest("go tool pprof (Debian golang-go) is not installed: scripts/install-deps.sh installs it")) {
    return;
  }
  InlinedSession made;
  MakeInlinedSession(made);
  auto profile = report::LoadProfile(made.session, InlineOptions());
  REQUIRE(profile.has_value());
  report::StackFilter filter;
  filter.events = {0};
  auto bytes = report::FormatPprof(profile.value(), filter);
  REQUIRE(bytes.has_value());
  made.dir.Write("inlined.pb.gz", bytes.value());
  const testing::CommandResult traces =
      testing::RunProgram({"/usr/bin/go", "tool", "pprof", "-traces", made.dir.File("inlined.pb.gz")});
  INFO(traces.out + traces.err);
  REQUIRE(traces.status == 0);
  CHECK(std::regex_search(traces.out, std::regex(R"(twice\s+\(inline\)\s*\n\s+work)")));
}
