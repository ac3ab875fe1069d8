// ELF images: executables, shared objects, PIEs, vmlinux and xen-syms, with separate debuginfo.

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <thread>
#include <unordered_map>

#include "demangle.h"
#include "dwarf_info.h"
#include "elf_file.h"
#include "image.h"
#include "symbol_table.h"

namespace hvprof::symbolizer {
namespace {

constexpr uint32_t kNoSlot = std::numeric_limits<uint32_t>::max();

bool UsableType(unsigned type) {
  return type == STT_FUNC || type == STT_OBJECT || type == STT_NOTYPE || type == STT_GNU_IFUNC;
}

// Reads the defined symbols of `table` (a SHT_SYMTAB or SHT_DYNSYM section of `file`) that lie
// in allocated sections. Sections are appended to `sections`, and symbols refer to them.
ImageResult<void> ReadSymbols(const ElfFile& file, const ElfSection& table,
                              std::vector<SymbolRecord>* symbols,
                              std::vector<SectionRange>* sections) {
  Elf* elf = file.elf();
  size_t max_index = 0;
  for (const ElfSection& s : file.sections()) max_index = std::max(max_index, s.index);
  std::vector<uint32_t> slot(max_index + 1, kNoSlot);
  for (const ElfSection& s : file.sections()) {
    if ((s.flags & SHF_ALLOC) == 0 || (s.flags & SHF_TLS) != 0 || s.size == 0) continue;
    slot[s.index] = static_cast<uint32_t>(sections->size());
    uint64_t end = s.addr + s.size;
    if (end < s.addr) end = std::numeric_limits<uint64_t>::max();
    sections->push_back({s.addr, end, s.name, (s.flags & SHF_EXECINSTR) != 0});
  }

  Elf_Scn* scn = elf_getscn(elf, table.index);
  Elf_Data* data = scn != nullptr ? elf_getdata(scn, nullptr) : nullptr;
  size_t entry_size = gelf_fsize(elf, ELF_T_SYM, 1, EV_CURRENT);
  if (data == nullptr || entry_size == 0) {
    return MakeFailure(Reason::kCorruptElf, fmt::format("{}: cannot read {}: {}", file.path(),
                                                        table.name, elf_errmsg(-1)));
  }
  Elf_Data* extended = nullptr;
  for (const ElfSection& s : file.sections()) {
    if (s.type == SHT_SYMTAB_SHNDX && s.link == table.index) {
      Elf_Scn* x = elf_getscn(elf, s.index);
      extended = x != nullptr ? elf_getdata(x, nullptr) : nullptr;
    }
  }
  // libelf indexes symbols with an int.
  size_t count = std::min<size_t>(data->d_size / entry_size, std::numeric_limits<int>::max());
  symbols->reserve(symbols->size() + count);
  for (size_t i = 1; i < count; ++i) {
    GElf_Sym sym;
    Elf32_Word extended_index = 0;
    bool ok = extended != nullptr
                  ? gelf_getsymshndx(data, extended, static_cast<int>(i), &sym, &extended_index)
                  : gelf_getsym(data, static_cast<int>(i), &sym);
    if (!ok) continue;
    unsigned type = GELF_ST_TYPE(sym.st_info);
    if (!UsableType(type)) continue;
    size_t shndx = sym.st_shndx;
    if (shndx == SHN_UNDEF) continue;
    if (shndx == SHN_XINDEX) {
      shndx = extended_index;
    } else if (shndx >= SHN_LORESERVE) {
      continue;  // absolute and common symbols name no code
    }
    if (shndx >= slot.size() || slot[shndx] == kNoSlot) continue;
    const char* name = elf_strptr(elf, table.link, sym.st_name);
    if (name == nullptr || name[0] == '\0' || name[0] == '$') continue;
    Binding binding;
    switch (GELF_ST_BIND(sym.st_info)) {
      case STB_LOCAL: binding = Binding::kLocal; break;
      case STB_GLOBAL:
      case STB_GNU_UNIQUE: binding = Binding::kGlobal; break;
      case STB_WEAK: binding = Binding::kWeak; break;
      default: continue;
    }
    SymbolRecord r;
    r.start = sym.st_value;
    r.size = sym.st_size;
    r.name = name;
    r.name_length = static_cast<uint32_t>(std::strlen(name));
    r.section = slot[shndx];
    r.binding = static_cast<uint8_t>(binding);
    r.type = static_cast<uint8_t>(type);
    r.sized = sym.st_size != 0;
    r.mangled = IsMangled(name);
    symbols->push_back(r);
  }
  return BOOST_OUTCOME_V2_NAMESPACE::success();
}

class ElfImage final : public Image {
 public:
  ElfImage(std::unique_ptr<ElfFile> main, const ImageSpec& spec, const SymbolizerOptions& options)
      : path_(spec.path),
        explicit_debug_file_(spec.debug_file),
        debug_roots_(options.debug_roots),
        find_debuginfo_(options.find_debuginfo),
        dwarf_threads_(options.dwarf_threads != 0
                           ? options.dwarf_threads
                           : std::clamp(std::thread::hardware_concurrency(), 1u, 4u)),
        main_(std::move(main)) {
    build_id_ = BuildIdToHex(main_->build_id());
  }

