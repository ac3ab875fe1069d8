#include "elf_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <initializer_list>

#include "hvprof/base/files.h"
#include "hvprof/base/scoped_fd.h"

namespace hvprof::symbolizer {
namespace {

constexpr uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

bool RangeFits(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

uint64_t Load(const uint8_t* p, size_t bytes, bool big_endian) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) {
    size_t shift = big_endian ? (bytes - 1 - i) * 8 : i * 8;
    v |= static_cast<uint64_t>(p[i]) << shift;
  }
  return v;
}

// The fields of the ELF header needed to check the file before libelf reads it.
struct RawHeader {
  bool is64 = true;
  bool big_endian = false;
  uint16_t type = 0;
  uint64_t phoff = 0;
  uint64_t shoff = 0;
  uint16_t ehsize = 0;
  uint16_t phentsize = 0;
  uint16_t phnum = 0;
  uint16_t shentsize = 0;
  uint16_t shnum = 0;
};

ImageResult<RawHeader> ParseRawHeader(std::span<const uint8_t> bytes, uint64_t file_size,
                                      const std::string& path) {
  if (bytes.size() < EI_NIDENT) {
    return MakeFailure(Reason::kTruncatedElf,
                       fmt::format("{}: the file ends inside the ELF header ({} bytes): the file "
                                   "is truncated",
                                   path, file_size));
  }
  RawHeader h;
  uint8_t cls = bytes[EI_CLASS];
  uint8_t data = bytes[EI_DATA];
  if (cls != ELFCLASS32 && cls != ELFCLASS64) {
    return MakeFailure(Reason::kCorruptElf,
                       fmt::format("{}: unknown ELF class {}", path, static_cast<int>(cls)));
  }
  if (data != ELFDATA2LSB && data != ELFDATA2MSB) {
    return MakeFailure(Reason::kCorruptElf, fmt::format("{}: unknown ELF data encoding {}", path,
                                                        static_cast<int>(data)));
  }
  h.is64 = cls == ELFCLASS64;
  h.big_endian = data == ELFDATA2MSB;
  size_t header_size = h.is64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr);
  if (bytes.size() < header_size) {
    return MakeFailure(Reason::kTruncatedElf,
                       fmt::format("{}: the file ends inside the ELF header ({} of {} bytes): "
                                   "the file is truncated",
                                   path, file_size, header_size));
  }
  const uint8_t* p = bytes.data();
  bool be = h.big_endian;
  h.type = static_cast<uint16_t>(Load(p + 16, 2, be));
  if (h.is64) {
    h.phoff = Load(p + 32, 8, be);
    h.shoff = Load(p + 40, 8, be);
    h.ehsize = static_cast<uint16_t>(Load(p + 52, 2, be));
    h.phentsize = static_cast<uint16_t>(Load(p + 54, 2, be));
    h.phnum = static_cast<uint16_t>(Load(p + 56, 2, be));
    h.shentsize = static_cast<uint16_t>(Load(p + 58, 2, be));
    h.shnum = static_cast<uint16_t>(Load(p + 60, 2, be));
  } else {
    h.phoff = Load(p + 28, 4, be);
    h.shoff = Load(p + 32, 4, be);
    h.ehsize = static_cast<uint16_t>(Load(p + 40, 2, be));
    h.phentsize = static_cast<uint16_t>(Load(p + 42, 2, be));
    h.phnum = static_cast<uint16_t>(Load(p + 44, 2, be));
    h.shentsize = static_cast<uint16_t>(Load(p + 46, 2, be));
    h.shnum = static_cast<uint16_t>(Load(p + 48, 2, be));
  }
  size_t shdr_size = h.is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);
  size_t phdr_size = h.is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
  if ((h.shnum != 0 || h.shoff != 0) && h.shentsize != shdr_size) {
    return MakeFailure(Reason::kCorruptElf,
                       fmt::format("{}: section header entries are {} bytes, expected {}", path,
                                   h.shentsize, shdr_size));
  }
  if (h.phnum != 0 && h.phentsize != phdr_size) {
    return MakeFailure(Reason::kCorruptElf,
                       fmt::format("{}: program header entries are {} bytes, expected {}", path,
                                   h.phentsize, phdr_size));
  }
  // With more than 0xff00 sections, e_shnum is 0 and section 0 holds the count: check at least
  // that one entry here, libelf's count later.
  uint64_t sh_bytes = uint64_t{h.shnum == 0 && h.shoff != 0 ? 1u : h.shnum} * shdr_size;
  if (h.shoff != 0 && !RangeFits(h.shoff, sh_bytes, file_size)) {
    return MakeFailure(Reason::kTruncatedElf,
                       fmt::format("{}: the section headers (bytes {:#x}..{:#x}) lie past the end "
                                   "of the file ({} bytes): the file is truncated",
                                   path, h.shoff, h.shoff + sh_bytes, file_size));
  }
  uint64_t ph_bytes = uint64_t{h.phnum} * phdr_size;
  if (h.phnum != 0 && !RangeFits(h.phoff, ph_bytes, file_size)) {
    return MakeFailure(Reason::kTruncatedElf,
                       fmt::format("{}: the program headers (bytes {:#x}..{:#x}) lie past the end "
                                   "of the file ({} bytes): the file is truncated",
                                   path, h.phoff, h.phoff + ph_bytes, file_size));
  }
  return h;
}

