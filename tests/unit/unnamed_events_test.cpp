// A session that names no event: what a Xen guest's agent writes when it was started without
// dom0's --event options (Xen does not tell a guest which events dom0 counts; seen on the real
// hypervisor in tests/qemu's qemu_xen_guest). The report says why it cannot put the samples in
// columns and what to do, instead of blaming an --event option nobody gave.
#include <fstream>
#include <iterator>

#include <catch2/catch.hpp>

#include "hvprof/report/load.h"
#include "hvprof/report/views/table.h"
#include "synthetic_session.h"
#include "temp_dir.h"

using namespace hvprof;

TEST_CASE("a session that names no event is refused with the reason and the way out", "[report]") {
  testing::TempDir dir;
  store::StoredSample sample;
  sample.ip = 0x401000;
  sample.pid = sample.tid = 100;
  sample.period = 1000000;
  const std::string session =
      testing::WriteSyntheticSession(dir.File("session"), "xen", {{100, "app", {}}}, {sample, sample});
  // The same session with its events taken out.
  const std::string path = session + "/" + store::kMetadataFile;
  std::ifstream in(path);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  auto metadata = store::ParseMetadata(text, path);
  REQUIRE(metadata.has_value());
  metadata.value().events.clear();
  std::ofstream(path, std::ios::trunc) << store::SerializeMetadata(metadata.value());

  auto profile = report::LoadProfile(session, report::LoadOptions{});
  REQUIRE(profile.has_value());
  const auto table = report::BuildTable(profile.value(), report::ReportOptions{});
  REQUIRE(!table.has_value());
  CHECK(table.error().message().find("names no event") != std::string::npos);
  CHECK(table.error().message().find("--event options") != std::string::npos);
  CHECK(table.error().message().find("--event selects none") == std::string::npos);
}
