// Writes small synthetic ELF files with exactly the sections, segments and symbols a test
// wants, so that symbol-choice rules are checked against hand-picked layouts rather than what a
// toolchain happened to emit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hvprof::symbolizer::testing {

struct TestSection {
  std::string name;
  uint64_t address = 0;
  uint64_t size = 0;
  bool executable = true;
};

struct TestSymbol {
  std::string name;
  uint64_t value = 0;
  uint64_t size = 0;
  unsigned type = 2;     // STT_FUNC
  unsigned binding = 1;  // STB_GLOBAL
  std::string section;   // "" = SHN_ABS
};

struct TestElf {
  uint16_t type = 2;  // ET_EXEC
  std::vector<TestSection> sections;
  std::vector<TestSymbol> symbols;
  bool with_symtab = true;
  std::vector<uint8_t> build_id;                       // empty: no build-id note
  std::vector<std::pair<uint64_t, uint64_t>> loads;    // PT_LOAD (vaddr, memsz); empty: one per section
};

// Writes `elf` to `path`. Returns an error message, or "" on success.
std::string WriteTestElf(const TestElf& elf, const std::string& path);

}  // namespace hvprof::symbolizer::testing