bool StartsWith(std::span<const uint8_t> head, std::initializer_list<uint8_t> magic) {
  if (head.size() < magic.size()) return false;
  return std::equal(magic.begin(), magic.end(), head.begin());
}

// "ffffffff81000000 T _text" or "0xffff82d040000000 T __image_base__".
bool LooksLikeSymbolMap(std::span<const uint8_t> head) {
  size_t i = 0;
  if (head.size() >= 2 && head[0] == '0' && (head[1] == 'x' || head[1] == 'X')) i = 2;
  size_t digits = 0;
  while (i < head.size() && std::isxdigit(head[i])) {
    ++i;
    ++digits;
  }
  return digits >= 8 && digits <= 16 && i + 3 < head.size() && head[i] == ' ' &&
         std::isalpha(head[i + 1]) && head[i + 2] == ' ';
}

// A file named as an image (by a session, a scenario or the user), for reading: links
// followed as named, but only a regular file opened; `st` says what it is.
Result<ScopedFd> OpenImage(const std::string& path, struct stat* st) {
  HVPROF_TRY(file, OpenUserFile(path, FileTrust{.links = Links::kFollow, .users = {}, .refuse_replaceable = false,
                                                .check_path = false}));
  *st = file.st;
  return std::move(file.fd);
}

}  // namespace

ImageFailure ElfFile::ClassifyNonElf(std::span<const uint8_t> head, const std::string& path) {
  auto compressed = [&path](std::string_view what) {
    return MakeFailure(
        Reason::kCompressedImage,
        fmt::format("{}: {}: a compressed kernel image (vmlinuz) has no symbol table; use the "
                    "uncompressed vmlinux from the kernel's -dbg package "
                    "(/usr/lib/debug/boot/vmlinux-*) or /proc/kallsyms",
                    path, what));
  };
  if (head.empty()) return MakeFailure(Reason::kNotElf, fmt::format("{}: empty file", path));
  if (StartsWith(head, {0x1f, 0x8b})) return compressed("gzip-compressed data");
  if (StartsWith(head, {0xfd, '7', 'z', 'X', 'Z', 0x00})) return compressed("xz-compressed data");
  if (StartsWith(head, {0x28, 0xb5, 0x2f, 0xfd})) return compressed("zstd-compressed data");
  if (StartsWith(head, {0x04, 0x22, 0x4d, 0x18}) || StartsWith(head, {0x02, 0x21, 0x4c, 0x18})) {
    return compressed("lz4-compressed data");
  }
  if (head.size() >= 4 && StartsWith(head, {'B', 'Z', 'h'}) && head[3] >= '1' && head[3] <= '9') {
    return compressed("bzip2-compressed data");
  }
  if (StartsWith(head, {0x5d, 0x00, 0x00})) return compressed("lzma-compressed data");
  if (head.size() >= 0x206 && std::memcmp(head.data() + 0x202, "HdrS", 4) == 0) {
    return compressed("a Linux bzImage boot executable");
  }
  if (LooksLikeSymbolMap(head)) {
    return MakeFailure(Reason::kNotElf,
                       fmt::format("{}: not an ELF file; it looks like a System.map or kallsyms "
                                   "text file: pass it as one (--system-map or --kallsyms)",
                                   path));
  }
  // Nothing of what the file holds is quoted: it may be one the reader could not read itself
  // (a session can name any file, and a report may run as root).
  return MakeFailure(Reason::kNotElf, fmt::format("{}: not an ELF file", path));
}

