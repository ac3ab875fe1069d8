// Continuous mode's windows on disk (store/windows.h): their names, their listing, and the budget
// that drops raw samples before whole windows, oldest first, and never the newest.
#include <algorithm>
#include <filesystem>
#include <map>

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

// A window of `raw_bytes` of raw samples and, unless `aggregate` says otherwise, an aggregate that
// stands for them (kStale: one written before the last samples): what the budget weighs, not
// samples a report could read.
enum class WithAggregate { kYes, kNo, kStale };
store::WindowEntry MakeWindow(const store::SessionPaths& paths, uint64_t index, uint64_t raw_bytes,
                              WithAggregate aggregate = WithAggregate::kYes) {
  store::SessionMetadata m;
  m.session_id = "0123456789abcdef0123456789abcdef";
  m.platform = "sim";
  m.samples_stored = index + 1;
  m.samples_file_bytes = raw_bytes;
  m.context = store::ContextSummary{.processes = 1, .images = 1, .domains = {0}};
  m.window = store::WindowRecord{.series = m.session_id, .index = index, .start_ns = kStart + index * kMinute,
                                 .end_ns = kStart + (index + 1) * kMinute, .clock = "realtime"};
  const std::string name = store::WindowName(index, m.window->start_ns);
  const std::string directory = paths.Saved(name);
  REQUIRE(MakeDirectories(directory).has_value());
  REQUIRE(WriteFileAtomically(directory + "/" + store::kMetadataFile, store::SerializeMetadata(m)).has_value());
  REQUIRE(WriteFileAtomically(directory + "/" + store::kSamplesFile, std::string(raw_bytes, 'x')).has_value());
  REQUIRE(WriteFileAtomically(directory + "/" + store::kContextFile, std::string(raw_bytes / 10, 'c')).has_value());
  if (aggregate != WithAggregate::kNo) {
    store::Aggregate counted;
    counted.entries.push_back({.key = {.ip = 0xffffffff81000000, .pid = store::kAnyProcess, .domain = 0, .mode = 1,
                                       .event = 0},
                               .count = index + 1});
    counted.samples = index + 1;
    counted.has_regions = true;
    counted.source_bytes = aggregate == WithAggregate::kStale ? raw_bytes / 2 : raw_bytes;
    REQUIRE(store::WriteAggregate(directory + "/" + store::kAggregateFile, counted).has_value());
  }
  return {.name = name, .directory = directory, .window = *m.window};
}

