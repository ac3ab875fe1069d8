// Separate debuginfo: the system libc's debug file found by build-id (libc6-dbg), a fixture's
// debug file under a test debug root, and a .gnu_debuglink with its CRC.

#include <filesystem>
#include <sstream>

#include <catch2/catch.hpp>

#include "hvprof/symbolizer/symbolizer.h"
#include "skip.h"
#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

using testing::Answers;
using testing::TempDir;

// The build-id as readelf (binutils) prints it.
std::string ReadelfBuildId(const std::string& path) {
  for (const std::string& line : testing::SplitLines(testing::RunCommand("readelf -n '" + path + "'"))) {
    auto at = line.find("Build ID: ");
    if (at != std::string::npos) return line.substr(at + 10);
  }
  return "";
}

std::string Run(const std::string& command) {
  int status = 0;
  std::string out = testing::RunCommand(command, "", &status);
  REQUIRE(status == 0);
  return out;
}

TEST_CASE("symbolizer: the system libc's debug file is found by build-id", "[symbolizer][debuginfo]") {
  if (!std::filesystem::exists("/usr/lib/debug/.build-id") &&
      hvprof::testing::SkipTest("needs libc6-dbg (no /usr/lib/debug/.build-id)")) {
    return;
  }
  testing::FixtureReport report = testing::RunFixture(testing::FixturePaths::Pie(5));
  const auto& libc = report.modules.at("libc");
  std::string build_id = ReadelfBuildId(libc.path);
  REQUIRE(build_id.size() > 2);
  std::string debug = "/usr/lib/debug/.build-id/" + build_id.substr(0, 2) + "/" +
                      build_id.substr(2) + ".debug";
  // libc6-dbg is installed (install-deps.sh), so libc's debug file must be found: one of
  // another libc's build means the package does not match the library.
  INFO("libc6-dbg must match " << libc.path << "'s build-id " << build_id);
  REQUIRE(std::filesystem::exists(debug));
  Symbolizer symbolizer;
  ImageSpec spec = testing::ElfSpec(libc.path, libc.bias);
  auto info = symbolizer.Describe(spec);
  REQUIRE(info);
  CHECK(info.value().build_id == build_id);
  CHECK(info.value().debug_file == debug);
  CHECK(info.value().symbol_file == debug);  // the full .symtab comes from the debug file
  CHECK(info.value().has_dwarf);

  // Exported functions, at the addresses the fixture process saw.
  auto names = testing::NamesByAddress(testing::NmSymbols(debug));
  for (const char* name : {"qsort", "getpid"}) {
    uint64_t address = report.functions.at(name);
    Answers got = testing::Resolve(&symbolizer, spec, {address}, testing::With(Detail::kLines));
    INFO(name);
    REQUIRE(got.answers[0].resolved());
    CHECK(got.answers[0].frames.back().start == address);
    CHECK(names[address - libc.bias].count(got.answers[0].function()) == 1);
    CHECK_FALSE(got.answers[0].frames.back().file.empty());

    // Same file:line as eu-addr2line, which also finds the debug file by build-id.
    if (testing::HaveTool("eu-addr2line")) {
      auto eu = testing::SplitLines(testing::RunCommand(
          "eu-addr2line -e '" + libc.path + "' " + testing::Hex(address - libc.bias)));
      REQUIRE(!eu.empty());
      const auto& frame = got.answers[0].frames.back();
      std::string ours = frame.file + ":" + std::to_string(frame.line);
      CHECK(eu[0].rfind(ours, 0) == 0);
    }
  }

  // A local function, only in the debug file's .symtab: every byte of it.
  uint64_t local = 0;
  uint64_t size = 0;
  std::string local_name;
  for (const testing::NmSymbol& s : testing::NmSymbols(debug)) {
    if (s.type == 't' && s.has_size && s.size > 16 && s.name.find('.') == std::string::npos &&
        names[s.address].size() == 1) {
      local = s.address;
      size = s.size;
      local_name = s.name;
      break;
    }
  }
  REQUIRE(local != 0);
  std::vector<uint64_t> addresses;
  for (uint64_t a = local; a < local + size; ++a) addresses.push_back(a + libc.bias);
  Answers got = testing::Resolve(&symbolizer, spec, addresses, testing::With(Detail::kFunctions));
  for (const auto& a : got.answers) {
    INFO(testing::Hex(a.address));
    CHECK(a.function() == local_name);
  }
}