ImageResult<std::unique_ptr<ElfFile>> ElfFile::Open(const std::string& path) {
  // Looked at before it is opened (base's OpenUserFile): a FIFO named as an image is not waited
  // on, and a device is never opened, only refused.
  struct stat st {};
  auto fd = OpenImage(path, &st);
  if (!fd) {
    ImageFailure f = MakeFailure(Reason::kUnreadableFile, fd.error().message());
    f.kind = fd.error().kind();
    return f;
  }
  auto file = std::unique_ptr<ElfFile>(new ElfFile());
  file->path_ = path;
  file->file_size_ = static_cast<uint64_t>(st.st_size);
  file->device_ = st.st_dev;
  file->inode_ = st.st_ino;

  uint8_t head[0x210];
  ssize_t got;
  do {
    got = ::pread(fd.value().get(), head, sizeof head, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    return MakeFailure(Reason::kUnreadableFile,
                       fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  }
  std::span<const uint8_t> head_bytes(head, static_cast<size_t>(got));
  if (head_bytes.size() < 4 || std::memcmp(head, kElfMagic, 4) != 0) {
    return ClassifyNonElf(head_bytes, path);
  }
  auto raw = ParseRawHeader(head_bytes, file->file_size_, path);
  if (!raw) return raw.error();
  file->big_endian_ = raw.value().big_endian;
  file->type_ = raw.value().type;
  if (file->type_ == ET_REL) {
    return MakeFailure(Reason::kUnsupportedImage,
                       fmt::format("{}: a relocatable object (.o or kernel module .ko) has no load "
                                   "addresses; symbolize module addresses with /proc/kallsyms",
                                   path));
  }
  if (file->type_ == ET_CORE) {
    return MakeFailure(Reason::kUnsupportedImage,
                       fmt::format("{}: a core dump, not an executable image", path));
  }
  if (file->type_ != ET_EXEC && file->type_ != ET_DYN) {
    return MakeFailure(Reason::kUnsupportedImage,
                       fmt::format("{}: unsupported ELF type {}", path, file->type_));
  }

  elf_version(EV_CURRENT);
  file->fd_ = std::move(fd.value());
  file->elf_ = ScopedElf(elf_begin(file->fd_.get(), ELF_C_READ_MMAP, nullptr));
  if (!file->elf_.valid() || elf_kind(file->elf_.get()) != ELF_K_ELF) {
    return MakeFailure(Reason::kCorruptElf,
                       fmt::format("{}: libelf cannot read it: {}", path, elf_errmsg(-1)));
  }
  auto sections = file->ReadSections();
  if (!sections) return sections.error();
  file->ReadBuildId();
  file->ReadDebuglink();
  return file;
}

ImageResult<void> ElfFile::ReadSections() {
  Elf* elf = elf_.get();
  size_t count = 0;
  if (elf_getshdrnum(elf, &count) != 0) {
    return MakeFailure(Reason::kCorruptElf,
                       fmt::format("{}: cannot count sections: {}", path_, elf_errmsg(-1)));
  }
  GElf_Ehdr ehdr_mem;
  GElf_Ehdr* ehdr = gelf_getehdr(elf, &ehdr_mem);
  if (ehdr == nullptr) {
    return MakeFailure(Reason::kCorruptElf,
                       fmt::format("{}: cannot read the ELF header: {}", path_, elf_errmsg(-1)));
  }
  uint64_t shdr_size = gelf_fsize(elf, ELF_T_SHDR, 1, EV_CURRENT);
  if (count != 0 && !RangeFits(ehdr->e_shoff, count * shdr_size, file_size_)) {
    return MakeFailure(Reason::kTruncatedElf,
                       fmt::format("{}: the {} section headers lie past the end of the file ({} "
                                   "bytes): the file is truncated",
                                   path_, count, file_size_));
  }
  size_t names_index = 0;
  bool have_names = elf_getshdrstrndx(elf, &names_index) == 0;
  sections_.reserve(count);
  for (size_t i = 1; i < count; ++i) {
    Elf_Scn* scn = elf_getscn(elf, i);
    GElf_Shdr shdr_mem;
    GElf_Shdr* shdr = scn != nullptr ? gelf_getshdr(scn, &shdr_mem) : nullptr;
    if (shdr == nullptr) {
      return MakeFailure(Reason::kCorruptElf, fmt::format("{}: cannot read section header {}: {}",
                                                          path_, i, elf_errmsg(-1)));
    }
    ElfSection s;
    const char* name = have_names ? elf_strptr(elf, names_index, shdr->sh_name) : nullptr;
    s.name = name != nullptr ? name : "";
    s.index = i;
    s.type = shdr->sh_type;
    s.flags = shdr->sh_flags;
    s.addr = shdr->sh_addr;
    s.size = shdr->sh_size;
    s.offset = shdr->sh_offset;
    s.link = shdr->sh_link;
    if (s.type != SHT_NOBITS && s.size != 0 && !RangeFits(s.offset, s.size, file_size_)) {
      return MakeFailure(Reason::kTruncatedElf,
                         fmt::format("{}: section [{}] {} (bytes {:#x}..{:#x}) extends past the "
                                     "end of the file ({} bytes): the file is truncated",
                                     path_, i, s.name.empty() ? "?" : s.name, s.offset,
                                     s.offset + s.size, file_size_));
    }
    sections_.push_back(std::move(s));
  }

  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) phnum = 0;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr_mem;
    GElf_Phdr* phdr = gelf_getphdr(elf, static_cast<int>(i), &phdr_mem);
    if (phdr == nullptr) continue;
    if (phdr->p_type != PT_LOAD || phdr->p_memsz == 0) continue;
    if (phdr->p_filesz != 0 && !RangeFits(phdr->p_offset, phdr->p_filesz, file_size_)) {
      return MakeFailure(Reason::kTruncatedElf,
                         fmt::format("{}: loadable segment {} (bytes {:#x}..{:#x}) extends past "
                                     "the end of the file ({} bytes): the file is truncated",
                                     path_, i, phdr->p_offset, phdr->p_offset + phdr->p_filesz,
                                     file_size_));
    }
    uint64_t end = phdr->p_vaddr + phdr->p_memsz;
    if (end < phdr->p_vaddr) end = UINT64_MAX;
    loads_.emplace_back(phdr->p_vaddr, end);
  }
  return BOOST_OUTCOME_V2_NAMESPACE::success();
}

