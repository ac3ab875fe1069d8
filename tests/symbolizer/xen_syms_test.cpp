// The real hypervisor image from xen-hypervisor-4.17-amd64-dbg, compared with eu-addr2line run
// here, with nm, and with the .map file shipped beside it.

#include <filesystem>
#include <random>
#include <sstream>

#include <catch2/catch.hpp>

#include "hvprof/symbolizer/symbolizer.h"
#include "skip.h"
#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

using testing::Answers;

const char* const kXenSyms = "/usr/lib/debug/boot/xen-syms-4.17-amd64";
const char* const kXenMap = "/usr/lib/debug/boot/xen-syms-4.17-amd64.map";

bool NeedXen() {
  if (!std::filesystem::exists(kXenSyms)) {
    return hvprof::testing::SkipTest(std::string("needs ") + kXenSyms +
                             " (xen-hypervisor-4.17-amd64-dbg, scripts/install-deps.sh)");
  }
  return false;
}

// eu-addr2line -S answers "name+0xoffset" (or "??") per address.
std::vector<std::string> EuSymbols(const std::vector<uint64_t>& addresses) {
  std::string input;
  for (uint64_t a : addresses) input += testing::Hex(a) + "\n";
  std::vector<std::string> lines =
      testing::SplitLines(testing::RunCommand(std::string("eu-addr2line -S -e ") + kXenSyms, input));
  std::vector<std::string> out;
  for (size_t i = 0; i < lines.size(); i += 2) out.push_back(lines[i]);  // then "??:0"
  return out;
}

TEST_CASE("symbolizer: xen-syms functions match eu-addr2line", "[symbolizer][xen]") {
  if (NeedXen()) return;
  if (!testing::HaveTool("eu-addr2line")) {
    hvprof::testing::SkipTest("needs eu-addr2line (elfutils)");
    return;
  }
  auto symbols = testing::NmSymbols(kXenSyms);
  auto names = testing::NamesByAddress(symbols);
  // A sample of text symbols: an address inside each sized one, its first byte, and the byte
  // just past its end (which belongs to nothing unless another symbol starts there).
  std::mt19937_64 random(7);
  std::vector<uint64_t> addresses;
  for (const testing::NmSymbol& s : symbols) {
    if ((s.type != 't' && s.type != 'T') || random() % 8 != 0) continue;
    addresses.push_back(s.address);
    if (s.has_size && s.size > 0) {
      addresses.push_back(s.address + random() % s.size);
      addresses.push_back(s.address + s.size);
    }
  }
  REQUIRE(addresses.size() > 500);
  std::vector<std::string> eu = EuSymbols(addresses);
  REQUIRE(eu.size() == addresses.size());
  Symbolizer symbolizer;
  Answers got = testing::Resolve(&symbolizer, testing::ElfSpec(kXenSyms), addresses,
                                 testing::With(Detail::kFunctions));
  size_t resolved = 0;
  size_t unresolved = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    const auto& a = got.answers[i];
    INFO(testing::Hex(addresses[i]) << ": eu-addr2line " << eu[i] << ", ours "
                                    << (a.resolved() ? a.function() : "??") << " "
                                    << ReasonName(a.reason) << " " << a.detail);
    if (eu[i] == "??") {
      CHECK_FALSE(a.resolved());
      ++unresolved;
      continue;
    }
    REQUIRE(a.resolved());
    // eu-addr2line prints name+0xoffset (+0x0 omitted): compare where the symbol starts, and
    // the name up to aliases at that address (the two may pick different aliases).
    auto plus = eu[i].rfind("+0x");
    std::string eu_name = plus == std::string::npos ? eu[i] : eu[i].substr(0, plus);
    uint64_t eu_offset = plus == std::string::npos ? 0 : std::stoull(eu[i].substr(plus + 1), nullptr, 16);
    CHECK(a.frames.back().offset == eu_offset);
    CHECK(a.frames.back().start == addresses[i] - eu_offset);
    CHECK(names[a.frames.back().start].count(a.function()) == 1);
    CHECK(names[a.frames.back().start].count(eu_name) == 1);
    ++resolved;
  }
  CHECK(resolved > 500);
  CHECK(unresolved > 10);  // bytes past the end of functions with nothing after them
}

struct MapSymbol {
  uint64_t address;
  char type;
  std::string name;  // without Xen's "file#" prefix for local symbols
};

std::vector<MapSymbol> ReadMap() {
  std::vector<MapSymbol> out;
  for (const std::string& line : testing::SplitLines(testing::ReadFile(kXenMap))) {
    std::istringstream in(line);
    std::string address, type, name;
    if (!(in >> address >> type >> name)) continue;
    auto hash = name.find('#');
    if (hash != std::string::npos) name = name.substr(hash + 1);
    out.push_back({std::stoull(address, nullptr, 16), type[0], name});
  }
  return out;
}

