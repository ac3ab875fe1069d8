#include "hvprof/linux/elf_info.h"

#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>

#include <memory>

#include "hvprof/base/files.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof::linux_host {

using hvprof::ErrorKind;
using hvprof::MakeError;

namespace {

struct ElfEnd {
  void operator()(Elf* elf) const { elf_end(elf); }
};
using ElfPtr = std::unique_ptr<Elf, ElfEnd>;

std::string Hex(const uint8_t* bytes, size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0xF];
  }
  return out;
}

}  // namespace

hvprof::Result<ElfInfo> ReadElfInfo(int fd) {
  if (elf_version(EV_CURRENT) == EV_NONE) return MakeError(ErrorKind::kUnsupported, "libelf is out of date");
  const ElfPtr elf(elf_begin(fd, ELF_C_READ_MMAP, nullptr));
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF) return MakeError(ErrorKind::kUnsupported, "not an ELF file");
  if (gelf_getclass(elf.get()) != ELFCLASS64) {
    return MakeError(ErrorKind::kUnsupported, "not a 64-bit ELF file");
  }
  GElf_Ehdr ehdr;
  size_t phnum = 0;
  if (gelf_getehdr(elf.get(), &ehdr) == nullptr || elf_getphdrnum(elf.get(), &phnum) != 0) {
    return MakeError(ErrorKind::kCorrupt, "damaged ELF headers: {}", elf_errmsg(-1));
  }
  ElfInfo info;
  info.type = ehdr.e_type;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf.get(), static_cast<int>(i), &phdr) == nullptr) {
      return MakeError(ErrorKind::kCorrupt, "cannot read ELF program header {}: {}", i, elf_errmsg(-1));
    }
    if (phdr.p_type == PT_LOAD) info.loads.push_back({phdr.p_offset, phdr.p_vaddr, phdr.p_filesz, phdr.p_memsz});
  }
  const void* build_id = nullptr;
  const ssize_t length = dwelf_elf_gnu_build_id(elf.get(), &build_id);
  if (length > 0 && length <= 64) info.build_id = Hex(static_cast<const uint8_t*>(build_id), static_cast<size_t>(length));
  return info;
}

hvprof::Result<ElfInfo> ReadElfInfo(const std::string& path) {
  // A path the caller names: links followed, but nothing but a regular file opened.
  HVPROF_TRY(file, hvprof::OpenUserFile(path, hvprof::FileTrust{.links = hvprof::Links::kFollow, .users = {},
                                                                 .refuse_replaceable = false, .check_path = false}));
  auto info = ReadElfInfo(file.fd.get());
  if (!info) return info.error().WithContext(path);
  return info;
}

uint64_t LoadBias(const ElfInfo& info, uint64_t start, uint64_t pgoff) {
  for (const ElfLoad& load : info.loads) {
    const uint64_t first = load.offset & ~uint64_t{0xFFF};
    if (pgoff >= first && pgoff < load.offset + load.filesz) {
      return start - (load.vaddr + pgoff - load.offset);
    }
  }
  return start - pgoff;
}

}  // namespace hvprof::linux_host