void ElfFile::ReadBuildId() {
  Elf* elf = elf_.get();
  auto scan = [this](Elf_Data* data) {
    if (data == nullptr || data->d_buf == nullptr) return false;
    size_t offset = 0;
    GElf_Nhdr nhdr;
    size_t name_offset = 0;
    size_t desc_offset = 0;
    while (offset < data->d_size &&
           (offset = gelf_getnote(data, offset, &nhdr, &name_offset, &desc_offset)) > 0) {
      const auto* bytes = static_cast<const uint8_t*>(data->d_buf);
      if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == 4 &&
          std::memcmp(bytes + name_offset, "GNU", 4) == 0 && nhdr.n_descsz > 0 &&
          nhdr.n_descsz <= 64) {
        build_id_.assign(bytes + desc_offset, bytes + desc_offset + nhdr.n_descsz);
        return true;
      }
    }
    return false;
  };
  for (const ElfSection& s : sections_) {
    if (s.type != SHT_NOTE || s.size == 0) continue;
    Elf_Scn* scn = elf_getscn(elf, s.index);
    if (scn != nullptr && scan(elf_getdata(scn, nullptr))) return;
  }
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr_mem;
    GElf_Phdr* phdr = gelf_getphdr(elf, static_cast<int>(i), &phdr_mem);
    if (phdr == nullptr || phdr->p_type != PT_NOTE || phdr->p_filesz == 0) continue;
    if (!RangeFits(phdr->p_offset, phdr->p_filesz, file_size_)) continue;
    if (scan(elf_getdata_rawchunk(elf, static_cast<int64_t>(phdr->p_offset), phdr->p_filesz,
                                  ELF_T_NHDR))) {
      return;
    }
  }
}