TEST_CASE("symbolizer: xen-syms agrees with the .map file beside it", "[symbolizer][xen]") {
  if (NeedXen()) return;
  if (!std::filesystem::exists(kXenMap)) {
    hvprof::testing::SkipTest(std::string("needs ") + kXenMap);
    return;
  }
  std::vector<MapSymbol> map = ReadMap();
  REQUIRE(map.size() > 1000);
  std::map<uint64_t, std::set<std::string>> map_names;
  for (const MapSymbol& m : map) map_names[m.address].insert(m.name);

  // Every text symbol of the map resolves, at its own address, to a symbol starting there whose
  // name the map lists at that address.
  std::vector<uint64_t> addresses;
  for (const MapSymbol& m : map) {
    if (m.type == 't' || m.type == 'T') addresses.push_back(m.address);
  }
  Symbolizer symbolizer;
  Answers got = testing::Resolve(&symbolizer, testing::ElfSpec(kXenSyms), addresses,
                                 testing::With(Detail::kFunctions));
  size_t checked = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    const auto& a = got.answers[i];
    if (!a.resolved()) continue;  // e.g. end markers at the end of a section
    INFO(testing::Hex(addresses[i]) << " " << a.function());
    CHECK(a.frames.back().start == addresses[i]);
    CHECK(map_names[addresses[i]].count(a.function()) == 1);
    ++checked;
  }
  CHECK(checked > addresses.size() * 9 / 10);

  // The same map read as a System.map gives the same start one byte into each sized function
  // (unless the map has another symbol exactly there).
  std::vector<uint64_t> inside;
  size_t n = 0;
  for (const testing::NmSymbol& s : testing::NmSymbols(kXenSyms)) {
    if ((s.type == 't' || s.type == 'T') && s.has_size && s.size > 1 && n++ % 3 == 0 &&
        map_names.count(s.address + 1) == 0) {
      inside.push_back(s.address + 1);
    }
  }
  Answers from_elf = testing::Resolve(&symbolizer, testing::ElfSpec(kXenSyms), inside,
                                      testing::With(Detail::kFunctions));
  Answers from_map = testing::Resolve(
      &symbolizer, testing::TextSpec(kXenMap, ImageFormat::kSystemMap), inside,
      testing::With(Detail::kFunctions));
  size_t agreed = 0;
  for (size_t i = 0; i < inside.size(); ++i) {
    if (!from_elf.answers[i].resolved()) continue;
    INFO(testing::Hex(inside[i]));
    REQUIRE(from_map.answers[i].resolved());
    CHECK(from_map.answers[i].frames.back().start == from_elf.answers[i].frames.back().start);
    ++agreed;
  }
  CHECK(agreed > 500);
}

TEST_CASE("symbolizer: xen-syms function listing has readelf's functions", "[symbolizer][xen]") {
  if (NeedXen()) return;
  Symbolizer symbolizer;
  auto functions = symbolizer.ListFunctions(testing::ElfSpec(kXenSyms));
  REQUIRE(functions);
  std::set<std::pair<uint64_t, std::string>> listed;
  for (const FunctionSymbol& f : functions.value()) {
    listed.insert({f.start, f.name});
    CHECK((f.section == ".text" || f.section == ".init.text"));
  }
  // Exactly readelf's STT_FUNC symbols.
  auto expected = testing::ReadelfFunctions(kXenSyms);
  CHECK(expected.size() > 3000);
  CHECK(listed == expected);
  CHECK(functions.value().size() == expected.size());

  auto info = symbolizer.Describe(testing::ElfSpec(kXenSyms));
  REQUIRE(info);
  CHECK(info.value().elf_type == "exec");
  CHECK(info.value().build_id.size() == 40);
  CHECK(info.value().symbol_table == ".symtab");
  CHECK_FALSE(info.value().has_dwarf);
}

TEST_CASE("symbolizer: xen-syms has no DWARF: lines report it once", "[symbolizer][xen]") {
  if (NeedXen()) return;
  Symbolizer symbolizer;
  auto functions = symbolizer.ListFunctions(testing::ElfSpec(kXenSyms));
  REQUIRE(functions);
  uint64_t address = functions.value()[functions.value().size() / 2].start;
  Answers first = testing::Resolve(&symbolizer, testing::ElfSpec(kXenSyms), {address},
                                   testing::With(Detail::kInlines));
  CHECK(first.answers[0].reason == Reason::kNoLineInfo);
  CHECK(first.answers[0].resolved());
  REQUIRE(first.images[0].warnings.size() == 1);
  CHECK(first.images[0].warnings[0].find("no DWARF") != std::string::npos);
  Answers second = testing::Resolve(&symbolizer, testing::ElfSpec(kXenSyms), {address},
                                    testing::With(Detail::kInlines));
  CHECK(second.images[0].warnings.empty());
}

}  // namespace
}  // namespace hvprof::symbolizer
