// A session that names no event: what a Xen guest's agent writes when it was started without
// dom0's --event options (Xen does not tell a guest which events dom0 counts; seen on the real
// hypervisor in tests/qemu). Its samples are still reported, in one unnamed column per counter
// they used, as the stack views take counter 0.
#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/table.h"
#include "synthetic_session.h"
#include "temp_dir.h"

using namespace hvprof;

TEST_CASE("a session that names no event is reported by counter", "[report]") {
  testing::TempDir dir;
  std::vector<store::StoredSample> samples(3);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].ip = 0x401000;
    samples[i].pid = samples[i].tid = 100;
    samples[i].period = 1000000;
    samples[i].event = i == 0 ? 1 : 0;  // one sample of counter 1, two of counter 0
  }
  const std::string session =
      testing::WriteSyntheticSession(dir.File("session"), "xen", {{100, "app", {}}}, samples);
  // The same session with its events taken out.
  const std::string path = session + "/" + store::kMetadataFile;
  auto text = ReadFileToString(path);
  REQUIRE(text.has_value());
  auto metadata = store::ParseMetadata(text.value(), path);
  REQUIRE(metadata.has_value());
  metadata.value().events.clear();
  REQUIRE(WriteFileAtomically(path, store::SerializeMetadata(metadata.value())).has_value());

  auto profile = report::LoadProfile(session, report::LoadOptions{});
  REQUIRE(profile.has_value());
  const auto table = report::BuildTable(profile.value(), report::ReportOptions{});
  INFO((table ? std::string() : table.error().message()));
  REQUIRE(table.has_value());
  REQUIRE(table.value().columns.size() == 2);
  CHECK(table.value().columns[0].event == "counter 0");
  CHECK(table.value().columns[0].total == 2);
  CHECK(table.value().columns[1].event == "counter 1");
  CHECK(table.value().columns[1].total == 1);
}
