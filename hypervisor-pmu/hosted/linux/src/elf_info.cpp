#include "hvpmu/linux/elf_info.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hvprof/base/scoped_fd.h"

namespace hvpmu::linux_host {

using hvprof::ErrorKind;
using hvprof::MakeError;

namespace {

constexpr uint32_t kMaxPhdrs = 4096;
constexpr uint64_t kMaxNoteBytes = 64 * 1024;

bool ReadAt(int fd, void* buffer, size_t bytes, uint64_t offset) {
  auto* out = static_cast<uint8_t*>(buffer);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, out + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string Hex(const uint8_t* bytes, size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 0xF];
  }
  return out;
}

// Finds NT_GNU_BUILD_ID in a PT_NOTE segment's bytes.
std::string FindBuildId(const std::vector<uint8_t>& notes) {
  size_t pos = 0;
  while (notes.size() - pos >= sizeof(Elf64_Nhdr)) {
    Elf64_Nhdr header;
    std::memcpy(&header, notes.data() + pos, sizeof header);
    pos += sizeof header;
    const uint64_t name_bytes = (uint64_t{header.n_namesz} + 3) & ~uint64_t{3};
    const uint64_t desc_bytes = (uint64_t{header.n_descsz} + 3) & ~uint64_t{3};
    if (name_bytes > notes.size() - pos || desc_bytes > notes.size() - pos - name_bytes) break;
    const bool gnu = header.n_namesz == 4 && std::memcmp(notes.data() + pos, "GNU", 4) == 0;
    if (gnu && header.n_type == NT_GNU_BUILD_ID && header.n_descsz > 0 &&
        header.n_descsz <= 64) {
      return Hex(notes.data() + pos + name_bytes, header.n_descsz);
    }
    pos += name_bytes + desc_bytes;
  }
  return {};
}

}  // namespace

hvprof::Result<ElfInfo> ReadElfInfo(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return hvprof::ErrnoError(errno, "fstat");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  Elf64_Ehdr ehdr;
  if (file_size < sizeof ehdr || !ReadAt(fd, &ehdr, sizeof ehdr, 0) ||
      std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0) {
    return MakeError(ErrorKind::kUnsupported, "not an ELF file");
  }
  if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_ident[EI_DATA] != ELFDATA2LSB) {
    return MakeError(ErrorKind::kUnsupported, "not a 64-bit little-endian ELF file");
  }
  if (ehdr.e_phentsize != sizeof(Elf64_Phdr) || ehdr.e_phnum > kMaxPhdrs ||
      ehdr.e_phoff > file_size ||
      uint64_t{ehdr.e_phnum} * sizeof(Elf64_Phdr) > file_size - ehdr.e_phoff) {
    return MakeError(ErrorKind::kCorrupt, "ELF program headers out of bounds");
  }
  std::vector<Elf64_Phdr> phdrs(ehdr.e_phnum);
  if (!phdrs.empty() &&
      !ReadAt(fd, phdrs.data(), phdrs.size() * sizeof(Elf64_Phdr), ehdr.e_phoff)) {
    return MakeError(ErrorKind::kCorrupt, "cannot read the ELF program headers");
  }
  ElfInfo info;
  info.type = ehdr.e_type;
  for (const Elf64_Phdr& phdr : phdrs) {
    if (phdr.p_type == PT_LOAD) {
      info.loads.push_back({phdr.p_offset, phdr.p_vaddr, phdr.p_filesz, phdr.p_memsz});
    } else if (phdr.p_type == PT_NOTE && info.build_id.empty() && phdr.p_filesz > 0 &&
               phdr.p_filesz <= kMaxNoteBytes && phdr.p_offset <= file_size &&
               phdr.p_filesz <= file_size - phdr.p_offset) {
      std::vector<uint8_t> notes(phdr.p_filesz);
      if (ReadAt(fd, notes.data(), notes.size(), phdr.p_offset)) info.build_id = FindBuildId(notes);
    }
  }
  return info;
}

hvprof::Result<ElfInfo> ReadElfInfo(const std::string& path) {
  HVPROF_TRY(fd, hvprof::OpenFile(path.c_str(), O_RDONLY | O_CLOEXEC));
  auto info = ReadElfInfo(fd.get());
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

}  // namespace hvpmu::linux_host