  const std::string& build_id() const override { return build_id_; }

  ImageResult<void> Prepare() override {
    if (prepared_) return BOOST_OUTCOME_V2_NAMESPACE::success();
    bool any_table = false;
    // Uses the table of `type` in `file` if it has usable symbols.
    auto try_table = [this, &any_table](const ElfFile* file, uint32_t type) {
      const ElfSection* table = file->FindSectionByType(type);
      if (table == nullptr || table->size == 0) return false;
      any_table = true;
      std::vector<SymbolRecord> symbols;
      std::vector<SectionRange> sections;
      auto read = ReadSymbols(*file, *table, &symbols, &sections);
      if (!read) {
        warnings_.push_back(read.error().detail);
        return false;
      }
      if (symbols.empty()) return false;
      symbol_file_ = file;
      symbol_table_name_ = type == SHT_SYMTAB ? ".symtab" : ".dynsym";
      dynsym_only_ = type == SHT_DYNSYM;
      table_ = SymbolTable::BuildElf(std::move(symbols), std::move(sections), main_->loads());
      prepared_ = true;
      return true;
    };
    if (try_table(main_.get(), SHT_SYMTAB)) return BOOST_OUTCOME_V2_NAMESPACE::success();
    FindDebugFile();
    if (debug_ != nullptr && try_table(debug_.get(), SHT_SYMTAB)) {
      return BOOST_OUTCOME_V2_NAMESPACE::success();
    }
    if (try_table(main_.get(), SHT_DYNSYM)) {
      warnings_.push_back(fmt::format(
          "{}: no .symtab (stripped) and no separate debuginfo found{}: only exported "
          "(.dynsym) symbols are known",
          path_, DebugSearchSummary()));
      return BOOST_OUTCOME_V2_NAMESPACE::success();
    }
    const bool has_full_table = main_->HasSymbolTable(SHT_SYMTAB) ||
                                (debug_ != nullptr && debug_->HasSymbolTable(SHT_SYMTAB));
    if (!any_table || !has_full_table) {
      return MakeFailure(Reason::kStripped,
                         fmt::format("{}: no symbol table (stripped) and no separate debuginfo "
                                     "found{}: install the image's -dbg package or pass its "
                                     "debug file",
                                     path_, DebugSearchSummary()));
    }
    return MakeFailure(Reason::kNoSymbols,
                       fmt::format("{}: its symbol tables hold no function or object symbols",
                                   path_));
  }

