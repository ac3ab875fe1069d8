// Address input parsing and the text / JSON answer formats.

#include <elf.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "elf_writer.h"
#include "hvprof/symbolizer/output.h"
#include "test_support.h"

namespace hvprof::symbolizer {
namespace {

TEST_CASE("symbolizer: hex addresses parse with and without 0x", "[symbolizer][output]") {
  uint64_t v = 0;
  CHECK(ParseHexAddress("0x1f", &v));
  CHECK(v == 0x1f);
  CHECK(ParseHexAddress("1F", &v));
  CHECK(v == 0x1f);
  CHECK(ParseHexAddress("ffffffffffffffff", &v));
  CHECK(v == 0xffffffffffffffff);
  CHECK(ParseHexAddress("0XABC", &v));
  CHECK(v == 0xabc);
  for (const char* bad : {"", "0x", "g", "12345678901234567", " 12", "0x-1", "1 2"}) {
    INFO(bad);
    CHECK_FALSE(ParseHexAddress(bad, &v));
  }
}

TEST_CASE("symbolizer: address lines parse in chunks, keeping invalid lines in place", "[symbolizer][output]") {
  ParsedAddresses parsed;
  std::string text = "0x10\n  20 \r\n\nnope\n30";
  size_t consumed = ParseAddressLines(text, false, &parsed);
  CHECK(consumed == text.size() - 2);
  CHECK(parsed.addresses == std::vector<uint64_t>{0x10, 0x20});
  REQUIRE(parsed.invalid.size() == 1);
  CHECK(parsed.invalid[0].before == 2);
  CHECK(parsed.invalid[0].text == "nope");
  consumed = ParseAddressLines(std::string_view(text).substr(consumed), true, &parsed);
  CHECK(consumed == 2);
  CHECK(parsed.addresses == std::vector<uint64_t>{0x10, 0x20, 0x30});
}

Frame MakeFrame(std::string_view function, uint64_t start, uint64_t offset,
                std::string_view file = {}, uint32_t line = 0, uint32_t column = 0,
                bool inlined = false) {
  Frame f;
  f.function = function;
  f.function_start = start;
  f.offset = offset;
  f.file = file;
  f.line = line;
  f.column = column;
  f.inlined = inlined;
  return f;
}

TEST_CASE("symbolizer: text answers read like addr2line, one line each", "[symbolizer][output]") {
  std::vector<Frame> frames = {MakeFrame("leaf", 0x1010, 4, "a.c", 10, 5, true),
                               MakeFrame("outer", 0x1000, 0x14, "a.c", 30, 7)};
  Symbolization s;
  s.address = 0x1014;
  s.frames = std::span<const Frame>(frames).subspan(1);
  std::string out;
  AppendSymbolization(s, {}, &out);
  CHECK(out == "outer+0x14 at a.c:30:7\n");
  out.clear();
  s.frames = frames;
  AppendSymbolization(s, testing::Style(OutputStyle::kText, true), &out);
  CHECK(out == "0x1014: leaf at a.c:10:5 inlined into outer+0x14 at a.c:30:7\n");

  std::vector<Frame> bare = {MakeFrame("func", 0x1000, 0x14)};
  s.frames = bare;
  out.clear();
  AppendSymbolization(s, {}, &out);
  CHECK(out == "func+0x14\n");
  s.reason = Reason::kNoLineInfo;
  s.module = "kvm";
  out.clear();
  AppendSymbolization(s, {}, &out);
  CHECK(out == "func+0x14 at ??:0 [kvm]\n");

  Symbolization failed;
  failed.address = 0x20;
  failed.reason = Reason::kPastSymbolEnd;
  failed.detail = "0x20 is beyond the end of f";
  out.clear();
  AppendSymbolization(failed, {}, &out);
  CHECK(out == "?? (past-symbol-end: 0x20 is beyond the end of f)\n");
  out.clear();
  AppendInvalidInput("zz", {}, &out);
  CHECK(out == "?? (invalid-input: not a hex address)\n");
}

TEST_CASE("symbolizer: JSON answers are valid JSON with every field", "[symbolizer][output]") {
  std::string odd_name = std::string("we\"ird\\name\x01") + "\xff" + "\xc3\xa9";
  std::vector<Frame> frames = {MakeFrame(odd_name, 0xffffffff81000010, 4, "a.c", 10, 5, true),
                               MakeFrame("outer", 0xffffffff81000000, 0x14, "/src/a.c", 30, 7)};
  Symbolization s;
  s.address = 0xffffffff81000014;
  s.frames = frames;
  s.module = "kvm";
  std::string out;
  AppendSymbolization(s, testing::Style(OutputStyle::kJson), &out);
  REQUIRE(out.back() == '\n');
  nlohmann::json j = nlohmann::json::parse(out);
  CHECK(j["address"] == "0xffffffff81000014");
  CHECK(j["reason"] == "none");
  CHECK(j["module"] == "kvm");
  REQUIRE(j["frames"].size() == 2);
  CHECK(j["frames"][0]["function"] == std::string("we\"ird\\name\x01") + "\xef\xbf\xbd\xc3\xa9");
  CHECK(j["frames"][0]["inlined"] == true);
  CHECK(j["frames"][1]["function"] == "outer");
  CHECK(j["frames"][1]["start"] == "0xffffffff81000000");
  CHECK(j["frames"][1]["offset"] == 0x14);
  CHECK(j["frames"][1]["file"] == "/src/a.c");
  CHECK(j["frames"][1]["line"] == 30);
  CHECK(j["frames"][1]["column"] == 7);

  Symbolization failed;
  failed.address = 5;
  failed.reason = Reason::kOutsideImage;
  failed.detail = "0x5 is outside";
  out.clear();
  AppendSymbolization(failed, testing::Style(OutputStyle::kJson), &out);
  j = nlohmann::json::parse(out);
  CHECK(j["frames"].empty());
  CHECK(j["reason"] == "outside-image");
  CHECK(j["detail"] == "0x5 is outside");
  out.clear();
  AppendInvalidInput("z\"z", testing::Style(OutputStyle::kJson), &out);
  j = nlohmann::json::parse(out);
  CHECK(j["input"] == "z\"z");
  CHECK(j["reason"] == "invalid-input");
}

TEST_CASE("symbolizer: the batch printer keeps input order and invalid lines", "[symbolizer][output]") {
  testing::TempDir dir;
  testing::TestElf elf;
  elf.sections = {{".text", 0x1000, 0x1000, true}};
  elf.symbols = {{"first", 0x1000, 0x10, STT_FUNC, STB_GLOBAL, ".text"},
                 {"second", 0x1100, 0x10, STT_FUNC, STB_GLOBAL, ".text"}};
  REQUIRE(testing::WriteTestElf(elf, dir.File("img")).empty());
  ParsedAddresses parsed;
  std::string input = "nope\n0x1104\n1001\n0x1104\nnot-hex\n1001\nlast-bad\n";
  ParseAddressLines(input, true, &parsed);
  Symbolizer symbolizer;
  auto batch = symbolizer.Symbolize(testing::ElfSpec(dir.File("img")), parsed.addresses,
                                    testing::With(Detail::kFunctions));
  REQUIRE(batch);
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  {
    OutputWriter writer(pipe_fds[1]);
    BatchPrinter printer({});
    REQUIRE(printer.Print(batch.value(), parsed.invalid, &writer));
    REQUIRE(writer.Flush());
  }
  ::close(pipe_fds[1]);
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  CHECK(out ==
        "?? (invalid-input: not a hex address)\n"
        "second+0x4\n"
        "first+0x1\n"
        "second+0x4\n"
        "?? (invalid-input: not a hex address)\n"
        "first+0x1\n"
        "?? (invalid-input: not a hex address)\n");
}

}  // namespace
}  // namespace hvprof::symbolizer
