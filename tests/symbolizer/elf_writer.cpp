#include "elf_writer.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

namespace hvprof::symbolizer::testing {
namespace {

class StringTable {
 public:
  StringTable() { data_.push_back('\0'); }
  uint32_t Add(const std::string& s) {
    auto offset = static_cast<uint32_t>(data_.size());
    data_.insert(data_.end(), s.begin(), s.end());
    data_.push_back('\0');
    return offset;
  }
  std::vector<char>& data() { return data_; }

 private:
  std::vector<char> data_;
};

}  // namespace

std::string WriteTestElf(const TestElf& spec, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + path;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_WRITE, nullptr);
  if (elf == nullptr) {
    ::close(fd);
    return std::string("elf_begin: ") + elf_errmsg(-1);
  }
  std::string error;
  auto fail = [&error](const std::string& what) {
    if (error.empty()) error = what + ": " + elf_errmsg(-1);
  };

  Elf64_Ehdr* ehdr = elf64_newehdr(elf);
  ehdr->e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr->e_machine = EM_X86_64;
  ehdr->e_type = spec.type;
  ehdr->e_version = EV_CURRENT;

  std::vector<std::pair<uint64_t, uint64_t>> loads = spec.loads;
  if (loads.empty()) {
    for (const TestSection& s : spec.sections) loads.emplace_back(s.address, s.size);
  }
  Elf64_Phdr* phdrs = loads.empty() ? nullptr : elf64_newphdr(elf, loads.size());

  StringTable section_names;
  std::deque<std::vector<char>> buffers;  // section contents, alive until the write
  std::map<std::string, size_t> index_of;

  auto add_section = [&](const std::string& name, uint32_t type, uint64_t flags,
                         uint64_t address, std::vector<char> bytes, Elf_Type data_type,
                         uint64_t entsize, uint64_t nobits_size) {
    Elf_Scn* scn = elf_newscn(elf);
    if (scn == nullptr) {
      fail("elf_newscn");
      return static_cast<Elf64_Shdr*>(nullptr);
    }
    buffers.push_back(std::move(bytes));
    Elf_Data* data = elf_newdata(scn);
    data->d_buf = buffers.back().empty() ? nullptr : buffers.back().data();
    data->d_size = type == SHT_NOBITS ? nobits_size : buffers.back().size();
    data->d_type = data_type;
    data->d_align = data_type == ELF_T_SYM ? 8 : 1;
    data->d_version = EV_CURRENT;
    Elf64_Shdr* shdr = elf64_getshdr(scn);
    shdr->sh_name = section_names.Add(name);
    shdr->sh_type = type;
    shdr->sh_flags = flags;
    shdr->sh_addr = address;
    shdr->sh_entsize = entsize;
    shdr->sh_addralign = data->d_align;
    index_of[name] = elf_ndxscn(scn);
    return shdr;
  };

  for (const TestSection& s : spec.sections) {
    uint64_t flags = SHF_ALLOC | (s.executable ? SHF_EXECINSTR : SHF_WRITE);
    bool small = s.size <= 65536;
    add_section(s.name, small ? SHT_PROGBITS : SHT_NOBITS, flags, s.address,
                small ? std::vector<char>(s.size, '\0') : std::vector<char>(), ELF_T_BYTE, 0,
                s.size);
  }

  if (!spec.build_id.empty()) {
    std::vector<char> note(12 + 4 + spec.build_id.size());
    uint32_t header[3] = {4, static_cast<uint32_t>(spec.build_id.size()), NT_GNU_BUILD_ID};
    std::memcpy(note.data(), header, sizeof header);
    std::memcpy(note.data() + 12, "GNU", 4);
    std::memcpy(note.data() + 16, spec.build_id.data(), spec.build_id.size());
    note.resize((note.size() + 3) & ~size_t{3}, '\0');
    add_section(".note.gnu.build-id", SHT_NOTE, 0, 0, std::move(note), ELF_T_BYTE, 0, 0);
  }

  if (spec.with_symtab) {
    StringTable names;
    std::vector<TestSymbol> ordered = spec.symbols;
    std::stable_sort(ordered.begin(), ordered.end(), [](const TestSymbol& a, const TestSymbol& b) {
      return (a.binding == STB_LOCAL) > (b.binding == STB_LOCAL);
    });
    std::vector<Elf64_Sym> symbols(1);
    std::memset(symbols.data(), 0, sizeof(Elf64_Sym));
    size_t first_global = 1;
    for (const TestSymbol& t : ordered) {
      Elf64_Sym sym;
      std::memset(&sym, 0, sizeof sym);
      sym.st_name = names.Add(t.name);
      sym.st_info = static_cast<unsigned char>(ELF64_ST_INFO(t.binding, t.type));
      sym.st_value = t.value;
      sym.st_size = t.size;
      if (t.section.empty()) {
        sym.st_shndx = SHN_ABS;
      } else {
        auto it = index_of.find(t.section);
        sym.st_shndx = it == index_of.end() ? SHN_UNDEF : static_cast<Elf64_Half>(it->second);
      }
      symbols.push_back(sym);
      if (t.binding == STB_LOCAL) first_global = symbols.size();
    }
    std::vector<char> sym_bytes(symbols.size() * sizeof(Elf64_Sym));
    std::memcpy(sym_bytes.data(), symbols.data(), sym_bytes.size());
    Elf64_Shdr* symtab = add_section(".symtab", SHT_SYMTAB, 0, 0, std::move(sym_bytes), ELF_T_SYM,
                                     sizeof(Elf64_Sym), 0);
    Elf64_Shdr* strtab =
        add_section(".strtab", SHT_STRTAB, 0, 0, names.data(), ELF_T_BYTE, 0, 0);
    if (symtab != nullptr && strtab != nullptr) {
      symtab->sh_link = static_cast<Elf64_Word>(index_of[".strtab"]);
      symtab->sh_info = static_cast<Elf64_Word>(first_global);
    }
  }

  size_t names_index_placeholder = section_names.Add(".shstrtab");
  Elf_Scn* names_scn = elf_newscn(elf);
  Elf_Data* names_data = elf_newdata(names_scn);
  buffers.push_back(section_names.data());
  names_data->d_buf = buffers.back().data();
  names_data->d_size = buffers.back().size();
  names_data->d_type = ELF_T_BYTE;
  names_data->d_align = 1;
  names_data->d_version = EV_CURRENT;
  Elf64_Shdr* names_shdr = elf64_getshdr(names_scn);
  names_shdr->sh_name = static_cast<Elf64_Word>(names_index_placeholder);
  names_shdr->sh_type = SHT_STRTAB;
  ehdr->e_shstrndx = static_cast<Elf64_Half>(elf_ndxscn(names_scn));

  if (elf_update(elf, ELF_C_NULL) < 0) fail("elf_update (layout)");
  for (size_t i = 0; i < loads.size() && phdrs != nullptr; ++i) {
    phdrs[i].p_type = PT_LOAD;
    phdrs[i].p_vaddr = loads[i].first;
    phdrs[i].p_paddr = loads[i].first;
    phdrs[i].p_memsz = loads[i].second;
    phdrs[i].p_filesz = 0;
    phdrs[i].p_offset = 0;
    phdrs[i].p_flags = PF_R | PF_X;
    phdrs[i].p_align = 0x1000;
  }
  elf_flagphdr(elf, ELF_C_SET, ELF_F_DIRTY);
  if (elf_update(elf, ELF_C_WRITE) < 0) fail("elf_update (write)");
  elf_end(elf);
  ::close(fd);
  return error;
}

}  // namespace hvprof::symbolizer::testing
