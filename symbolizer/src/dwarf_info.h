// Internal: source lines and inline scopes from DWARF (4 and 5) through libdw.
//
// Nothing is walked per address. On first use the compilation units' address ranges are read
// into one sorted interval map. On the first address that falls in a unit, that unit's line
// table is read (libdw keeps it sorted by address; a lookup is a binary search), and, for
// inline chains, its subprogram / inlined-subroutine tree is walked once into a flat interval
// map from address to the innermost scope, each scope pointing to its parent.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "elf_handles.h"
#include "image.h"

namespace hvprof::symbolizer {

struct SourceLocation {
  const char* file = nullptr;  // owned by libdw; nullptr if unknown
  uint32_t line = 0;
  uint32_t column = 0;
};

// One scope (inlined instance or out-of-line subprogram) that contains an address.
struct ScopeFrame {
  const char* linkage_name = nullptr;  // DW_AT_linkage_name (through abstract origins), or null
  const char* name = nullptr;          // DW_AT_name (through abstract origins), or null
  uint64_t range_start = 0;            // start of the range of this scope holding the address
  SourceLocation call_site;            // inlined scopes: where they were inlined
  bool inlined = false;
};

class DwarfInfo {
 public:
  // Fails if libdw cannot read the DWARF of `elf` (which must outlive this object).
  static ImageResult<std::unique_ptr<DwarfInfo>> Open(Elf* elf, const std::string& path);
  ~DwarfInfo();

  // Loads, before a batch is resolved, the tables of every unit that `addresses` (sorted)
  // fall in: line tables on this thread while up to `threads` - 1 helpers walk the units'
  // inline scopes (libdw reads DIEs concurrently through one Dwarf handle since 0.178; line
  // tables are only ever read by the calling thread).
  void Prefetch(std::span<const uint64_t> addresses, bool scopes, unsigned threads);

  // The line-table row that covers `address` (image address). Sorted queries are cheaper:
  // `cursor` remembers the last unit.
  bool FindLine(uint64_t address, SourceLocation* out, size_t* cursor);
  // The scopes containing `address`, innermost first; empty if none.
  void FindScopes(uint64_t address, std::vector<ScopeFrame>* out, size_t* cursor);

  size_t unit_count() const { return units_.size(); }
  uint64_t FootprintBytes() const;
  std::vector<std::string> TakeWarnings();

 private:
  struct Unit;
  explicit DwarfInfo(ScopedDwarf dwarf);
  void BuildUnitIndex();
  Unit* FindUnit(uint64_t address, size_t* cursor);
  void LoadLines(Unit* unit);
  void LoadScopes(Unit* unit);
  void LoadNames(Unit* unit, size_t node);
  const char* FileName(Unit* unit, uint32_t index);
  // `file` prefixed with the unit's DW_AT_comp_dir when it is relative (kept per unit).
  const char* Absolute(Unit* unit, const char* file);

  ScopedDwarf dwarf_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<uint64_t> unit_starts_;  // interval map: address -> unit (or none)
  std::vector<uint32_t> unit_entries_;
  uint64_t lines_loaded_ = 0;          // rows held by libdw, for the footprint estimate
  std::vector<std::string> warnings_;
};

}  // namespace hvprof::symbolizer