std::vector<store::WindowEntry> Listed(const store::SessionPaths& paths) { return store::ListWindows(paths).windows; }

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
  // A symbolic link named as a window is not followed.
  std::filesystem::create_directory_symlink(paths.Saved(store::WindowName(0, kStart)), paths.Saved("window-link"));
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
  std::vector<store::WindowEntry> listed = Listed(paths);
  REQUIRE(listed.size() == 6);

  SECTION("within the budget nothing goes") {
    const store::PruneOutcome kept = store::PruneWindows(listed, {.bytes = 7 * one, .age_ns = 0}, now, 0);
    CHECK(kept.removed == 0);
    CHECK(kept.thinned == 0);
    CHECK(kept.kept == 6);
    CHECK(listed.size() == 6);
    CHECK(kept.problems.empty());
  }
  SECTION("over it, raw samples go first, oldest first") {
    // Dropping one window's raw samples saves most of it.
    const store::PruneOutcome pruned = store::PruneWindows(listed, {.bytes = 11 * one / 2, .age_ns = 0}, now, 0);
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
    CHECK(listed[0].window.raw_dropped);
    CHECK(listed[0].bytes < one / 10);
  }
  SECTION("other bytes count, and past every window's raw samples the oldest windows go whole") {
    const store::PruneOutcome pruned =
        store::PruneWindows(listed, {.bytes = one + one / 4 + 1, .age_ns = 0}, now, one / 4);
    CHECK(pruned.thinned == 5);  // the newest keeps its raw samples
    CHECK(pruned.removed == 5);
    CHECK(pruned.kept == 1);
    CHECK(pruned.bytes + one / 4 <= one + one / 4 + 1);
    CHECK(!Exists(windows[0].directory));
    CHECK(Exists(windows[5].directory + "/" + store::kSamplesFile));
    REQUIRE(listed.size() == 1);
    CHECK(listed[0].window.index == 5);
    // Nothing half removed is left, nor listed.
    CHECK(Listed(paths).size() == 1);
    for (const auto& entry : std::filesystem::directory_iterator(paths.samples_dir())) {
      CHECK(!entry.path().filename().string().starts_with(".removing-"));
    }
  }
  SECTION("a budget smaller than one window keeps the newest") {
    const store::PruneOutcome pruned = store::PruneWindows(listed, {.bytes = 1, .age_ns = 0}, now, 0);
    CHECK(pruned.removed == 5);
    CHECK(pruned.kept == 1);
    CHECK(Exists(windows[5].directory));
  }
  SECTION("by age, whole windows go, the newest kept") {
    const store::PruneOutcome pruned = store::PruneWindows(listed, {.bytes = 0, .age_ns = 3 * kMinute}, now, 0);
    CHECK(pruned.removed == 2);  // ended at +1 and +2 minutes; the oldest kept ends at +3, 3 minutes ago
    CHECK(!Exists(windows[1].directory));
    CHECK(Exists(windows[2].directory));
    const store::PruneOutcome all =
        store::PruneWindows(listed, {.bytes = 0, .age_ns = kMinute}, now + 100 * kMinute, 0);
    CHECK(all.kept == 1);
    CHECK(Exists(windows[5].directory));
  }
  SECTION("a removal a crash cut short is finished by the next prune") {
    std::filesystem::rename(windows[0].directory, paths.Saved(".removing-" + windows[0].name));
    std::vector<store::WindowEntry> rest = Listed(paths);
    CHECK(rest.size() == 5);
    const store::PruneOutcome pruned = store::PruneWindows(rest, {.bytes = 0, .age_ns = 0}, now, 0);
    CHECK(pruned.problems.empty());
    CHECK(!Exists(paths.Saved(".removing-" + windows[0].name)));
  }
}

TEST_CASE("a window whose aggregate does not stand for its samples keeps them: it goes whole", "[windows]") {
  TempDir dir;
  const store::SessionPaths paths{dir.path()};
  const WithAggregate kind = GENERATE(WithAggregate::kNo, WithAggregate::kStale);
  const store::WindowEntry bare = MakeWindow(paths, 0, 1 << 20, kind);
  MakeWindow(paths, 1, 1 << 20);
  auto refused = store::DropRawSamples(bare.directory);
  REQUIRE(!refused.has_value());
  CHECK(refused.error().kind() == ErrorKind::kBadState);
  CHECK(Exists(bare.directory + "/" + store::kSamplesFile));
  std::vector<store::WindowEntry> listed = Listed(paths);
  const store::PruneOutcome pruned =
      store::PruneWindows(listed, {.bytes = store::DiskBytes(bare.directory) + 4096, .age_ns = 0}, kStart, 0);
  CHECK(pruned.thinned == 0);
  CHECK(pruned.removed == 1);
  CHECK(pruned.problems.empty());
  CHECK(!Exists(bare.directory));
}

