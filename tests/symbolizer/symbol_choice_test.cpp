// The symbol-choice rule on synthetic ELF images whose layout each test picks by hand:
// sized before sizeless, GLOBAL over WEAK over LOCAL, within the same section, and nothing
// past the end of a sized symbol.

#include <elf.h>

#include <catch2/catch.hpp>

#include "elf_writer.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

using testing::Answers;
using testing::TempDir;
using testing::TestElf;
using testing::TestSymbol;

TestSymbol Sym(std::string name, uint64_t value, uint64_t size, unsigned binding = STB_GLOBAL,
               unsigned type = STT_FUNC, std::string section = ".text") {
  return TestSymbol{std::move(name), value, size, type, binding, std::move(section)};
}

// .text [0x1000, 0x2000) and .data [0x2000, 0x2100), each in its own PT_LOAD, plus a second
// loadable range [0x4000, 0x5000) that no section covers.
TestElf Layout() {
  TestElf elf;
  elf.sections = {{".text", 0x1000, 0x1000, true}, {".data", 0x2000, 0x100, false}};
  elf.loads = {{0x1000, 0x1000}, {0x2000, 0x100}, {0x4000, 0x1000}};
  elf.symbols = {
      // Sized beats a closer sizeless label.
      Sym("sized_f1", 0x1100, 0x40), Sym("label_l1", 0x1120, 0, STB_GLOBAL, STT_NOTYPE),
      // Binding at one address.
      Sym("a_local", 0x1200, 0x20, STB_LOCAL), Sym("b_weak", 0x1200, 0x20, STB_WEAK),
      Sym("c_global", 0x1200, 0x20, STB_GLOBAL), Sym("d_local", 0x1300, 0x20, STB_LOCAL),
      Sym("e_weak", 0x1300, 0x20, STB_WEAK),
      // Past the end, then a label after the end.
      Sym("g_sized", 0x1400, 0x10), Sym("m_label", 0x1450, 0, STB_LOCAL, STT_NOTYPE),
      Sym("next_func", 0x1500, 0x10),
      // A label inside a sized function does not reach past the function's end.
      Sym("h_sized", 0x1600, 0x20), Sym("n_inner_label", 0x1608, 0, STB_GLOBAL, STT_NOTYPE),
      Sym("after_h", 0x1680, 0x10),
      // Same start and binding: the smaller size wins where it covers.
      Sym("long_one", 0x1700, 0x100), Sym("short_one", 0x1700, 0x10),
      // Nested sized symbols: the closest start wins.
      Sym("outer_range", 0x1900, 0x100), Sym("inner_range", 0x1940, 0x10),
      // A label near the end of .text; .data must not inherit it.
      Sym("tail_label", 0x1f00, 0, STB_GLOBAL, STT_NOTYPE),
      Sym("data_object", 0x2040, 0x20, STB_GLOBAL, STT_OBJECT, ".data"),
      // Ignored kinds.
      Sym("abs_symbol", 0x1a00, 0x100, STB_GLOBAL, STT_NOTYPE, ""),
      Sym("file.c", 0, 0, STB_LOCAL, STT_FILE, ""),
  };
  return elf;
}

struct Expect {
  uint64_t address;
  Reason reason;
  std::string function;  // for resolved addresses
  uint64_t offset;
};

void Check(const Answers& got, const std::vector<Expect>& want) {
  REQUIRE(got.answers.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("address " << testing::Hex(want[i].address) << ": got " << got.answers[i].function()
                    << " " << ReasonName(got.answers[i].reason) << " "
                    << got.answers[i].detail);
    CHECK(got.answers[i].reason == want[i].reason);
    if (want[i].reason == Reason::kNone) {
      REQUIRE(got.answers[i].frames.size() == 1);
      CHECK(got.answers[i].function() == want[i].function);
      CHECK(got.answers[i].frames.back().offset == want[i].offset);
    } else {
      CHECK_FALSE(got.answers[i].resolved());
      CHECK_FALSE(got.answers[i].detail.empty());
    }
  }
}

