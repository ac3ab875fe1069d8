// System.map and /proc/kallsyms: the text parser, lookups with modules and a KASLR offset, and
// the running kernel's /proc/kallsyms when it is readable.

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>

#include <catch2/catch.hpp>

#include "hvprof/symbolizer/kernel_symbols.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "skip.h"
#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

using testing::Answers;
using testing::TempDir;

TEST_CASE("symbolizer: kallsyms lines parse into symbols with modules and bindings", "[symbolizer][kallsyms]") {
  std::string text =
      "ffffffff81000000 T _stext\n"
      "0xffffffff81000010 t local_fn\r\n"
      "  ffffffff81000020 W weak_fn  \n"
      "\n"
      "ffffffff82000000 D some_data\n"
      "0000000000000000 A absolute_thing\n"
      "ffffffffc0a00000 t kvm_thing\t[kvm]\n";
  auto parsed = ParseKernelSymbols(text, ImageFormat::kKallsyms);
  REQUIRE(parsed);
  const auto& s = parsed.value().symbols;
  REQUIRE(s.size() == 5);  // the absolute symbol is dropped
  CHECK(parsed.value().lines == 6);
  CHECK(parsed.value().malformed == 0);
  CHECK(s[0].address == 0xffffffff81000000);
  CHECK(s[0].name == "_stext");
  CHECK(s[0].binding == Binding::kGlobal);
  CHECK(s[0].is_text);
  CHECK(s[1].address == 0xffffffff81000010);
  CHECK(s[1].binding == Binding::kLocal);
  CHECK(s[2].binding == Binding::kWeak);
  CHECK(s[2].name == "weak_fn");
  CHECK_FALSE(s[3].is_text);
  CHECK(s[4].module == "kvm");
  CHECK(s[4].name == "kvm_thing");
  CHECK_FALSE(parsed.value().all_addresses_zero);
}

TEST_CASE("symbolizer: malformed kallsyms lines are skipped and described", "[symbolizer][kallsyms]") {
  std::string text =
      "ffffffff81000000 T good_one\n"
      "zzzzzzzzzzzzzzzz T bad_address\n"
      "ffffffff81000010\n"
      "ffffffff81000020 T name extra tokens\n"
      "ffffffff81000030 t modfn kvm]\n"
      "ffffffff81000040 TT two_letter_type\n"
      "ffffffff81000050 % odd_type\n"
      "123456789abcdef01 T too_long_address\n"
      "ffffffff81000060 t good_two\n";
  auto parsed = ParseKernelSymbols(text, ImageFormat::kKallsyms);
  REQUIRE(parsed);
  CHECK(parsed.value().symbols.size() == 2);
  CHECK(parsed.value().malformed == 7);
  REQUIRE(parsed.value().problems.size() == 5);
  CHECK(parsed.value().problems[0].rfind("line 2:", 0) == 0);
  CHECK(parsed.value().problems[0].find("not hex") != std::string::npos);
  CHECK(parsed.value().problems[1].rfind("line 3:", 0) == 0);
  CHECK(parsed.value().problems[3].find("[name]") != std::string::npos);

  auto hopeless = ParseKernelSymbols("this is not\na symbol map\n", ImageFormat::kSystemMap);
  REQUIRE_FALSE(hopeless);
  CHECK(hopeless.error().message().find("line 1") != std::string::npos);

  auto empty = ParseKernelSymbols("", ImageFormat::kKallsyms);
  REQUIRE(empty);
  CHECK(empty.value().symbols.empty());

  auto binary = ParseKernelSymbols(std::string("\x7f\x00\x01\xff garbage\n", 14),
                                   ImageFormat::kKallsyms);
  CHECK_FALSE(binary);
}

TEST_CASE("symbolizer: kallsyms without privilege (all zero) is reported", "[symbolizer][kallsyms]") {
  TempDir dir;
  dir.Write("kallsyms", "0000000000000000 T _stext\n0000000000000000 t foo\n");
  Symbolizer symbolizer;
  Answers got = testing::Resolve(
      &symbolizer, testing::TextSpec(dir.File("kallsyms"), ImageFormat::kKallsyms),
      {0x10});
  CHECK(got.answers[0].reason == Reason::kNoSymbols);
  CHECK(got.images[0].detail.find("kptr_restrict") != std::string::npos);
}