void ElfFile::ReadDebuglink() {
  const ElfSection* s = FindSection(".gnu_debuglink");
  if (s == nullptr || s->type == SHT_NOBITS) return;
  Elf_Scn* scn = elf_getscn(elf_.get(), s->index);
  Elf_Data* data = scn != nullptr ? elf_getdata(scn, nullptr) : nullptr;
  if (data == nullptr || data->d_buf == nullptr || data->d_size < 5) return;
  const auto* bytes = static_cast<const uint8_t*>(data->d_buf);
  size_t name_length = strnlen(reinterpret_cast<const char*>(bytes), data->d_size);
  if (name_length == 0 || name_length >= data->d_size) return;
  size_t crc_offset = (name_length + 1 + 3) & ~size_t{3};
  if (crc_offset + 4 > data->d_size) return;
  Debuglink link;
  link.name.assign(reinterpret_cast<const char*>(bytes), name_length);
  link.crc = static_cast<uint32_t>(Load(bytes + crc_offset, 4, big_endian_));
  // A debuglink is a file name, never a path.
  if (link.name.find('/') != std::string::npos || link.name == "." || link.name == "..") return;
  debuglink_ = std::move(link);
}

const ElfSection* ElfFile::FindSection(std::string_view name) const {
  for (const ElfSection& s : sections_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const ElfSection* ElfFile::FindSectionByType(uint32_t type) const {
  for (const ElfSection& s : sections_) {
    if (s.type == type) return &s;
  }
  return nullptr;
}

bool ElfFile::HasDwarf() const {
  auto present = [this](std::string_view name) {
    const ElfSection* s = FindSection(name);
    return s != nullptr && s->type != SHT_NOBITS && s->size != 0;
  };
  return (present(".debug_info") || present(".zdebug_info")) &&
         (present(".debug_line") || present(".zdebug_line"));
}

bool ElfFile::HasSymbolTable(uint32_t type) const {
  for (const ElfSection& s : sections_) {
    if (s.type == type && s.type != SHT_NOBITS && s.size != 0) return true;
  }
  return false;
}

std::optional<uint32_t> FileCrc32(const std::string& path) {
  struct stat st {};
  auto fd = OpenImage(path, &st);
  if (!fd) return std::nullopt;
  auto map = ScopedMmap::MapFileReadOnly(fd.value().get());
  if (!map) return std::nullopt;
  uLong crc = crc32(0L, Z_NULL, 0);
  auto bytes = map.value().bytes();
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  size_t left = bytes.size();
  while (left > 0) {
    auto chunk = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    left -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

Result<std::string> ReadBuildId(const std::string& path) {
  auto file = ElfFile::Open(path);
  if (!file) return Error(file.error().kind, file.error().detail);
  return BuildIdToHex(file.value()->build_id());
}

}  // namespace hvprof::symbolizer