TEST_CASE("raw samples a crash left after their window said they were dropped go at the next prune", "[windows]") {
  TempDir dir;
  const store::SessionPaths paths{dir.path()};
  const store::WindowEntry first = MakeWindow(paths, 0, 1 << 20);
  MakeWindow(paths, 1, 1 << 20);
  REQUIRE(store::DropRawSamples(first.directory).has_value());
  // As if hvprofd died between writing session.json and removing the files.
  REQUIRE(WriteFileAtomically(first.directory + "/" + store::kSamplesFile, std::string(1 << 20, 'x')).has_value());
  std::vector<store::WindowEntry> listed = Listed(paths);
  REQUIRE(listed[0].window.raw_dropped);
  const store::PruneOutcome pruned =
      store::PruneWindows(listed, {.bytes = store::DiskBytes(listed[1].directory) + (256 << 10), .age_ns = 0}, kStart, 0);
  CHECK(!Exists(first.directory + "/" + store::kSamplesFile));
  CHECK(Exists(first.directory));
  CHECK(pruned.removed == 0);
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

TEST_CASE("aggregates merge: images renumbered by path and build-id, equal keys added, stacks merged",
          "[windows][aggregate]") {
  const uint64_t kernel = 0xffffffff81000000;
  store::Aggregate a;
  a.images = {{1, "/usr/lib/libc.so.6", "aa"}, {2, "/usr/bin/app", "bb"}};
  a.entries = {{{.ip = store::ImageWord(1, 0x100), .pid = store::kAnyProcess, .domain = 0, .mode = 0, .event = 0}, 3},
               {{.ip = store::ImageWord(2, 0x200), .pid = store::kAnyProcess, .domain = 0, .mode = 0, .event = 0}, 4},
               {{.ip = kernel, .pid = store::kAnyProcess, .domain = 0, .mode = 1, .event = 0}, 5}};
  a.samples = 12;
  a.has_regions = true;
  a.has_stacks = true;
  a.stack_words = {store::ImageWord(2, 0x200), store::ImageWord(1, 0x100)};
  a.stacks = {{.key = {.pid = store::kAnyProcess, .domain = 0, .mode = 0}, .first = 0, .length = 2, .count = 4}};
  store::Aggregate b;
  // The same images under other numbers, one more, and a word naming an image b does not list.
  b.images = {{1, "/usr/bin/app", "bb"}, {5, "/usr/lib/libc.so.6", "aa"}, {6, "/usr/lib/libz.so.1", "cc"}};
  b.entries = {{{.ip = store::ImageWord(5, 0x100), .pid = store::kAnyProcess, .domain = 0, .mode = 0, .event = 0}, 10},
               {{.ip = store::ImageWord(6, 0x300), .pid = store::kAnyProcess, .domain = 0, .mode = 0, .event = 0}, 1},
               {{.ip = store::ImageWord(9, 0x400), .pid = store::kAnyProcess, .domain = 0, .mode = 0, .event = 0}, 2},
               {{.ip = kernel, .pid = store::kAnyProcess, .domain = 0, .mode = 1, .event = 0}, 7}};
  b.samples = 20;
  b.has_regions = true;
  b.has_stacks = true;
  b.stack_words = {store::ImageWord(1, 0x200), store::ImageWord(5, 0x100)};
  b.stacks = {{.key = {.pid = store::kAnyProcess, .domain = 0, .mode = 0}, .first = 0, .length = 2, .count = 6}};

  auto merged = store::MergeAggregates({a, b});
  REQUIRE(merged.has_value());
  const store::Aggregate& m = merged.value();
  CHECK(m.samples == 32);
  REQUIRE(m.images.size() == 3);
  std::map<std::string, uint32_t> id;
  for (const store::AggregateImage& image : m.images) id[image.path] = image.id;
  std::map<uint64_t, uint64_t> counts;
  uint64_t total = 0;
  for (const store::AggregateEntry& entry : m.entries) {
    counts[entry.key.ip] += entry.count;
    total += entry.count;
  }
  CHECK(total == 32);
  CHECK(counts[store::ImageWord(id["/usr/lib/libc.so.6"], 0x100)] == 13);
  CHECK(counts[store::ImageWord(id["/usr/bin/app"], 0x200)] == 4);
  CHECK(counts[store::ImageWord(id["/usr/lib/libz.so.1"], 0x300)] == 1);
  CHECK(counts[kernel] == 12);
  // The word of an image b did not list names no merged image.
  CHECK(counts[store::ImageWord(store::kMaxImageWordImage, 0x400)] == 2);
  CHECK(std::is_sorted(m.entries.begin(), m.entries.end(),
                       [](const store::AggregateEntry& x, const store::AggregateEntry& y) { return x.key < y.key; }));
  // The two stacks are one stack of both windows' samples.
  REQUIRE(m.stacks.size() == 1);
  CHECK(m.stacks[0].count == 10);
  const auto words = m.Addresses(m.stacks[0]);
  REQUIRE(words.size() == 2);
  CHECK(words[0] == store::ImageWord(id["/usr/bin/app"], 0x200));
  CHECK(words[1] == store::ImageWord(id["/usr/lib/libc.so.6"], 0x100));
  // A part without stacks: the merge has none.
  b.has_stacks = false;
  CHECK_FALSE(store::MergeAggregates({a, b}).value().has_stacks);
}
