// The perf-map and jitdump parsers and the JIT table: what real runtimes write, and what a
// hostile process could write instead.
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/symbolizer/jit_symbols.h"
#include "jitdump_writer.h"

namespace sym = hvprof::symbolizer;
using hvprof::testing::JitDumpWriter;

TEST_CASE("perf map: lines as Node, the JVM and CPython write them, and bad ones skipped and counted", "[jit]") {
  const std::string text =
      "3f0c2a40 1c0 JS:*hotA /srv/app.js:2:14\n"
      "0x3f0c2c00 0x80 LazyCompile:~main /srv/app.js:9\n"
      "7f00aa001000 3c double Hot.hotA(int)\n"
      "\n"
      "zz 10 not hex\n"
      "1000 0 zero size\n"
      "2000 10\n"
      "ffffffffffffffff 10 wraps around\n"
      "7f00aa002000 20 py::hotB:/srv/hot.py\r\n"
      "7f00aa003000 20 still being writ";
  sym::JitParseStats stats;
  const auto complete = sym::ParsePerfMap(text, &stats, true);
  REQUIRE(complete.size() == 5);
  CHECK(complete[0].start == 0x3f0c2a40);
  CHECK(complete[0].size == 0x1c0);
  CHECK(complete[0].name == "JS:*hotA /srv/app.js:2:14");  // the name is the rest of the line
  CHECK(complete[1].start == 0x3f0c2c00);
  CHECK(complete[3].name == "py::hotB:/srv/hot.py");        // no carriage return
  CHECK(complete[4].name == "still being writ");
  CHECK(stats.malformed == 4);
  CHECK(stats.problems.size() == 4);
  CHECK(stats.problems[0].starts_with("line 5:"));

  // A copy taken while the runtime wrote: the unterminated last line is left for the next copy.
  sym::JitParseStats partial;
  CHECK(sym::ParsePerfMap(text, &partial, false).size() == 4);
  CHECK(partial.truncated);

  // Lines longer than the bound are skipped, not kept.
  sym::JitParseStats long_stats;
  const std::string long_line = "1000 10 " + std::string(sym::kMaxPerfMapLine, 'x') + "\n2000 10 ok\n";
  const auto kept = sym::ParsePerfMap(long_line, &long_stats);
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].name == "ok");
  CHECK(long_stats.too_long == 1);
}

TEST_CASE("jitdump: loads, moves and debug info, as perf inject reads them", "[jit]") {
  JitDumpWriter writer;
  writer.DebugInfo(1500, 0x10000, "/srv/app.js", 12);
  writer.CodeLoad(2000, 0x10000, 0x100, "JS:*hotA");
  writer.CodeLoad(2100, 0x20000, 0x80, "JS:*hotB");
  writer.CodeMove(3000, 0x20000, 0x30000, 0x80);
  writer.Raw(3, 16, 4000);  // close
  sym::JitParseStats stats;
  const sym::JitDump dump = sym::ParseJitDump(writer.bytes(), &stats);
  REQUIRE(dump.valid);
  CHECK(dump.header.pid == 4242);
  CHECK_FALSE(dump.header.arch_timestamp);
  REQUIRE(dump.symbols.size() == 3);
  CHECK(dump.symbols[0].name == "JS:*hotA");
  CHECK(dump.symbols[0].valid_from_ns == 2000);
  CHECK(dump.symbols[0].file == "/srv/app.js");
  CHECK(dump.symbols[0].line == 12);
  CHECK(dump.symbols[2].name == "JS:*hotB");
  CHECK(dump.symbols[2].start == 0x30000);
  CHECK(dump.symbols[2].valid_from_ns == 3000);
  CHECK(stats.moves == 1);
  CHECK(stats.malformed == 0);
  CHECK_FALSE(stats.truncated);
}

