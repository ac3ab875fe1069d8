// Fixtures built from source with -g -O2 (a PIE with DWARF 4 and 5, and a shared library at a
// load bias): function names, C++ demangling, file:line and inline chains, checked against the
// fixture's own report of its addresses, the MARK lines of its source, c++filt, nm and
// eu-addr2line.

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <catch2/catch.hpp>

#include "hvprof/symbolizer/symbolizer.h"
#include "skip.h"
#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

using testing::Answer;
using testing::Answers;
using testing::FixturePaths;
using testing::FixtureReport;

std::string Basename(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

struct Fixture {
  int dwarf = 5;
  FixtureReport report;
  ImageSpec main;
  ImageSpec lib;
  std::string main_source;
  std::string lib_source;
};

Fixture LoadFixture(int dwarf) {
  Fixture f;
  f.dwarf = dwarf;
  f.report = testing::RunFixture(FixturePaths::Pie(dwarf));
  f.main = testing::ElfSpec(f.report.modules.at("main").path, f.report.modules.at("main").bias);
  f.lib = testing::ElfSpec(f.report.modules.at("lib").path, f.report.modules.at("lib").bias);
  f.main_source = FixturePaths::SourceDir() + "/fixture_main.c";
  f.lib_source = FixturePaths::SourceDir() + "/fixture_lib.c";
  return f;
}

TEST_CASE("symbolizer: fixture functions resolve by name at their entry", "[symbolizer][fixture]") {
  int dwarf = GENERATE(4, 5);
  Fixture f = LoadFixture(dwarf);
  INFO("DWARF " << dwarf);
  CHECK(std::filesystem::equivalent(f.main.path, FixturePaths::Pie(dwarf)));
  CHECK(f.main.bias != 0);  // a PIE is loaded at a bias
  Symbolizer symbolizer;
  for (const char* name : {"fixture_outer", "fixture_plain", "fixture_capture",
                           "fixture_static_helper", "main"}) {
    uint64_t address = f.report.functions.at(name);
    Answers got = testing::Resolve(&symbolizer, f.main, {address, address + 1},
                                   testing::With(Detail::kFunctions));
    INFO(name);
    CHECK(got.answers[0].function() == name);
    CHECK(got.answers[0].frames.back().offset == 0);
    CHECK(got.answers[0].frames.back().start == address);
    CHECK(got.answers[1].function() == name);
    CHECK(got.answers[1].frames.back().offset == 1);
  }
  for (const char* name : {"fixture_lib_outer", "fixture_lib_add", "lib_local_helper"}) {
    uint64_t address = f.report.functions.at(name);
    Answers got = testing::Resolve(&symbolizer, f.lib, {address}, testing::With(Detail::kFunctions));
    INFO(name);
    CHECK(got.answers[0].function() == name);
    CHECK(got.answers[0].frames.back().start == address);
  }
  // The library's addresses are not in the PIE.
  Answers outside = testing::Resolve(&symbolizer, f.main, {f.report.functions.at("fixture_lib_add")});
  CHECK(outside.answers[0].reason == Reason::kOutsideImage);
}

TEST_CASE("symbolizer: C++ names are demangled like c++filt does", "[symbolizer][fixture]") {
  Fixture f = LoadFixture(5);
  Symbolizer symbolizer;
  auto names = testing::NamesByAddress(testing::NmSymbols(f.main.path));
  for (const char* which : {"hvfix::Twice", "hvfix::Widget::Spin"}) {
    uint64_t address = f.report.functions.at(which);
    uint64_t image_address = address - f.main.bias;
    REQUIRE(names.count(image_address) == 1);
    std::string mangled;
    for (const std::string& n : names[image_address]) {
      if (n.rfind("_Z", 0) == 0) mangled = n;
    }
    REQUIRE_FALSE(mangled.empty());
    std::string demangled = testing::RunCommand("c++filt '" + mangled + "'");
    while (!demangled.empty() && demangled.back() == '\n') demangled.pop_back();
    INFO(which << ": " << mangled << " -> " << demangled);
    CHECK(demangled.find(which) != std::string::npos);
    Answers on = testing::Resolve(&symbolizer, f.main, {address},
                                  testing::With(Detail::kFunctions, true));
    CHECK(on.answers[0].function() == demangled);
    Answers off = testing::Resolve(&symbolizer, f.main, {address},
                                   testing::With(Detail::kFunctions, false));
    CHECK(off.answers[0].function() == mangled);
    auto listed = symbolizer.ListFunctions(f.main);
    REQUIRE(listed);
    CHECK(std::any_of(listed.value().begin(), listed.value().end(),
                      [&](const FunctionSymbol& s) {
                        return s.name == demangled && s.start == address;
                      }));
  }
}

void CheckFrame(const Answer::Frame& frame, const std::string& function, const std::string& file,
                int line, bool inlined) {
  INFO("frame " << frame.function << " at " << frame.file << ":" << frame.line);
  CHECK(frame.function == function);
  CHECK(Basename(frame.file) == Basename(file));
  CHECK(static_cast<int>(frame.line) == line);
  CHECK(frame.inlined == inlined);
}

TEST_CASE("symbolizer: inline chains match the fixture's source", "[symbolizer][fixture]") {
  int dwarf = GENERATE(4, 5);
  Fixture f = LoadFixture(dwarf);
  INFO("DWARF " << dwarf);
  Symbolizer symbolizer;
  // A return address minus one lies in the call instruction, inside the inlined code.
  uint64_t outer_site = f.report.sites.at("outer") - 1;
  uint64_t plain_site = f.report.sites.at("plain") - 1;
  Answers got = testing::Resolve(&symbolizer, f.main, {outer_site, plain_site},
                                 testing::With(Detail::kInlines));
  const Answer& outer = got.answers[0];
  REQUIRE(outer.frames.size() == 3);
  CHECK(outer.reason == Reason::kNone);
  CheckFrame(outer.frames[0], "fixture_leaf", f.main_source,
             testing::MarkLine(f.main_source, "leaf_call"), true);
  CheckFrame(outer.frames[1], "fixture_middle", f.main_source,
             testing::MarkLine(f.main_source, "middle_call"), true);
  CheckFrame(outer.frames[2], "fixture_outer", f.main_source,
             testing::MarkLine(f.main_source, "outer_call"), false);
  CHECK(outer.frames[2].start == f.report.functions.at("fixture_outer"));
  CHECK(outer.frames[2].offset == outer_site - f.report.functions.at("fixture_outer"));
  // Inlined frames start inside the function that holds them.
  CHECK(outer.frames[0].start >= outer.frames[2].start);
  CHECK(outer.frames[0].start + outer.frames[0].offset == outer_site);

  const Answer& plain = got.answers[1];
  REQUIRE(plain.frames.size() == 1);
  CheckFrame(plain.frames[0], "fixture_plain", f.main_source,
             testing::MarkLine(f.main_source, "plain_call"), false);

  // Without inlines: the out-of-line function with the innermost line.
  Answers lines = testing::Resolve(&symbolizer, f.main, {outer_site}, testing::With(Detail::kLines));
  REQUIRE(lines.answers[0].frames.size() == 1);
  CheckFrame(lines.answers[0].frames[0], "fixture_outer", f.main_source,
             testing::MarkLine(f.main_source, "leaf_call"), false);

  // The shared library, at its load bias.
  Answers lib = testing::Resolve(&symbolizer, f.lib, {f.report.sites.at("lib_outer") - 1},
                                 testing::With(Detail::kInlines));
  REQUIRE(lib.answers[0].frames.size() == 2);
  CheckFrame(lib.answers[0].frames[0], "lib_inner", f.lib_source,
             testing::MarkLine(f.lib_source, "lib_inner_call"), true);
  CheckFrame(lib.answers[0].frames[1], "fixture_lib_outer", f.lib_source,
             testing::MarkLine(f.lib_source, "lib_outer_call"), false);
}

// eu-addr2line -a -f -i output, per address: frames of (function, file, line, column).
struct EuFrame {
  std::string function;
  std::string file;
  int line = 0;
  int column = 0;
};

std::vector<std::vector<EuFrame>> EuAddr2line(const std::string& image,
                                              const std::vector<uint64_t>& addresses) {
  std::string input;
  for (uint64_t a : addresses) input += testing::Hex(a) + "\n";
  std::vector<std::string> lines =
      testing::SplitLines(testing::RunCommand("eu-addr2line -a -f -i -e '" + image + "'", input));
  std::vector<std::vector<EuFrame>> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("0x", 0) == 0) {
      out.emplace_back();
      continue;
    }
    if (out.empty() || i + 1 >= lines.size()) break;
    EuFrame frame;
    frame.function = lines[i].substr(0, lines[i].find(" inlined at "));
    std::string location = lines[++i];
    // FILE:LINE[:COLUMN]
    std::vector<std::string> parts;
    std::stringstream in(location);
    std::string part;
    while (std::getline(in, part, ':')) parts.push_back(part);
    if (parts.size() >= 3 && std::all_of(parts.back().begin(), parts.back().end(), ::isdigit)) {
      frame.column = std::stoi(parts.back());
      parts.pop_back();
    }
    if (parts.size() >= 2) {
      frame.line = std::stoi(parts.back());
      parts.pop_back();
    }
    for (size_t p = 0; p < parts.size(); ++p) frame.file += (p ? ":" : "") + parts[p];
    out.back().push_back(frame);
  }
  return out;
}

