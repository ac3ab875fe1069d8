// What the process table needs from an ELF file: its GNU build-id and its PT_LOAD segments,
// to turn a mapping (start, file offset) into the symbolizer's load bias. Read with libelf and
// libdwelf (the build-id note).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvprof/base/result.h"

namespace hvprof::linux_host {

struct ElfLoad {
  uint64_t offset = 0;
  uint64_t vaddr = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
};

struct ElfInfo {
  uint16_t type = 0;       // ET_EXEC, ET_DYN...
  std::string build_id;    // lower-case hex, empty if none
  std::vector<ElfLoad> loads;
};

// Fails (kNotFound, kCorrupt, kUnsupported...) for files that are not 64-bit ELF.
hvprof::Result<ElfInfo> ReadElfInfo(int fd);
hvprof::Result<ElfInfo> ReadElfInfo(const std::string& path);

// The symbolizer's bias (runtime = image address + bias) of a mapping of the file at `start`
// from file offset `pgoff`: start - (p_vaddr + pgoff - p_offset) of the PT_LOAD that holds
// pgoff. Without such a segment, start - pgoff (right for the usual p_vaddr == p_offset).
uint64_t LoadBias(const ElfInfo& info, uint64_t start, uint64_t pgoff);

}  // namespace hvprof::linux_host