TEST_CASE("jitdump: hostile and cut files", "[jit]") {
  SECTION("not a jitdump") {
    std::vector<std::byte> junk(64, std::byte(0x41));
    const sym::JitDump dump = sym::ParseJitDump(junk, nullptr);
    CHECK_FALSE(dump.valid);
    CHECK(dump.error.find("magic") != std::string::npos);
    CHECK_FALSE(sym::ParseJitDump({}, nullptr).valid);
  }
  SECTION("the other byte order") {
    JitDumpWriter writer;
    const uint32_t swapped = __builtin_bswap32(sym::kJitDumpMagic);
    std::memcpy(writer.data().data(), &swapped, 4);
    const sym::JitDump dump = sym::ParseJitDump(writer.bytes(), nullptr);
    CHECK_FALSE(dump.valid);
    CHECK(dump.error.find("byte order") != std::string::npos);
  }
  SECTION("a record cut by the copy: what came before stands") {
    JitDumpWriter writer;
    writer.CodeLoad(2000, 0x10000, 0x100, "first");
    writer.CodeLoad(2100, 0x20000, 0x100, "second");
    writer.data().resize(writer.data().size() - 10);
    sym::JitParseStats stats;
    const sym::JitDump dump = sym::ParseJitDump(writer.bytes(), &stats);
    REQUIRE(dump.symbols.size() == 1);
    CHECK(stats.truncated);
  }
  SECTION("a record whose size lies stops the reading; unknown types are read over") {
    JitDumpWriter writer;
    writer.CodeLoad(2000, 0x10000, 0x100, "kept");
    writer.Raw(99, 24, 2500);  // an unknown type of 24 bytes
    writer.data().resize(writer.data().size() + 8);
    writer.CodeLoad(2600, 0x20000, 0x100, "also kept");
    writer.Raw(0, 4, 3000);  // smaller than a prefix: nothing after it can be found
    writer.CodeLoad(3100, 0x30000, 0x100, "lost");
    sym::JitParseStats stats;
    const sym::JitDump dump = sym::ParseJitDump(writer.bytes(), &stats);
    REQUIRE(dump.symbols.size() == 2);
    CHECK(dump.symbols[1].name == "also kept");
    CHECK(stats.malformed == 2);
  }
  SECTION("a load without a terminated name, or of no code, or a move of nothing") {
    JitDumpWriter writer;
    writer.CodeLoad(2000, 0x10000, 0, "empty");
    writer.CodeMove(2100, 0x50000, 0x60000, 0x10);
    sym::JitParseStats stats;
    const sym::JitDump dump = sym::ParseJitDump(writer.bytes(), &stats);
    CHECK(dump.symbols.empty());
    CHECK(stats.malformed == 2);
  }
}

TEST_CASE("JIT table: the latest code at an address names it, from its own time on", "[jit]") {
  sym::JitTable table;
  // A perf map: the later line for the same code wins.
  table.Add({{0x1000, 0x100, 0, "old", "", 0}, {0x1000, 0x100, 0, "recompiled", "", 0}});
  // A jitdump: code at 0x5000 replaced at time 500 by other code over part of it.
  table.Add({{0x5000, 0x200, 100, "first", "", 0}, {0x5100, 0x200, 500, "second", "", 0}});
  table.Finish();
  CHECK(table.has_reuse());
  REQUIRE(table.Find(0x1080) != nullptr);
  CHECK(table.Find(0x1080)->name == "recompiled");
  CHECK(table.Find(0x1100) == nullptr);
  CHECK(table.Find(0xfff) == nullptr);
  CHECK(table.Find(0x5150, 200)->name == "first");   // sampled before the new code was loaded
  CHECK(table.Find(0x5150, 600)->name == "second");  // and after
  CHECK(table.Find(0x5150)->name == "second");       // no time: the latest
  CHECK(table.Find(0x5050, 600)->name == "first");   // not covered by the new code
  CHECK(table.Find(0x5000, 50) == nullptr);          // before any code was there

  sym::JitTable map_only;
  map_only.Add({{0x1000, 0x100, 0, "a", "", 0}, {0x2000, 0x100, 0, "b", "", 0}});
  map_only.Finish();
  CHECK_FALSE(map_only.has_reuse());
}
