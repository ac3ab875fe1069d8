// The image cache: bounded by count and bytes, failures cached until the file changes, and
// results that outlive eviction.

#include <elf.h>

#include <catch2/catch.hpp>

#include "elf_writer.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

using testing::TempDir;

std::string WriteImage(const TempDir& dir, const std::string& name, const std::string& function) {
  testing::TestElf elf;
  elf.sections = {{".text", 0x1000, 0x1000, true}};
  elf.symbols = {{function, 0x1000, 0x100, STT_FUNC, STB_GLOBAL, ".text"}};
  std::string path = dir.File(name);
  REQUIRE(testing::WriteTestElf(elf, path).empty());
  return path;
}

TEST_CASE("symbolizer: the cache keeps at most max_cached_images", "[symbolizer][cache]") {
  TempDir dir;
  SymbolizerOptions options;
  options.max_cached_images = 2;
  Symbolizer symbolizer(options);
  std::vector<std::string> paths = {WriteImage(dir, "a", "func_a"), WriteImage(dir, "b", "func_b"),
                                    WriteImage(dir, "c", "func_c")};
  const std::vector<uint64_t> address = {0x1010};
  auto first = symbolizer.Symbolize(testing::ElfSpec(paths[0]), address);
  REQUIRE(first);
  REQUIRE(symbolizer.Symbolize(testing::ElfSpec(paths[1]), address));
  REQUIRE(symbolizer.Symbolize(testing::ElfSpec(paths[2]), address));
  CacheStats stats = symbolizer.cache_stats();
  CHECK(stats.images == 2);
  CHECK(stats.evictions == 1);
  CHECK(stats.opens == 3);
  // The evicted image's answer is still readable: results keep their images alive.
  CHECK(first.value()[0].frames.back().function == "func_a");
  // Using it again opens it again; using "c" again is a hit.
  REQUIRE(symbolizer.Symbolize(testing::ElfSpec(paths[0]), address));
  CHECK(symbolizer.cache_stats().opens == 4);
  REQUIRE(symbolizer.Symbolize(testing::ElfSpec(paths[0]), address));
  CHECK(symbolizer.cache_stats().opens == 4);
  CHECK(symbolizer.cache_stats().hits >= 1);
  symbolizer.ClearCache();
  CHECK(symbolizer.cache_stats().images == 0);
  CHECK(first.value()[0].frames.back().function == "func_a");
}

TEST_CASE("symbolizer: the cache is bounded by bytes but keeps the image in use", "[symbolizer][cache]") {
  TempDir dir;
  SymbolizerOptions options;
  options.max_cached_bytes = 1;
  Symbolizer symbolizer(options);
  std::string a = WriteImage(dir, "a", "func_a");
  std::string b = WriteImage(dir, "b", "func_b");
  auto got = testing::Resolve(&symbolizer, testing::ElfSpec(a), {0x1010});
  CHECK(got.answers[0].function() == "func_a");
  CHECK(symbolizer.cache_stats().images == 1);
  got = testing::Resolve(&symbolizer, testing::ElfSpec(b), {0x1010});
  CHECK(got.answers[0].function() == "func_b");
  CHECK(symbolizer.cache_stats().images == 1);
  CHECK(symbolizer.cache_stats().evictions == 1);
}

TEST_CASE("symbolizer: a changed file is opened again", "[symbolizer][cache]") {
  TempDir dir;
  Symbolizer symbolizer;
  std::string path = WriteImage(dir, "image", "old_name");
  CHECK(testing::Resolve(&symbolizer, testing::ElfSpec(path), {0x1010}).answers[0].function() ==
        "old_name");
  // Replace the file (new inode), as a package upgrade would.
  std::string fresh = WriteImage(dir, "image.new", "new_name");
  REQUIRE(std::rename(fresh.c_str(), path.c_str()) == 0);
  CHECK(testing::Resolve(&symbolizer, testing::ElfSpec(path), {0x1010}).answers[0].function() ==
        "new_name");
  CHECK(symbolizer.cache_stats().opens == 2);
}

TEST_CASE("symbolizer: a missing image is reported once, then found when it appears", "[symbolizer][cache]") {
  TempDir dir;
  Symbolizer symbolizer;
  std::string path = dir.File("later");
  auto first = testing::Resolve(&symbolizer, testing::ElfSpec(path), {0x1010, 0x1020});
  CHECK(first.answers[0].reason == Reason::kUnreadableFile);
  CHECK(first.images[0].first_report);
  auto second = testing::Resolve(&symbolizer, testing::ElfSpec(path), {0x1010});
  CHECK_FALSE(second.images[0].first_report);
  CHECK(symbolizer.cache_stats().opens == 1);
  WriteImage(dir, "later", "arrived");
  auto third = testing::Resolve(&symbolizer, testing::ElfSpec(path), {0x1010});
  CHECK(third.answers[0].function() == "arrived");
  CHECK(symbolizer.cache_stats().opens == 2);
}

TEST_CASE("symbolizer: DWARF tables are built only when lines are asked for", "[symbolizer][cache]") {
  Symbolizer symbolizer;
  ImageSpec pie = testing::ElfSpec(testing::FixturePaths::Pie(5));
  testing::FixtureReport report = testing::RunFixture(pie.path);
  pie.bias = report.modules.at("main").bias;
  uint64_t address = report.functions.at("fixture_outer");
  testing::Resolve(&symbolizer, pie, {address}, testing::With(Detail::kFunctions));
  uint64_t functions_only = symbolizer.cache_stats().bytes;
  auto lines = testing::Resolve(&symbolizer, pie, {address}, testing::With(Detail::kInlines));
  CHECK(lines.answers[0].frames.back().line != 0);
  uint64_t with_lines = symbolizer.cache_stats().bytes;
  CHECK(with_lines > functions_only);
  testing::Resolve(&symbolizer, pie, {address}, testing::With(Detail::kInlines));
  CHECK(symbolizer.cache_stats().bytes == with_lines);
  CHECK(symbolizer.cache_stats().opens == 1);
}

}  // namespace
}  // namespace hvprof::symbolizer