  void Resolve(std::span<const uint64_t> addresses, const LookupOptions& options,
               BatchBuilder* builder) override {
    const bool want_lines = options.detail != Detail::kFunctions;
    const bool want_inlines = options.detail == Detail::kInlines;
    DwarfInfo* dwarf = want_lines ? Dwarf() : nullptr;
    if (dwarf != nullptr) dwarf->Prefetch(addresses, want_inlines, dwarf_threads_);
    size_t cursor = 0;
    size_t line_cursor = 0;
    size_t scope_cursor = 0;
    std::vector<ScopeFrame> scopes;
    const auto& symbols = table_.symbols();
    for (size_t k = 0; k < addresses.size(); ++k) {
      const uint64_t a = addresses[k];
      SymbolTable::Hit hit = table_.Lookup(a, &cursor);
      if (hit.kind == SymbolTable::Kind::kSymbol) {
        const SymbolRecord& sym = symbols[hit.index];
        Frame outer;
        outer.function = FunctionName(sym, options.demangle);
        outer.function_start = sym.start;
        outer.offset = a - sym.start;
        if (!want_lines) {
          builder->AddFrame(outer);
          builder->Resolved(k, Reason::kNone);
          continue;
        }
        SourceLocation location;
        bool have_line = dwarf != nullptr && dwarf->FindLine(a, &location, &line_cursor);
        scopes.clear();
        if (want_inlines && dwarf != nullptr) dwarf->FindScopes(a, &scopes, &scope_cursor);
        for (const ScopeFrame& scope : scopes) {
          if (!scope.inlined) break;  // reached the out-of-line function
          Frame inlined;
          inlined.function = ScopeName(scope, options.demangle);
          inlined.function_start = scope.range_start;
          inlined.offset = a - scope.range_start;
          SetLocation(&inlined, location);
          inlined.inlined = true;
          builder->AddFrame(inlined);
          location = scope.call_site;
        }
        SetLocation(&outer, location);
        builder->AddFrame(outer);
        builder->Resolved(k, have_line ? Reason::kNone : Reason::kNoLineInfo);
        continue;
      }
      // No symbol holds the address, but DWARF may know the function (a symbol table that
      // lacks it, or only .dynsym): name it from its subprogram.
      if (dwarf != nullptr && ResolveFromDwarf(a, options, dwarf, &line_cursor, &scope_cursor,
                                               &scopes, builder, k)) {
        continue;
      }
      const uint64_t runtime = a + builder->bias();
      switch (hit.kind) {
        case SymbolTable::Kind::kPastEnd: {
          const SymbolRecord& sym = symbols[hit.index];
          builder->Failed(
              k, Reason::kPastSymbolEnd,
              builder->Keep(fmt::format("{:#x} is beyond the end of {} ({:#x} + size {:#x} = "
                                        "{:#x})",
                                        runtime, std::string_view(sym.name, sym.name_length),
                                        sym.start + builder->bias(), sym.size,
                                        sym.start + sym.size + builder->bias())));
          break;
        }
        case SymbolTable::Kind::kNoSymbol: {
          Reason reason = dynsym_only_ ? Reason::kStripped : Reason::kNoSymbol;
          std::string detail;
          if (hit.index < table_.sections().size()) {
            detail = fmt::format("no symbol covers {:#x} in section {}{}", runtime,
                                 table_.sections()[hit.index].name,
                                 dynsym_only_ ? " (only .dynsym symbols are known)" : "");
          } else {
            detail = fmt::format("{:#x} is in no section of {}", runtime, path_);
          }
          builder->Failed(k, reason, builder->Keep(std::move(detail)));
          break;
        }
        default:
          builder->Failed(
              k, Reason::kOutsideImage,
              builder->Keep(fmt::format("{:#x} is outside {} (loaded at {:#x}..{:#x} with bias "
                                        "{:#x})",
                                        runtime, path_, table_.low_address() + builder->bias(),
                                        table_.high_address() + builder->bias(),
                                        builder->bias())));
          break;
      }
    }
  }

  // Resolves `a` from the DWARF subprogram that contains it, if any.
  bool ResolveFromDwarf(uint64_t a, const LookupOptions& options, DwarfInfo* dwarf,
                        size_t* line_cursor, size_t* scope_cursor,
                        std::vector<ScopeFrame>* scopes, BatchBuilder* builder, size_t k) {
    dwarf->FindScopes(a, scopes, scope_cursor);
    auto outer = std::find_if(scopes->begin(), scopes->end(),
                              [](const ScopeFrame& s) { return !s.inlined; });
    if (outer == scopes->end()) return false;
    SourceLocation location;
    bool have_line = dwarf->FindLine(a, &location, line_cursor);
    if (options.detail == Detail::kInlines) {
      for (auto scope = scopes->begin(); scope != outer; ++scope) {
        Frame inlined;
        inlined.function = ScopeName(*scope, options.demangle);
        inlined.function_start = scope->range_start;
        inlined.offset = a - scope->range_start;
        SetLocation(&inlined, location);
        inlined.inlined = true;
        builder->AddFrame(inlined);
        location = scope->call_site;
      }
    }
    // Without inlines the out-of-line frame shows the innermost line, as with symbols.
    Frame frame;
    frame.function = ScopeName(*outer, options.demangle);
    frame.function_start = outer->range_start;
    frame.offset = a - outer->range_start;
    SetLocation(&frame, location);
    builder->AddFrame(frame);
    builder->Resolved(k, have_line ? Reason::kNone : Reason::kNoLineInfo);
    return true;
  }

