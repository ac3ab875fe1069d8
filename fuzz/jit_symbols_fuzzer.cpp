// Fuzzes the perf-map and jitdump parsers (a profiled process writes both: hostile input) and
// the JIT table built from what they accept, with lookups at and around every region.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "hvprof/symbolizer/jit_symbols.h"

namespace sym = hvprof::symbolizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sym::JitParseStats map_stats, dump_stats;
  auto map = sym::ParsePerfMap(text, &map_stats, size % 2 == 0);
  sym::JitDump dump = sym::ParseJitDump(std::as_bytes(std::span(data, size)), &dump_stats);
  sym::JitTable table;
  table.Add(map);
  table.Add(dump.symbols);
  table.Finish();
  volatile size_t sink = 0;
  size_t probes = 0;
  for (const auto* symbols : {&map, &dump.symbols}) {
    for (const sym::JitSymbol& symbol : *symbols) {
      if (++probes > 512) break;
      for (uint64_t address : {symbol.start, symbol.start - 1, symbol.start + symbol.size - 1, symbol.start + symbol.size}) {
        for (uint64_t time : {uint64_t(0), symbol.valid_from_ns, sym::JitTable::kAnyTime}) {
          if (const sym::JitSymbol* found = table.Find(address, time)) {
            // What Find returns holds the address and was valid at the time.
            if (address - found->start >= found->size || found->valid_from_ns > time) __builtin_trap();
            sink = sink + found->name.size();
          }
        }
      }
    }
  }
  (void)sink;
  return 0;
}