TEST_CASE("symbolizer: a stripped image uses the debug file under a configured root",
          "[symbolizer][debuginfo]") {
  TempDir dir;
  std::string original = testing::FixturePaths::Pie(5);
  std::string stripped = dir.File("stripped");
  std::string debug = dir.File("full.debug");
  Run("objcopy --only-keep-debug '" + original + "' '" + debug + "'");
  Run("objcopy --strip-all '" + original + "' '" + stripped + "'");
  std::string build_id = ReadelfBuildId(stripped);
  REQUIRE(build_id.size() > 2);
  std::string root = dir.File("debugroot");
  std::filesystem::create_directories(root + "/.build-id/" + build_id.substr(0, 2));
  std::string placed = root + "/.build-id/" + build_id.substr(0, 2) + "/" + build_id.substr(2) +
                       ".debug";
  std::filesystem::rename(debug, placed);

  testing::FixtureReport report = testing::RunFixture(original);
  const uint64_t bias = report.modules.at("main").bias;
  const uint64_t site = report.sites.at("outer") - 1;
  std::string source = testing::FixturePaths::SourceDir() + "/fixture_main.c";

  SymbolizerOptions options;
  options.debug_roots = {root};
  Symbolizer symbolizer(options);
  ImageSpec spec = testing::ElfSpec(stripped, bias);
  auto info = symbolizer.Describe(spec);
  REQUIRE(info);
  CHECK(info.value().debug_file == placed);
  Answers got = testing::Resolve(&symbolizer, spec, {site}, testing::With(Detail::kInlines));
  REQUIRE(got.answers[0].frames.size() == 3);
  CHECK(got.answers[0].frames[0].function == "fixture_leaf");
  CHECK(static_cast<int>(got.answers[0].frames[0].line) == testing::MarkLine(source, "leaf_call"));
  CHECK(got.answers[0].frames[2].function == "fixture_outer");

  // Without the root the image is stripped, and says so.
  SymbolizerOptions nowhere;
  nowhere.debug_roots = {dir.File("empty-root")};
  Symbolizer blind(nowhere);
  Answers none = testing::Resolve(&blind, spec, {site});
  CHECK(none.answers[0].reason == Reason::kStripped);

  // An explicit debug file works too; one with another build-id is rejected with a warning.
  Symbolizer explicit_file;
  Answers direct = testing::Resolve(&explicit_file, testing::WithDebugFile(testing::ElfSpec(stripped, bias), placed),
                                    {site}, testing::With(Detail::kFunctions));
  CHECK(direct.answers[0].function() == "fixture_outer");
  std::string other_debug = dir.File("other.debug");
  Run("objcopy --only-keep-debug '" + testing::FixturePaths::Pie(4) + "' '" + other_debug + "'");
  Symbolizer wrong;
  Answers rejected = testing::Resolve(&wrong, testing::WithDebugFile(testing::ElfSpec(stripped, bias), other_debug),
                                      {site});
  CHECK(rejected.answers[0].reason == Reason::kStripped);
  bool warned = false;
  for (const auto& w : rejected.images[0].warnings) warned |= w.find("build-id") != std::string::npos;
  CHECK(warned);

  // One with no build-id at all is rejected too (issue 38: a debuginfod server's answer without
  // one renamed every sample of the image): nothing shows it is this image's.
  std::string anonymous = dir.File("anonymous.debug");
  Run("objcopy --remove-section=.note.gnu.build-id '" + placed + "' '" + anonymous + "'");
  REQUIRE(ReadelfBuildId(anonymous).empty());
  Symbolizer unproven;
  Answers refused = testing::Resolve(&unproven, testing::WithDebugFile(testing::ElfSpec(stripped, bias), anonymous),
                                     {site});
  CHECK(refused.answers[0].reason == Reason::kStripped);
  bool said = false;
  for (const auto& w : refused.images[0].warnings) said |= w.find("it has no build-id") != std::string::npos;
  CHECK(said);
}

TEST_CASE("symbolizer: a .gnu_debuglink is followed and its CRC checked", "[symbolizer][debuginfo]") {
  TempDir dir;
  std::string original = testing::FixturePaths::PieWithoutBuildId();
  REQUIRE(ReadelfBuildId(original).empty());
  std::string image = dir.File("prog");
  std::string debug = dir.File("prog.debug");
  Run("objcopy --only-keep-debug '" + original + "' '" + debug + "'");
  Run("objcopy --strip-all --add-gnu-debuglink='" + debug + "' '" + original + "' '" + image +
      "'");
  testing::FixtureReport report = testing::RunFixture(original);
  const uint64_t bias = report.modules.at("main").bias;
  const uint64_t entry = report.functions.at("fixture_static_helper");

  SymbolizerOptions options;
  options.debug_roots = {dir.File("no-root")};
  {
    Symbolizer symbolizer(options);
    ImageSpec spec = testing::ElfSpec(image, bias);
    Answers got = testing::Resolve(&symbolizer, spec, {entry}, testing::With(Detail::kLines));
    CHECK(got.answers[0].function() == "fixture_static_helper");
    CHECK(testing::Resolve(&symbolizer, spec, {entry}).answers[0].frames.back().line > 0);
    CHECK(symbolizer.Describe(spec).value().debug_file == debug);
  }
  // In .debug/ beside the image.
  std::filesystem::create_directories(dir.File(".debug"));
  std::filesystem::rename(debug, dir.File(".debug/prog.debug"));
  {
    Symbolizer symbolizer(options);
    Answers got = testing::Resolve(&symbolizer, testing::ElfSpec(image, bias), {entry});
    CHECK(got.answers[0].function() == "fixture_static_helper");
  }
  // A debug file whose CRC does not match is rejected.
  std::string tampered = testing::ReadFile(dir.File(".debug/prog.debug"));
  tampered.back() ^= 0x55;
  dir.Write(".debug/prog.debug", tampered);
  {
    Symbolizer symbolizer(options);
    Answers got = testing::Resolve(&symbolizer, testing::ElfSpec(image, bias), {entry});
    CHECK(got.answers[0].reason == Reason::kStripped);
    bool warned = false;
    for (const auto& w : got.images[0].warnings) warned |= w.find("CRC") != std::string::npos;
    CHECK(warned);
  }
}

}  // namespace
}  // namespace hvprof::symbolizer
