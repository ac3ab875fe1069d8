// Parser for kernel symbol text: /proc/kallsyms and System.map (also the .map file that ships
// beside xen-syms). It takes a buffer, not a path, so agents can parse what they read from a
// guest and the fuzzer can feed it anything.
//
// Line format: "ADDR TYPE NAME" with an optional "\t[MODULE]" (kallsyms), separated by blanks.
// ADDR is hex with or without 0x. TYPE is nm's letter: upper case global, lower case local,
// w/W/v/V weak. Absolute (a/A), undefined (U) and debugging (N/n) symbols are dropped.
// Malformed lines are skipped and counted; the first few are described in `problems`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/symbolizer/types.h"

namespace hvprof::symbolizer {

struct KernelSymbol {
  uint64_t address = 0;
  std::string_view name;    // points into the parsed text
  std::string_view module;  // "" for the core kernel
  char type = 'T';          // nm letter as written
  Binding binding = Binding::kGlobal;
  bool is_text = false;     // t/T/w/W (code)
};

struct KernelSymbolText {
  std::vector<KernelSymbol> symbols;  // file order
  size_t lines = 0;                   // non-empty lines seen
  size_t malformed = 0;               // lines skipped as malformed
  std::vector<std::string> problems;  // "line 12: ..." for the first malformed lines
  bool all_addresses_zero = false;    // kallsyms read without privilege (kptr_restrict)
};

// Parses `text`. Fails (kCorrupt) only when not a single line is valid; an empty text gives an
// empty table.
Result<KernelSymbolText> ParseKernelSymbols(std::string_view text, ImageFormat format);

}  // namespace hvprof::symbolizer