  std::vector<FunctionSymbol> ListFunctions(uint64_t bias, const ListOptions& options) override {
    std::vector<FunctionSymbol> out;
    std::vector<uint32_t> order;
    const auto& symbols = table_.symbols();
    for (uint32_t i = 0; i < symbols.size(); ++i) {
      const SymbolRecord& s = symbols[i];
      if (s.type != STT_FUNC && s.type != STT_GNU_IFUNC) continue;
      if (options.executable_only && !table_.sections()[s.section].executable) continue;
      order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&symbols](uint32_t a, uint32_t b) {
      if (symbols[a].start != symbols[b].start) return symbols[a].start < symbols[b].start;
      if (BindingRank(symbols[a].binding) != BindingRank(symbols[b].binding)) {
        return BindingRank(symbols[a].binding) > BindingRank(symbols[b].binding);
      }
      return a < b;
    });
    out.reserve(order.size());
    for (uint32_t i : order) {
      const SymbolRecord& s = symbols[i];
      FunctionSymbol f;
      f.name = std::string(FunctionName(s, options.demangle));
      f.start = s.start + bias;
      f.size = s.size;
      f.binding = static_cast<Binding>(s.binding);
      f.section = table_.sections()[s.section].name;
      out.push_back(std::move(f));
    }
    return out;
  }

  ImageInfo Describe() override {
    FindDebugFile();
    ImageInfo info;
    info.path = path_;
    info.format = ImageFormat::kElf;
    info.elf_type = main_->type() == ET_EXEC ? "exec" : "dyn";
    info.build_id = build_id_;
    info.symbol_file = symbol_file_ != nullptr ? symbol_file_->path() : "";
    info.symbol_table = symbol_table_name_;
    info.debug_file = debug_ != nullptr ? debug_->path() : "";
    info.has_dwarf = main_->HasDwarf() || (debug_ != nullptr && debug_->HasDwarf());
    info.symbol_count = table_.symbols().size();
    info.low_address = table_.low_address();
    info.high_address = table_.high_address();
    return info;
  }

  std::vector<std::string> TakeWarnings() override {
    if (dwarf_ != nullptr) {
      for (std::string& w : dwarf_->TakeWarnings()) warnings_.push_back(std::move(w));
    }
    return std::exchange(warnings_, {});
  }

  uint64_t FootprintBytes() const override {
    uint64_t bytes = main_->file_size() + table_.FootprintBytes();
    if (debug_ != nullptr) bytes += debug_->file_size();
    if (dwarf_ != nullptr) bytes += dwarf_->FootprintBytes();
    return bytes + demangled_bytes_;
  }

 private:
  static void SetLocation(Frame* frame, const SourceLocation& location) {
    frame->file = location.file != nullptr ? std::string_view(location.file) : std::string_view();
    frame->line = location.line;
    frame->column = location.column;
  }

  std::string_view FunctionName(const SymbolRecord& symbol, bool demangle) {
    if (!demangle || !symbol.mangled) return {symbol.name, symbol.name_length};
    return Demangled(symbol.name);
  }

  std::string_view ScopeName(const ScopeFrame& scope, bool demangle) {
    if (scope.linkage_name != nullptr) {
      if (!demangle || !IsMangled(scope.linkage_name)) return scope.linkage_name;
      return Demangled(scope.linkage_name);
    }
    return scope.name != nullptr ? std::string_view(scope.name) : std::string_view("??");
  }

  // The demangled name, cached per image; the mangled one if it does not demangle.
  std::string_view Demangled(const char* mangled) {
    auto [it, inserted] = demangled_.try_emplace(mangled);
    if (inserted) {
      it->second = Demangle(mangled);
      if (it->second.empty()) it->second = mangled;
      demangled_bytes_ += it->second.size() + 64;
    }
    return it->second;
  }

  std::string DebugSearchSummary() const {
    std::string s;
    if (!build_id_.empty() && find_debuginfo_) {
      s += fmt::format(" (looked for build-id {} under", build_id_);
      for (const std::string& root : debug_roots_) s += " " + root;
      s += ")";
    }
    return s;
  }

