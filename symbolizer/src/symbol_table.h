// Internal: a symbol table flattened into disjoint address intervals, so that a lookup is one
// binary search (or a short forward gallop for sorted queries).
//
// The symbol-choice rule is applied once, when the table is built, by sweeping each section's
// symbols in address order. For an address A in section S:
//   1. Sized symbols of S that contain A (start <= A < start + size) win: the one with the
//      greatest start; ties go to GLOBAL over WEAK over LOCAL, then the smaller size, then
//      FUNC over NOTYPE over OBJECT, then symbol table order.
//   2. Otherwise the sizeless symbol of S with the greatest start <= A (same tie-breaks), but
//      only if no sized symbol that starts at or before A ends between that label and A
//      (the label of hand-written assembly reaches to the next symbol, never past a sized one).
//   3. Otherwise A is past the end of the sized symbol that ended last (kPastEnd), or, if no
//      symbol of S starts at or before A, it has no symbol (kNoSymbol).
// Addresses in no section but inside a loadable segment are kNoSymbol; addresses outside every
// loadable segment are kOutside.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hvprof::symbolizer {

struct SymbolRecord {
  uint64_t start = 0;
  uint64_t size = 0;
  const char* name = nullptr;  // not owned: points into a mapped string table or parsed text
  uint32_t name_length = 0;
  uint32_t section = 0;        // index into SymbolTable::sections()
  uint8_t binding = 0;         // hvprof::symbolizer::Binding
  uint8_t type = 0;            // STT_* for ELF; for kernel text: 1 text, 0 other
  uint16_t module = 0;         // kernel text: index into modules, 0 = core kernel
  bool sized = false;
  bool mangled = false;        // an Itanium C++ name ("_Z..."), decided once when read
};

struct SectionRange {
  uint64_t start = 0;
  uint64_t end = 0;
  std::string name;
  bool executable = false;
};

class SymbolTable {
 public:
  enum class Kind : uint8_t { kSymbol = 0, kNoSymbol = 1, kPastEnd = 2, kOutside = 3 };
  static constexpr uint32_t kNoSection = (uint32_t{1} << 30) - 1;

  struct Hit {
    Kind kind = Kind::kOutside;
    uint32_t index = 0;  // symbol for kSymbol and kPastEnd, section for kNoSymbol
  };

  SymbolTable() = default;

  // Builds the table of an ELF image. `loads` are the loadable address ranges (sorted or not,
  // may overlap); symbols refer to sections by index into `sections`.
  static SymbolTable BuildElf(std::vector<SymbolRecord> symbols, std::vector<SectionRange> sections,
                              std::vector<std::pair<uint64_t, uint64_t>> loads);

  // Builds from ready-made intervals: starts[i] begins interval i, which ends where the next one
  // begins; the last interval must be kOutside. For kernel text tables.
  static SymbolTable FromIntervals(std::vector<SymbolRecord> symbols,
                                   std::vector<SectionRange> sections,
                                   std::vector<uint64_t> starts, std::vector<uint32_t> entries);

  static uint32_t Pack(Kind kind, uint32_t index) {
    return (static_cast<uint32_t>(kind) << 30) | (index & kNoSection);
  }

  // Looks up `address`. `cursor` is an interval index from a previous lookup of a smaller or
  // equal address (start with 0); it is updated.
  Hit Lookup(uint64_t address, size_t* cursor) const;

  const std::vector<SymbolRecord>& symbols() const { return symbols_; }
  const std::vector<SectionRange>& sections() const { return sections_; }
  size_t interval_count() const { return starts_.size(); }
  uint64_t low_address() const { return starts_.empty() ? 0 : starts_.front(); }
  uint64_t high_address() const { return starts_.empty() ? 0 : starts_.back(); }
  uint64_t FootprintBytes() const;

 private:
  std::vector<SymbolRecord> symbols_;
  std::vector<SectionRange> sections_;
  std::vector<uint64_t> starts_;
  std::vector<uint32_t> entries_;
};

// Symbol preference used at equal start addresses: higher is better.
int BindingRank(uint8_t binding);

}  // namespace hvprof::symbolizer
