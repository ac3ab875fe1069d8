// Reports of JIT code from a session's copies of a perf map and a jitdump: names, code replaced
// at the same addresses during the session (each sample named by the code its time found),
// hostile names escaped, and damaged copies.
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/table.h"
#include "hvprof/report/writers/text.h"
#include "jitdump_writer.h"
#include "synthetic_session.h"
#include "temp_dir.h"

using namespace hvprof;

namespace {

constexpr uint32_t kPid = 100;

std::vector<store::StoredSample> Samples(uint64_t ip, uint64_t first_time, size_t count) {
  std::vector<store::StoredSample> samples(count);
  for (size_t i = 0; i < count; ++i) {
    samples[i].ip = ip;
    samples[i].time_ns = first_time + i;
    samples[i].pid = samples[i].tid = kPid;
    samples[i].period = 1000000;
  }
  return samples;
}

// A linux session of one process with no file mappings (all its code JIT-compiled), with the
// given copies in jit/.
std::string WriteSession(const testing::TempDir& dir, const std::string& platform, const std::string& perf_map,
                         const std::vector<std::byte>& jitdump) {
  std::vector<store::StoredSample> samples;
  for (auto part : {Samples(0x5150, 100, 30),    // before "second" replaced "first" at 500
                    Samples(0x5150, 600, 10),    // after
                    Samples(0x1080, 100, 20),    // the perf map's recompiled code
                    Samples(0x2004, 100, 3),     // a name with escape sequences
                    Samples(0x9000, 100, 5)}) {  // nobody's code
    samples.insert(samples.end(), part.begin(), part.end());
  }
  const std::string session = testing::WriteSyntheticSession(dir.File("session"), platform, {{kPid, "node", {}}}, samples);
  std::filesystem::create_directories(session + "/jit");
  std::ofstream(session + "/jit/0-100-7.map") << perf_map;
  std::ofstream(session + "/jit/0-100-7.dump", std::ios::binary)
      .write(reinterpret_cast<const char*>(jitdump.data()), static_cast<std::streamsize>(jitdump.size()));
  const std::string path = session + "/" + store::kMetadataFile;
  auto metadata = store::ParseMetadata(ReadFileToString(path).value(), path);
  REQUIRE(metadata.has_value());
  metadata.value().jit = {{0, kPid, 7, "perf-map", "/tmp/perf-100.map", "jit/0-100-7.map", perf_map.size(), false, ""},
                          {0, kPid, 7, "jitdump", "/srv/jit-100.dump", "jit/0-100-7.dump", jitdump.size(), false, ""}};
  REQUIRE(WriteFileAtomically(path, store::SerializeMetadata(metadata.value())).has_value());
  return session;
}

std::vector<std::byte> Dump() {
  testing::JitDumpWriter writer(kPid);
  writer.CodeLoad(50, 0x5000, 0x200, "JS:*first");
  writer.CodeLoad(500, 0x5100, 0x200, "JS:*second");
  return writer.data();
}

const std::string kMap = "1000 100 JS:~old\n1000 100 JS:*recompiled\n2000 10 evil\x1b[2J\x07name\nnot a line\n";

// Samples per symbol name.
std::map<std::string, uint64_t> BySymbol(const report::Profile& profile) {
  std::map<std::string, uint64_t> counts;
  for (const report::Entry& entry : profile.entries()) counts[profile.symbols()[entry.symbol].name] += entry.count;
  return counts;
}

}  // namespace

TEST_CASE("jit report: each sample is named by the JIT code its time found at its address", "[report][jit]") {
  testing::TempDir dir;
  const std::string session = WriteSession(dir, "linux", kMap, Dump());
  auto profile = report::LoadProfile(session, report::LoadOptions{});
  REQUIRE(profile.has_value());
  const auto counts = BySymbol(profile.value());
  CHECK(counts.at("JS:*first") == 30);
  CHECK(counts.at("JS:*second") == 10);
  CHECK(counts.at("JS:*recompiled") == 20);  // the later line of the perf map
  CHECK_FALSE(counts.contains("JS:~old"));
  CHECK(counts.at("[unknown in jit (pid 100)]") == 5);
  CHECK(counts.at("evil\x1b[2J\x07name") == 3);
  for (const report::Entry& entry : profile.value().entries()) {
    CHECK(profile.value().images()[entry.image].name == "jit (pid 100)");
  }
  const auto& notes = profile.value().metadata().notes;
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& note) {
    return note.find("named by the code its time found") != std::string::npos;
  }));
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& note) {
    return note.find("1 malformed entries skipped") != std::string::npos;
  }));

  // Printed, the hostile name reaches no terminal as control characters.
  report::ReportOptions symbols;
  symbols.view = report::View::kSymbol;
  auto table = report::BuildTable(profile.value(), symbols);
  REQUIRE(table.has_value());
  const std::string text = report::FormatText(profile.value(), table.value(), symbols);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\x07') == std::string::npos);
  CHECK(text.find("JS:*second") != std::string::npos);

  CHECK(profile.value().timings().samples_passes == 1);

  // Time slices (what a diff measures spread with) still add up to each row's samples, the
  // pieces of a split address each its own, counted in the same one pass.
  report::LoadOptions sliced_options;
  sliced_options.time_slices = 4;
  auto sliced = report::LoadProfile(session, sliced_options);
  REQUIRE(sliced.has_value());
  CHECK(BySymbol(sliced.value()) == counts);
  CHECK(sliced.value().timings().samples_passes == 1);
  // More slices than an aggregate can hold is refused, saying how many it can.
  sliced_options.time_slices = 65;
  auto too_many = report::LoadProfile(session, sliced_options);
  REQUIRE_FALSE(too_many.has_value());
  CHECK(too_many.error().kind() == hvprof::ErrorKind::kInvalidArgument);
  CHECK(too_many.error().message().find("at most 64 time slices") != std::string::npos);
  REQUIRE(sliced.value().time_slices() == 4);
  const std::vector<uint32_t>& slices = sliced.value().slice_counts();
  REQUIRE(slices.size() == sliced.value().entries().size() * 4);
  for (size_t e = 0; e < sliced.value().entries().size(); ++e) {
    uint64_t sum = 0;
    for (size_t k = 0; k < 4; ++k) sum += slices[e * 4 + k];
    CHECK(sum == sliced.value().entries()[e].count);
  }
}

TEST_CASE("jit report: where the clocks cannot be compared, the latest code names an address", "[report][jit]") {
  testing::TempDir dir;
  // Xen's sample clock is not the jitdump's CLOCK_MONOTONIC.
  const std::string session = WriteSession(dir, "xen", kMap, Dump());
  auto profile = report::LoadProfile(session, report::LoadOptions{});
  REQUIRE(profile.has_value());
  const auto counts = BySymbol(profile.value());
  CHECK(counts.at("JS:*second") == 40);
  CHECK_FALSE(counts.contains("JS:*first"));
}

TEST_CASE("jit report: damaged copies are said, and the rest is still reported", "[report][jit]") {
  testing::TempDir dir;
  std::vector<std::byte> junk(100, std::byte(0x5a));
  const std::string session = WriteSession(dir, "linux", kMap, junk);
  auto profile = report::LoadProfile(session, report::LoadOptions{});
  REQUIRE(profile.has_value());
  const auto& problems = profile.value().problems();
  CHECK(std::any_of(problems.begin(), problems.end(), [](const std::string& problem) {
    return problem.find("is not one: magic") != std::string::npos;
  }));
  CHECK(BySymbol(profile.value()).at("JS:*recompiled") == 20);
}