  // Looks for separate debuginfo once: the explicit file, then by build-id, then by
  // .gnu_debuglink. A candidate must match the image's build-id (or the debuglink CRC).
  void FindDebugFile() {
    if (debug_searched_) return;
    debug_searched_ = true;
    auto try_candidate = [this](const std::string& candidate, std::optional<uint32_t> crc) {
      struct stat st {};
      if (::stat(candidate.c_str(), &st) != 0) return false;
      if (st.st_dev == main_->device() && st.st_ino == main_->inode()) return false;
      auto file = ElfFile::Open(candidate);
      if (!file) {
        warnings_.push_back(fmt::format("debug file {} rejected: {}", candidate,
                                        file.error().detail));
        return false;
      }
      const auto& theirs = file.value()->build_id();
      if (!main_->build_id().empty()) {
        // The image has a build-id: its debug file must have the same one. One without any
        // could hold anybody's symbols (a debuginfod server's answer, a file planted).
        if (theirs != main_->build_id()) {
          warnings_.push_back(
              theirs.empty()
                  ? fmt::format("debug file {} rejected: it has no build-id, so nothing shows it is {}'s "
                                "(build-id {})",
                                candidate, path_, build_id_)
                  : fmt::format("debug file {} rejected: its build-id {} differs from {}'s {}", candidate,
                                BuildIdToHex(theirs), path_, build_id_));
          return false;
        }
      } else if (crc.has_value()) {
        std::optional<uint32_t> actual = FileCrc32(candidate);
        if (actual != crc) {
          warnings_.push_back(fmt::format("debug file {} rejected: its CRC does not match the "
                                          ".gnu_debuglink of {}",
                                          candidate, path_));
          return false;
        }
      }
      debug_ = std::move(file.value());
      return true;
    };
    if (!explicit_debug_file_.empty()) {
      try_candidate(explicit_debug_file_, std::nullopt);
      return;
    }
    if (!find_debuginfo_) return;
    if (build_id_.size() > 2) {
      for (const std::string& root : debug_roots_) {
        std::string candidate = fmt::format("{}/.build-id/{}/{}.debug", root,
                                            build_id_.substr(0, 2), build_id_.substr(2));
        if (try_candidate(candidate, std::nullopt)) return;
      }
    }
    if (main_->debuglink().has_value()) {
      const Debuglink& link = *main_->debuglink();
      std::error_code ec;
      std::filesystem::path real = std::filesystem::weakly_canonical(path_, ec);
      if (ec) real = path_;
      std::filesystem::path dir = real.parent_path();
      std::vector<std::filesystem::path> candidates = {dir / link.name, dir / ".debug" / link.name};
      for (const std::string& root : debug_roots_) {
        candidates.push_back(std::filesystem::path(root) / dir.relative_path() / link.name);
      }
      for (const auto& candidate : candidates) {
        if (try_candidate(candidate.string(), link.crc)) return;
      }
    }
  }

  DwarfInfo* Dwarf() {
    if (dwarf_tried_) return dwarf_.get();
    dwarf_tried_ = true;
    const ElfFile* file = nullptr;
    if (main_->HasDwarf()) {
      file = main_.get();
    } else {
      FindDebugFile();
      if (debug_ != nullptr && debug_->HasDwarf()) file = debug_.get();
    }
    if (file == nullptr) {
      warnings_.push_back(fmt::format("{}: no DWARF line tables in the image or its separate "
                                      "debuginfo{}: source lines are unavailable",
                                      path_, DebugSearchSummary()));
      return nullptr;
    }
    auto dwarf = DwarfInfo::Open(file->elf(), file->path());
    if (!dwarf) {
      warnings_.push_back(dwarf.error().detail);
      return nullptr;
    }
    dwarf_ = std::move(dwarf.value());
    return dwarf_.get();
  }

  std::string path_;
  std::string explicit_debug_file_;
  std::vector<std::string> debug_roots_;
  bool find_debuginfo_ = true;
  unsigned dwarf_threads_ = 1;
  std::string build_id_;
  std::unique_ptr<ElfFile> main_;
  std::unique_ptr<ElfFile> debug_;
  bool debug_searched_ = false;
  const ElfFile* symbol_file_ = nullptr;
  std::string symbol_table_name_;
  bool dynsym_only_ = false;
  bool prepared_ = false;
  SymbolTable table_;
  // Declared after the files it reads: destroyed before them.
  std::unique_ptr<DwarfInfo> dwarf_;
  bool dwarf_tried_ = false;
  std::unordered_map<const char*, std::string> demangled_;
  uint64_t demangled_bytes_ = 0;
  std::vector<std::string> warnings_;
};

}  // namespace

ImageResult<std::unique_ptr<Image>> OpenElfImage(const ImageSpec& spec,
                                                 const SymbolizerOptions& options) {
  auto file = ElfFile::Open(spec.path);
  if (!file) return file.error();
  return std::unique_ptr<Image>(new ElfImage(std::move(file.value()), spec, options));
}

}  // namespace hvprof::symbolizer
