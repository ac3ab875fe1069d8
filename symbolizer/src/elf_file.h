// Internal: one opened ELF file, validated before libelf sees it. The fd, libelf's mapping and
// the Elf* are owned here; everything returned points into memory this object keeps alive.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "elf_handles.h"
#include "hvprof/base/scoped_fd.h"
#include "image.h"

namespace hvprof::symbolizer {

struct ElfSection {
  std::string name;
  size_t index = 0;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
  uint32_t link = 0;
};

struct Debuglink {
  std::string name;
  uint32_t crc = 0;
};

class ElfFile {
 public:
  // Opens and validates `path`. Non-ELF content is classified (compressed kernel, text symbol
  // map, other); truncation is detected from the headers before any data is read.
  static ImageResult<std::unique_ptr<ElfFile>> Open(const std::string& path);
  // Classifies the first bytes of a file that is not an ELF (for the error message).
  static ImageFailure ClassifyNonElf(std::span<const uint8_t> head, const std::string& path);

  const std::string& path() const { return path_; }
  Elf* elf() const { return elf_.get(); }
  uint16_t type() const { return type_; }
  uint64_t file_size() const { return file_size_; }
  dev_t device() const { return device_; }
  ino_t inode() const { return inode_; }
  const std::vector<ElfSection>& sections() const { return sections_; }
  const ElfSection* FindSection(std::string_view name) const;
  const ElfSection* FindSectionByType(uint32_t type) const;
  // PT_LOAD address ranges [start, end).
  const std::vector<std::pair<uint64_t, uint64_t>>& loads() const { return loads_; }
  const std::vector<uint8_t>& build_id() const { return build_id_; }
  const std::optional<Debuglink>& debuglink() const { return debuglink_; }
  bool HasDwarf() const;
  // Non-empty .symtab (or .dynsym) present.
  bool HasSymbolTable(uint32_t type) const;

 private:
  ElfFile() = default;
  ImageResult<void> ReadSections();
  void ReadBuildId();
  void ReadDebuglink();

  std::string path_;
  ScopedFd fd_;
  ScopedElf elf_;  // declared after fd_: destroyed first
  uint16_t type_ = 0;
  bool big_endian_ = false;
  uint64_t file_size_ = 0;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  std::vector<ElfSection> sections_;
  std::vector<std::pair<uint64_t, uint64_t>> loads_;
  std::vector<uint8_t> build_id_;
  std::optional<Debuglink> debuglink_;
};

// CRC-32 (the .gnu_debuglink flavour, as zlib's crc32) of a whole file; nullopt if unreadable.
std::optional<uint32_t> FileCrc32(const std::string& path);

}  // namespace hvprof::symbolizer