// A small kernel: core text, a hole, two modules, data.
const char* const kKallsyms =
    "ffffffff81000000 T _stext\n"
    "ffffffff81000000 t startup_local\n"
    "ffffffff81000100 T do_work\n"
    "ffffffff81000100 W do_work_weak_alias\n"
    "ffffffff81000200 t helper\n"
    "ffffffff81000300 T _etext\n"
    "ffffffff82000000 D some_data\n"
    "ffffffffc0001000 t kvm_entry\t[kvm]\n"
    "ffffffffc0001080 T kvm_exit\t[kvm]\n"
    "ffffffffc0005000 t other_fn\t[other]\n";

TEST_CASE("symbolizer: kallsyms lookups pick the right symbol and module", "[symbolizer][kallsyms]") {
  TempDir dir;
  dir.Write("kallsyms", kKallsyms);
  Symbolizer symbolizer;
  ImageSpec spec = testing::TextSpec(dir.File("kallsyms"), ImageFormat::kKallsyms);
  Answers got = testing::Resolve(&symbolizer, spec,
                                 {0xffffffff81000010, 0xffffffff81000105, 0xffffffff810002ff,
                                  0xffffffffc0001090, 0xffffffffc0001010, 0xffffffffc0002000,
                                  0xffffffffc0005004, 0xffffffff80000000, 0xffffffffc0006000},
                                 testing::With(Detail::kFunctions));
  CHECK(got.answers[0].function() == "_stext");  // global over local at one address
  CHECK(got.answers[0].frames.back().offset == 0x10);
  CHECK(got.answers[0].module.empty());
  CHECK(got.answers[1].function() == "do_work");  // global over weak
  CHECK(got.answers[2].function() == "helper");
  CHECK(got.answers[3].function() == "kvm_exit");
  CHECK(got.answers[3].module == "kvm");
  CHECK(got.answers[4].function() == "kvm_entry");
  // kvm_exit is the last kvm symbol and the next one belongs to another module: it reaches to
  // the end of its page, not to other_fn.
  CHECK(got.answers[5].reason == Reason::kOutsideImage);
  CHECK(got.answers[6].function() == "other_fn");
  CHECK(got.answers[6].module == "other");
  CHECK(got.answers[7].reason == Reason::kOutsideImage);
  CHECK(got.answers[8].reason == Reason::kOutsideImage);

  auto functions = symbolizer.ListFunctions(spec);
  REQUIRE(functions);
  std::vector<std::string> names;
  for (const FunctionSymbol& f : functions.value()) names.push_back(f.name);
  std::vector<std::string> expected = {"_stext", "startup_local", "do_work", "do_work_weak_alias",
                                       "helper", "_etext", "kvm_entry", "kvm_exit", "other_fn"};
  CHECK(names == expected);
  CHECK(functions.value()[2].size == 0x100);
  CHECK(functions.value()[2].size_inferred);
  CHECK(functions.value()[6].module == "kvm");
}

TEST_CASE("symbolizer: System.map takes a KASLR offset", "[symbolizer][kallsyms]") {
  TempDir dir;
  dir.Write("System.map",
            "ffffffff81000000 T _text\nffffffff81000100 T schedule\nffffffff81000200 T _etext\n");
  const uint64_t kaslr = 0x2a000000;
  Symbolizer symbolizer;
  Answers got = testing::Resolve(
      &symbolizer,
      testing::TextSpec(dir.File("System.map"), ImageFormat::kSystemMap, kaslr),
      {0xffffffff81000150 + kaslr, 0xffffffff81000150}, testing::With(Detail::kLines));
  CHECK(got.answers[0].function() == "schedule");
  CHECK(got.answers[0].frames.back().start == 0xffffffff81000100 + kaslr);
  CHECK(got.answers[0].reason == Reason::kNoLineInfo);  // lines were asked for; maps have none
  CHECK(got.answers[1].reason == Reason::kOutsideImage);
}