const std::vector<Expect> kExpectations = {
    {0x1130, Reason::kNone, "sized_f1", 0x30},
    {0x1140, Reason::kPastSymbolEnd, "", 0},  // label_l1 lies inside sized_f1: ends with it
    {0x1205, Reason::kNone, "c_global", 0x5},
    {0x1305, Reason::kNone, "e_weak", 0x5},
    {0x140f, Reason::kNone, "g_sized", 0xf},
    {0x1410, Reason::kPastSymbolEnd, "", 0},
    {0x1420, Reason::kPastSymbolEnd, "", 0},
    {0x1460, Reason::kNone, "m_label", 0x10},
    {0x1608, Reason::kNone, "h_sized", 0x8},  // sized beats the label at the same address
    {0x1630, Reason::kPastSymbolEnd, "", 0},  // not n_inner_label
    {0x1705, Reason::kNone, "short_one", 0x5},
    {0x1750, Reason::kNone, "long_one", 0x50},
    {0x1945, Reason::kNone, "inner_range", 0x5},
    {0x1960, Reason::kNone, "outer_range", 0x60},
    {0x1a10, Reason::kPastSymbolEnd, "", 0},  // the absolute symbol is ignored
    {0x1f80, Reason::kNone, "tail_label", 0x80},
    {0x1000, Reason::kNoSymbol, "", 0},
    {0x10ff, Reason::kNoSymbol, "", 0},
    {0x2010, Reason::kNoSymbol, "", 0},  // .data: tail_label does not cross sections
    {0x2045, Reason::kNone, "data_object", 0x5},
    {0x4100, Reason::kNoSymbol, "", 0},  // loadable but in no section
    {0x0fff, Reason::kOutsideImage, "", 0},
    {0x3000, Reason::kOutsideImage, "", 0},
    {0x5000, Reason::kOutsideImage, "", 0},
    {0xffffffffffffffff, Reason::kOutsideImage, "", 0},
};

TEST_CASE("symbolizer: symbol choice follows the sized/binding/section rule", "[symbolizer][choice]") {
  TempDir dir;
  std::string path = dir.File("layout.elf");
  REQUIRE(testing::WriteTestElf(Layout(), path).empty());
  Symbolizer symbolizer;
  std::vector<uint64_t> addresses;
  for (const Expect& e : kExpectations) addresses.push_back(e.address);
  Check(testing::Resolve(&symbolizer, testing::ElfSpec(path), addresses,
                         testing::With(Detail::kFunctions)),
        kExpectations);
}

TEST_CASE("symbolizer: a load bias shifts every address and function start", "[symbolizer][choice]") {
  TempDir dir;
  std::string path = dir.File("layout.so");
  TestElf elf = Layout();
  elf.type = ET_DYN;
  REQUIRE(testing::WriteTestElf(elf, path).empty());
  const uint64_t bias = 0x7f1234500000;
  std::vector<uint64_t> addresses;
  for (const Expect& e : kExpectations) addresses.push_back(e.address + bias);
  Symbolizer symbolizer;
  Answers got = testing::Resolve(&symbolizer, testing::ElfSpec(path, bias), addresses,
                                 testing::With(Detail::kFunctions));
  std::vector<Expect> shifted = kExpectations;
  for (Expect& e : shifted) e.address += bias;
  Check(got, shifted);
  // 0xffffffffffffffff + bias wraps to a small address: still outside.
  for (size_t i = 0; i < got.answers.size(); ++i) {
    CHECK(got.answers[i].address == addresses[i]);
    if (got.answers[i].resolved()) {
      const auto& f = got.answers[i].frames.back();
      CHECK(f.start + f.offset == addresses[i]);
      CHECK(f.start >= 0x1000 + bias);
    }
  }
}

TEST_CASE("symbolizer: results come back in input order with duplicates", "[symbolizer][choice]") {
  TempDir dir;
  std::string path = dir.File("layout.elf");
  REQUIRE(testing::WriteTestElf(Layout(), path).empty());
  std::vector<uint64_t> addresses = {0x1960, 0x1130, 0x1960, 0x0fff, 0x1130, 0x1945, 0x1960};
  Symbolizer symbolizer;
  auto batch = symbolizer.Symbolize(testing::ElfSpec(path), addresses,
                                    testing::With(Detail::kFunctions));
  REQUIRE(batch);
  REQUIRE(batch.value().size() == addresses.size());
  CHECK(batch.value().unique_count() == 4);
  for (size_t i = 0; i < addresses.size(); ++i) {
    CHECK(batch.value()[i].address == addresses[i]);
    Symbolization u = batch.value().unique(batch.value().unique_index(i));
    CHECK(u.address == addresses[i]);
  }
  CHECK(batch.value()[0].frames.back().function == "outer_range");
  CHECK(batch.value()[1].frames.back().function == "sized_f1");
  CHECK(batch.value()[3].reason == Reason::kOutsideImage);
  CHECK(batch.value()[5].frames.back().function == "inner_range");
  // Unique answers are in address order.
  for (size_t u = 1; u < batch.value().unique_count(); ++u) {
    CHECK(batch.value().unique(u - 1).address < batch.value().unique(u).address);
  }
}

