// Continuous mode's windows on disk (store/windows.h): their names, their listing, and the budget
// that drops raw samples before whole windows, oldest first, and never the newest.
#include <filesystem>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/units.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/windows.h"
#include "temp_dir.h"

using namespace hvprof;
using hvprof::testing::TempDir;

namespace {

constexpr uint64_t kMinute = 60'000'000'000;
constexpr uint64_t kStart = 1'796'000'000'000'000'000;  // 2026-11-30

// A window of `raw_bytes` of raw samples (and, with `aggregate`, an aggregate of a tenth of it):
// what the budget weighs, not samples a report could read.
store::WindowEntry MakeWindow(const store::SessionPaths& paths, uint64_t index, uint64_t raw_bytes, bool aggregate = true) {
  store::SessionMetadata m;
  m.session_id = "0123456789abcdef0123456789abcdef";
  m.platform = "sim";
  m.samples_stored = index + 1;
  m.window = store::WindowRecord{.series = m.session_id, .index = index, .start_ns = kStart + index * kMinute,
                                 .end_ns = kStart + (index + 1) * kMinute, .clock = "realtime"};
  const std::string name = store::WindowName(index, m.window->start_ns);
  const std::string directory = paths.Saved(name);
  REQUIRE(MakeDirectories(directory).has_value());
  REQUIRE(WriteFileAtomically(directory + "/" + store::kMetadataFile, store::SerializeMetadata(m)).has_value());
  REQUIRE(WriteFileAtomically(directory + "/" + store::kSamplesFile, std::string(raw_bytes, 'x')).has_value());
  REQUIRE(WriteFileAtomically(directory + "/" + store::kContextFile, std::string(raw_bytes / 10, 'c')).has_value());
  if (aggregate) {
    REQUIRE(WriteFileAtomically(directory + "/" + store::kAggregateFile, std::string(raw_bytes / 10, 'a')).has_value());
  }
  return {.name = name, .directory = directory, .window = *m.window};
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

}  // namespace

TEST_CASE("window names sort by index and say when the window started, in UTC", "[windows]") {
  CHECK(store::WindowName(42, 1'796'000'000'000'000'000) == "window-00000042-20261130T005320Z");
  CHECK(store::WindowName(7, 0) < store::WindowName(10, 0));
  CHECK(store::ValidateSessionName(store::WindowName(123456789, kStart)).has_value());
}

TEST_CASE("windows are listed by index, and a directory named as one that is not is said and left alone", "[windows]") {
  TempDir dir;
  const store::SessionPaths paths{dir.path()};
  for (uint64_t i : {2, 0, 11, 1}) MakeWindow(paths, i, 4096);
  REQUIRE(MakeDirectories(paths.Saved("window-junk")).has_value());
  REQUIRE(MakeDirectories(paths.Saved("saved-by-hand")).has_value());
  const store::WindowList list = store::ListWindows(paths);
  REQUIRE(list.windows.size() == 4);
  CHECK(list.windows[0].window.index == 0);
  CHECK(list.windows[1].window.index == 1);
  CHECK(list.windows[2].window.index == 2);
  CHECK(list.windows[3].window.index == 11);
  CHECK(list.windows[3].samples == 12);
  CHECK(list.windows[0].bytes >= 4096);
  REQUIRE(list.problems.size() == 1);
  CHECK(list.problems[0].find("window-junk") != std::string::npos);
  CHECK(Exists(paths.Saved("window-junk")));
}

TEST_CASE("the budget drops the oldest windows' raw samples first, then the oldest windows, never the newest",
          "[windows]") {
  TempDir dir;
  const store::SessionPaths paths{dir.path()};
  std::vector<store::WindowEntry> windows;
  for (uint64_t i = 0; i < 6; ++i) windows.push_back(MakeWindow(paths, i, 1 << 20));
  const uint64_t one = store::DiskBytes(windows[0].directory);
  const uint64_t now = kStart + 6 * kMinute;

  SECTION("within the budget nothing goes") {
    const store::PruneOutcome kept = store::PruneWindows(paths, {.bytes = 7 * one, .age_ns = 0}, now, 0);
    CHECK(kept.removed == 0);
    CHECK(kept.thinned == 0);
    CHECK(kept.kept == 6);
    CHECK(kept.problems.empty());
  }
  SECTION("over it, raw samples go first, oldest first") {
    // Dropping one window's raw samples saves most of it.
    const store::PruneOutcome pruned = store::PruneWindows(paths, {.bytes = 11 * one / 2, .age_ns = 0}, now, 0);
    CHECK(pruned.removed == 0);
    CHECK(pruned.thinned == 1);
    CHECK(pruned.bytes <= 11 * one / 2);
    CHECK(!Exists(windows[0].directory + "/" + store::kSamplesFile));
    CHECK(!Exists(windows[0].directory + "/" + store::kContextFile));
    CHECK(Exists(windows[0].directory + "/" + store::kAggregateFile));
    CHECK(Exists(windows[1].directory + "/" + store::kSamplesFile));
    auto opened = store::OpenSession(windows[0].directory);
    REQUIRE(opened.has_value());
    CHECK(opened.value().metadata.window->raw_dropped);
  }
  SECTION("other bytes count, and past every window's raw samples the oldest windows go whole") {
    const store::PruneOutcome pruned = store::PruneWindows(paths, {.bytes = 3 * one / 2, .age_ns = 0}, now, one / 4);
    CHECK(pruned.thinned == 5);  // the newest keeps its raw samples
    CHECK(pruned.removed >= 1);
    CHECK(pruned.bytes + one / 4 <= 3 * one / 2);
    CHECK(!Exists(windows[0].directory));
    CHECK(Exists(windows[5].directory + "/" + store::kSamplesFile));
    CHECK(pruned.kept == 6 - pruned.removed);
  }
  SECTION("a budget smaller than one window keeps the newest") {
    const store::PruneOutcome pruned = store::PruneWindows(paths, {.bytes = 1, .age_ns = 0}, now, 0);
    CHECK(pruned.removed == 5);
    CHECK(pruned.kept == 1);
    CHECK(Exists(windows[5].directory));
  }
  SECTION("by age, whole windows go, the newest kept") {
    const store::PruneOutcome pruned = store::PruneWindows(paths, {.bytes = 0, .age_ns = 3 * kMinute}, now, 0);
    CHECK(pruned.removed == 2);  // ended at +1 and +2 minutes; the oldest kept ends at +3, 3 minutes ago
    CHECK(!Exists(windows[1].directory));
    CHECK(Exists(windows[2].directory));
    const store::PruneOutcome all = store::PruneWindows(paths, {.bytes = 0, .age_ns = kMinute}, now + 100 * kMinute, 0);
    CHECK(all.kept == 1);
    CHECK(Exists(windows[5].directory));
  }
}

TEST_CASE("a window without an aggregate keeps its raw samples: it goes whole", "[windows]") {
  TempDir dir;
  const store::SessionPaths paths{dir.path()};
  const store::WindowEntry bare = MakeWindow(paths, 0, 1 << 20, /*aggregate=*/false);
  MakeWindow(paths, 1, 1 << 20);
  auto refused = store::DropRawSamples(bare.directory);
  REQUIRE(!refused.has_value());
  CHECK(refused.error().kind() == ErrorKind::kBadState);
  CHECK(Exists(bare.directory + "/" + store::kSamplesFile));
  const store::PruneOutcome pruned =
      store::PruneWindows(paths, {.bytes = store::DiskBytes(bare.directory) + 4096, .age_ns = 0}, kStart, 0);
  CHECK(pruned.thinned == 0);
  CHECK(pruned.removed == 1);
  CHECK(pruned.problems.empty());
}

TEST_CASE("durations and sizes as the status prints them", "[units]") {
  CHECK(ParseDurationNs("7d").value() == 7 * 86'400'000'000'000);
  CHECK(ParseDurationNs("12h").value() == 12 * 3'600'000'000'000);
  CHECK(FormatDuration(7 * 86'400'000'000'000) == "7d");
  CHECK(FormatDuration(9'000'000'000'000) == "2h30m");
  CHECK(FormatDuration(250'000'000) == "250ms");
  CHECK(FormatBytes(37) == "37 B");
  CHECK(FormatBytes(uint64_t{2} << 30) == "2.0 GiB");
  CHECK(FormatBytes(uint64_t{300} << 20) == "300 MiB");
  CHECK(FormatLocalTime(0) == "?");
}