TEST_CASE("symbolizer: a kallsyms file with malformed lines warns once", "[symbolizer][kallsyms]") {
  TempDir dir;
  dir.Write("kallsyms", std::string(kKallsyms) + "not a line\n");
  Symbolizer symbolizer;
  ImageSpec spec = testing::TextSpec(dir.File("kallsyms"), ImageFormat::kKallsyms);
  Answers first = testing::Resolve(&symbolizer, spec, {0xffffffff81000105});
  CHECK(first.answers[0].function() == "do_work");
  REQUIRE(first.images[0].warnings.size() == 1);
  CHECK(first.images[0].warnings[0].find("1 malformed line skipped") != std::string::npos);
  CHECK(first.images[0].warnings[0].find("line 11") != std::string::npos);
  Answers second = testing::Resolve(&symbolizer, spec, {0xffffffff81000105});
  CHECK(second.images[0].warnings.empty());

  dir.Write("garbage", "hello world\nthis is text\n");
  Answers garbage = testing::Resolve(
      &symbolizer, testing::TextSpec(dir.File("garbage"), ImageFormat::kKallsyms),
      {0x1000});
  CHECK(garbage.answers[0].reason == Reason::kMalformedSymbolFile);
  CHECK(garbage.images[0].detail.find("line 1") != std::string::npos);
}

TEST_CASE("symbolizer: the running kernel's /proc/kallsyms resolves its own symbols",
          "[symbolizer][kallsyms][system]") {
  std::ifstream in("/proc/kallsyms");
  if (!in) {
    hvprof::testing::SkipTest("needs /proc/kallsyms to be readable");
    return;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = ParseKernelSymbols(text.str(), ImageFormat::kKallsyms);
  REQUIRE(parsed);
  if (parsed.value().symbols.empty() || parsed.value().all_addresses_zero) {
    hvprof::testing::SkipTest("needs /proc/kallsyms with addresses (run as root, kptr_restrict)");
    return;
  }
  // Independent expectations straight from the file: names per address, and for a sample of
  // text symbols, an address halfway to the next symbol of the same module.
  struct Entry {
    uint64_t address;
    std::string name;
    std::string module;
    char type;
  };
  std::vector<Entry> entries;
  for (const std::string& line : testing::SplitLines(text.str())) {
    std::istringstream fields(line);
    std::string address, type, name, module;
    fields >> address >> type >> name >> module;
    if (type.size() != 1 || std::string("aAUN").find(type[0]) != std::string::npos) continue;
    if (module.size() > 2) module = module.substr(1, module.size() - 2);
    entries.push_back({std::stoull(address, nullptr, 16), name, module, type[0]});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.address < b.address; });
  std::map<uint64_t, std::set<std::string>> names;
  for (const Entry& e : entries) names[e.address].insert(e.name);
  std::vector<uint64_t> addresses;
  std::vector<size_t> which;
  std::mt19937_64 random(42);
  for (size_t i = 0; i + 1 < entries.size() && addresses.size() < 2000; ++i) {
    const Entry& e = entries[i];
    const Entry& next = entries[i + 1];
    if (std::string("tT").find(e.type) == std::string::npos) continue;
    if (next.address <= e.address || next.module != e.module) continue;
    if (random() % 20 != 0) continue;
    addresses.push_back(e.address + (next.address - e.address) / 2);
    which.push_back(i);
  }
  REQUIRE(addresses.size() > 50);
  Symbolizer symbolizer;
  Answers got = testing::Resolve(
      &symbolizer, testing::TextSpec("/proc/kallsyms", ImageFormat::kKallsyms),
      addresses, testing::With(Detail::kFunctions));
  size_t module_symbols = 0;
  for (size_t k = 0; k < addresses.size(); ++k) {
    const Entry& e = entries[which[k]];
    INFO(testing::Hex(addresses[k]) << " expected " << e.name);
    REQUIRE(got.answers[k].resolved());
    CHECK(got.answers[k].frames.back().start == e.address);
    CHECK(names[e.address].count(got.answers[k].function()) == 1);
    CHECK(got.answers[k].module == e.module);
    module_symbols += !e.module.empty();
  }
  INFO(module_symbols << " of the sampled symbols were in modules");
  SUCCEED();
}

}  // namespace
}  // namespace hvprof::symbolizer