TEST_CASE("symbolizer: a large batch agrees with one-address batches", "[symbolizer][choice]") {
  // The batch path sorts (radix) and gallops through the table; single lookups do neither.
  TempDir dir;
  std::string path = dir.File("layout.elf");
  REQUIRE(testing::WriteTestElf(Layout(), path).empty());
  std::vector<uint64_t> addresses;
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 5000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    addresses.push_back(0xf00 + x % 0x1300);
  }
  Symbolizer symbolizer;
  Answers all = testing::Resolve(&symbolizer, testing::ElfSpec(path), addresses,
                                 testing::With(Detail::kFunctions));
  for (size_t i = 0; i < addresses.size(); i += 37) {
    Answers one = testing::Resolve(&symbolizer, testing::ElfSpec(path), {addresses[i]},
                                   testing::With(Detail::kFunctions));
    INFO(testing::Hex(addresses[i]));
    CHECK(one.answers[0].reason == all.answers[i].reason);
    CHECK(one.answers[0].function() == all.answers[i].function());
  }
}

TEST_CASE("symbolizer: a reused result answers each batch afresh, however far apart its addresses",
          "[symbolizer][choice]") {
  // Batches whose addresses span less than 4 GiB sort as packed words, others as pairs; a
  // result reused for the next batch keeps nothing of the last one.
  TempDir dir;
  std::string path = dir.File("layout.elf");
  REQUIRE(testing::WriteTestElf(Layout(), path).empty());
  const std::vector<std::vector<uint64_t>> batches = {
      {0x1960, 0x1130, 0x1960, 0x0fff, 0x1130, 0x1945},
      {0xffffffff81000000, 0x1130, 0x1945, 0x1130, 0x7f0000000000, 0x1960},
      {0x1945}};
  Symbolizer symbolizer;
  BatchResult reused;
  for (const std::vector<uint64_t>& addresses : batches) {
    auto fresh = symbolizer.Symbolize(testing::ElfSpec(path), addresses, testing::With(Detail::kFunctions));
    REQUIRE(fresh);
    const ImageSpec spec = testing::ElfSpec(path);
    REQUIRE(symbolizer.Symbolize(std::span<const ImageSpec>(&spec, 1), addresses,
                                 testing::With(Detail::kFunctions), &reused));
    REQUIRE(reused.size() == addresses.size());
    CHECK(reused.unique_count() == fresh.value().unique_count());
    CHECK(reused.images().size() == 1);
    for (size_t i = 0; i < addresses.size(); ++i) {
      INFO(testing::Hex(addresses[i]));
      CHECK(reused[i].address == addresses[i]);
      CHECK(reused[i].reason == fresh.value()[i].reason);
      CHECK(reused[i].frames.size() == fresh.value()[i].frames.size());
      if (reused[i].resolved()) CHECK(reused[i].frames.back().function == fresh.value()[i].frames.back().function);
      CHECK(reused.unique_indexes()[i] == reused.unique_index(i));
    }
    for (size_t u = 1; u < reused.unique_count(); ++u) {
      CHECK(reused.unique(u - 1).address < reused.unique(u).address);
    }
  }
  CHECK(reused[0].frames.back().function == "inner_range");
}

TEST_CASE("symbolizer: function listing has the functions of executable sections", "[symbolizer][choice]") {
  TempDir dir;
  std::string path = dir.File("layout.elf");
  REQUIRE(testing::WriteTestElf(Layout(), path).empty());
  Symbolizer symbolizer;
  auto functions = symbolizer.ListFunctions(testing::ElfSpec(path));
  REQUIRE(functions);
  std::vector<std::string> names;
  uint64_t previous = 0;
  for (const FunctionSymbol& f : functions.value()) {
    names.push_back(f.name);
    CHECK(f.start >= previous);
    previous = f.start;
    CHECK(f.section == ".text");
  }
  // STT_FUNC symbols of Layout() in .text, by address; labels, objects and ABS are not listed.
  std::vector<std::string> expected = {"sized_f1", "c_global", "b_weak",  "a_local",
                                       "e_weak",   "d_local",  "g_sized", "next_func",
                                       "h_sized",  "after_h",  "long_one", "short_one",
                                       "outer_range", "inner_range"};
  CHECK(names == expected);
  auto c_global = std::find_if(functions.value().begin(), functions.value().end(),
                               [](const FunctionSymbol& f) { return f.name == "c_global"; });
  REQUIRE(c_global != functions.value().end());
  CHECK(c_global->binding == Binding::kGlobal);
  CHECK(c_global->size == 0x20);
  CHECK(c_global->start == 0x1200);
}