// The same from llvm-symbolizer -a -f -i (frames, then a blank line, per address).
std::vector<std::vector<EuFrame>> LlvmSymbolizer(const std::string& image,
                                                 const std::vector<uint64_t>& addresses) {
  std::string input;
  for (uint64_t a : addresses) input += testing::Hex(a) + "\n";
  std::vector<std::string> lines = testing::SplitLines(
      testing::RunCommand("llvm-symbolizer -a -f -i --obj='" + image + "'", input));
  std::vector<std::vector<EuFrame>> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    if (lines[i].rfind("0x", 0) == 0) {
      out.emplace_back();
      continue;
    }
    if (out.empty() || i + 1 >= lines.size()) break;
    EuFrame frame;
    frame.function = lines[i];
    std::string location = lines[++i];
    auto last = location.rfind(':');
    auto middle = location.rfind(':', last - 1);
    frame.file = location.substr(0, middle);
    frame.line = std::stoi(location.substr(middle + 1, last - middle - 1));
    frame.column = std::stoi(location.substr(last + 1));
    out.back().push_back(frame);
  }
  return out;
}

TEST_CASE("symbolizer: lines and inline chains agree with eu-addr2line",
          "[symbolizer][fixture]") {
  if (!testing::HaveTool("eu-addr2line")) {
    hvprof::testing::SkipTest("needs eu-addr2line (elfutils)");
    return;
  }
  int dwarf = GENERATE(4, 5);
  INFO("DWARF " << dwarf);
  Fixture f = LoadFixture(dwarf);
  // Every byte of the fixture's own functions, as image addresses.
  auto symbols = testing::NmSymbols(f.main.path);
  std::vector<uint64_t> image_addresses;
  for (const testing::NmSymbol& s : symbols) {
    if (s.name.rfind("fixture_", 0) != 0 || !s.has_size || (s.type != 't' && s.type != 'T')) {
      continue;
    }
    for (uint64_t a = s.address; a < s.address + s.size; ++a) image_addresses.push_back(a);
  }
  REQUIRE(image_addresses.size() > 100);
  auto expected = EuAddr2line(f.main.path, image_addresses);
  REQUIRE(expected.size() == image_addresses.size());
  // libdw 0.188's eu-addr2line finds no line for some units of clang-built fixtures (no
  // .debug_aranges); llvm-symbolizer is the reference for those addresses.
  std::vector<size_t> unknown;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::any_of(expected[i].begin(), expected[i].end(),
                    [](const EuFrame& e) { return e.file == "??"; })) {
      unknown.push_back(i);
    }
  }
  if (!unknown.empty() && testing::HaveTool("llvm-symbolizer")) {
    std::vector<uint64_t> again;
    for (size_t i : unknown) again.push_back(image_addresses[i]);
    auto llvm = LlvmSymbolizer(f.main.path, again);
    REQUIRE(llvm.size() == again.size());
    for (size_t k = 0; k < unknown.size(); ++k) expected[unknown[k]] = llvm[k];
  }
  std::vector<uint64_t> runtime;
  for (uint64_t a : image_addresses) runtime.push_back(a + f.main.bias);
  Symbolizer symbolizer;
  Answers got = testing::Resolve(&symbolizer, f.main, runtime, testing::With(Detail::kInlines));
  size_t inlined = 0;
  for (size_t i = 0; i < image_addresses.size(); ++i) {
    const Answer& a = got.answers[i];
    const auto& want = expected[i];
    INFO(testing::Hex(image_addresses[i]));
    REQUIRE(a.frames.size() == want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      INFO("frame " << k << ": " << a.frames[k].function << " at " << a.frames[k].file << ":"
                    << a.frames[k].line << ":" << a.frames[k].column << ", eu-addr2line "
                    << want[k].function << " at " << want[k].file << ":" << want[k].line << ":"
                    << want[k].column);
      CHECK(a.frames[k].function == want[k].function);
      CHECK(a.frames[k].file == want[k].file);
      CHECK(static_cast<int>(a.frames[k].line) == want[k].line);
      CHECK(static_cast<int>(a.frames[k].column) == want[k].column);
    }
    inlined += a.frames.size() > 1;
  }
  CHECK(inlined > 10);  // the fixture's inlining was exercised
}

}  // namespace
}  // namespace hvprof::symbolizer