TEST_CASE("symbolizer: build-id is read and checked against the expected one", "[symbolizer][choice]") {
  TempDir dir;
  std::string path = dir.File("with-id.elf");
  TestElf elf = Layout();
  elf.build_id = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04};
  REQUIRE(testing::WriteTestElf(elf, path).empty());
  Symbolizer symbolizer;
  auto info = symbolizer.Describe(testing::ElfSpec(path));
  REQUIRE(info);
  CHECK(info.value().build_id == "deadbeef01020304");

  // Upper case is accepted and normalized.
  Answers ok = testing::Resolve(
      &symbolizer, testing::WithBuildId(testing::ElfSpec(path), "DEADBEEF01020304"), {0x1130});
  CHECK(ok.answers[0].function() == "sized_f1");

  ImageSpec wrong = testing::WithBuildId(testing::ElfSpec(path), "0011223344556677");
  Answers first = testing::Resolve(&symbolizer, wrong, {0x1130, 0x1205});
  REQUIRE(first.images.size() == 1);
  CHECK(first.images[0].reason == Reason::kBuildIdMismatch);
  CHECK(first.images[0].first_report);
  CHECK(first.images[0].detail.find("deadbeef01020304") != std::string::npos);
  for (const auto& a : first.answers) CHECK(a.reason == Reason::kBuildIdMismatch);
  // Reported once per image and expected id.
  Answers again = testing::Resolve(&symbolizer, wrong, {0x1130});
  CHECK(again.images[0].reason == Reason::kBuildIdMismatch);
  CHECK_FALSE(again.images[0].first_report);

  auto bad = symbolizer.Symbolize(testing::WithBuildId(testing::ElfSpec(path), "xyz"),
                                  std::vector<uint64_t>{0x1130});
  CHECK_FALSE(bad);
}

TEST_CASE("symbolizer: an image without a build-id fails an expected one", "[symbolizer][choice]") {
  TempDir dir;
  std::string path = dir.File("no-id.elf");
  REQUIRE(testing::WriteTestElf(Layout(), path).empty());
  Symbolizer symbolizer;
  Answers got = testing::Resolve(
      &symbolizer, testing::WithBuildId(testing::ElfSpec(path), "0011"), {0x1130});
  CHECK(got.answers[0].reason == Reason::kBuildIdMismatch);
  CHECK(got.images[0].detail.find("no build-id") != std::string::npos);
}

TEST_CASE("symbolizer: a chain answers each address from the first image that holds it",
          "[symbolizer][choice]") {
  TempDir dir;
  std::string elf_path = dir.File("layout.elf");
  REQUIRE(testing::WriteTestElf(Layout(), elf_path).empty());
  dir.Write("modules.kallsyms",
            "0000000000008000 t mod_func_a\t[modx]\n"
            "0000000000008100 T mod_func_b\t[modx]\n");
  std::vector<ImageSpec> chain = {
      testing::ElfSpec(elf_path),
      testing::TextSpec(dir.File("modules.kallsyms"), ImageFormat::kKallsyms)};
  Symbolizer symbolizer;
  Answers got = testing::Resolve(&symbolizer, chain, {0x1130, 0x8010, 0x8105, 0x1410, 0x9000},
                                 testing::With(Detail::kFunctions));
  REQUIRE(got.images.size() == 2);
  CHECK(got.answers[0].function() == "sized_f1");
  CHECK(got.answers[0].image_index == 0);
  CHECK(got.answers[1].function() == "mod_func_a");
  CHECK(got.answers[1].module == "modx");
  CHECK(got.answers[1].image_index == 1);
  CHECK(got.answers[2].function() == "mod_func_b");
  CHECK(got.answers[3].reason == Reason::kPastSymbolEnd);  // the ELF answered; not passed on
  CHECK(got.answers[3].image_index == 0);
  CHECK(got.answers[4].reason == Reason::kOutsideImage);
}

}  // namespace
}  // namespace hvprof::symbolizer
