// Kernel symbol text images: /proc/kallsyms and System.map.
//
// These symbols have no sizes. Each distinct address is given to its best symbol (GLOBAL over
// WEAK over LOCAL, then file order) and covers addresses up to the next symbol. Where the next
// symbol belongs to another module (or the core kernel), the kernel's and modules' regions may
// have holes between them, so the coverage stops at the end of the symbol's page; the last
// symbol likewise. Addresses in such a hole, or before the first symbol, are kOutsideImage.

#include <algorithm>
#include <cstdint>
#include <string>

#include "elf_file.h"
#include "hvprof/base/files.h"
#include "hvprof/symbolizer/kernel_symbols.h"
#include "image.h"
#include "symbol_table.h"

namespace hvprof::symbolizer {
namespace {

constexpr uint64_t kPage = 4096;

uint64_t PageEnd(uint64_t address) {
  uint64_t end = (address | (kPage - 1)) + 1;
  return end == 0 ? UINT64_MAX : end;
}

class KernelImage final : public Image {
 public:
  KernelImage(const ImageSpec& spec, std::string text)
      : path_(spec.path), format_(spec.format), text_(std::move(text)) {}

  const std::string& build_id() const override { return build_id_; }

  ImageResult<void> Prepare() override {
    if (prepared_) return BOOST_OUTCOME_V2_NAMESPACE::success();
    auto parsed = ParseKernelSymbols(text_, format_);
    if (!parsed) {
      return MakeFailure(Reason::kMalformedSymbolFile,
                         fmt::format("{}: {}", path_, parsed.error().message()));
    }
    KernelSymbolText& symbols = parsed.value();
    if (symbols.symbols.empty()) {
      return MakeFailure(Reason::kNoSymbols,
                         symbols.lines == 0 ? fmt::format("{}: empty file", path_)
                                            : fmt::format("{}: no code or data symbols", path_));
    }
    if (symbols.all_addresses_zero) {
      return MakeFailure(Reason::kNoSymbols,
                         fmt::format("{}: every address is 0: the kernel hides kallsyms "
                                     "addresses from unprivileged readers (kernel.kptr_restrict);"
                                     " read it as root",
                                     path_));
    }
    if (symbols.malformed != 0) {
      std::string list;
      for (const std::string& p : symbols.problems) list += (list.empty() ? "" : "; ") + p;
      warnings_.push_back(fmt::format("{}: {} malformed line{} skipped ({})", path_,
                                      symbols.malformed, symbols.malformed == 1 ? "" : "s", list));
    }
    Build(symbols);
    prepared_ = true;
    return BOOST_OUTCOME_V2_NAMESPACE::success();
  }

  void Resolve(std::span<const uint64_t> addresses, const LookupOptions& options,
               BatchBuilder* builder) override {
    const Reason found = options.detail == Detail::kFunctions ? Reason::kNone : Reason::kNoLineInfo;
    const auto& symbols = table_.symbols();
    std::vector<uint32_t> module_views(modules_.size(), UINT32_MAX);
    module_views[0] = 0;
    size_t cursor = 0;
    for (size_t k = 0; k < addresses.size(); ++k) {
      const uint64_t a = addresses[k];
      SymbolTable::Hit hit = table_.Lookup(a, &cursor);
      if (hit.kind == SymbolTable::Kind::kSymbol) {
        const SymbolRecord& sym = symbols[hit.index];
        Frame frame;
        frame.function = std::string_view(sym.name, sym.name_length);
        frame.function_start = sym.start;
        frame.offset = a - sym.start;
        builder->AddFrame(frame);
        uint32_t& module = module_views[sym.module];
        if (module == UINT32_MAX) module = builder->View(modules_[sym.module]);
        builder->Resolved(k, found, module);
        continue;
      }
      const uint64_t runtime = a + builder->bias();
      builder->Failed(k, Reason::kOutsideImage,
                      builder->Keep(fmt::format("{:#x} is not inside the kernel or a module "
                                                "listed in {} (bias {:#x})",
                                                runtime, path_, builder->bias())));
    }
  }

  std::vector<FunctionSymbol> ListFunctions(uint64_t bias, const ListOptions& options) override {
    std::vector<FunctionSymbol> out;
    for (const Listed& l : listed_) {
      const SymbolRecord& s = table_.symbols()[l.symbol];
      if (options.executable_only && s.type != 1) continue;
      FunctionSymbol f;
      f.name.assign(s.name, s.name_length);
      f.start = s.start + bias;
      f.size = l.size;
      f.binding = static_cast<Binding>(s.binding);
      f.module = std::string(modules_[s.module]);
      f.size_inferred = true;
      out.push_back(std::move(f));
    }
    return out;
  }

  ImageInfo Describe() override {
    ImageInfo info;
    info.path = path_;
    info.format = format_;
    info.symbol_file = path_;
    info.symbol_table = format_ == ImageFormat::kKallsyms ? "kallsyms" : "System.map";
    info.symbol_count = table_.symbols().size();
    info.low_address = table_.low_address();
    info.high_address = table_.high_address();
    return info;
  }

  std::vector<std::string> TakeWarnings() override { return std::exchange(warnings_, {}); }

  uint64_t FootprintBytes() const override {
    return text_.capacity() + table_.FootprintBytes() + listed_.capacity() * sizeof(Listed);
  }

 private:
  struct Listed {
    uint32_t symbol;
    uint64_t size;
  };

  void Build(const KernelSymbolText& parsed) {
    modules_.assign(1, std::string_view());
    std::vector<SymbolRecord> records;
    records.reserve(parsed.symbols.size());
    for (const KernelSymbol& k : parsed.symbols) {
      uint16_t module = 0;
      if (!k.module.empty()) {
        // Module symbols come grouped per module: try the last one before searching.
        auto it = modules_.back() == k.module
                      ? modules_.end() - 1
                      : std::find(modules_.begin() + 1, modules_.end(), k.module);
        if (it == modules_.end()) {
          if (modules_.size() >= UINT16_MAX) continue;
          modules_.push_back(k.module);
          it = modules_.end() - 1;
        }
        module = static_cast<uint16_t>(it - modules_.begin());
      }
      SymbolRecord r;
      r.start = k.address;
      r.name = k.name.data();
      r.name_length = static_cast<uint32_t>(k.name.size());
      r.binding = static_cast<uint8_t>(k.binding);
      r.type = k.is_text ? 1 : 0;
      r.module = module;
      records.push_back(r);
    }
    std::vector<uint32_t> order(records.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&records](uint32_t a, uint32_t b) {
      if (records[a].start != records[b].start) return records[a].start < records[b].start;
      int ra = BindingRank(records[a].binding) * 2 + records[a].type;
      int rb = BindingRank(records[b].binding) * 2 + records[b].type;
      if (ra != rb) return ra > rb;
      return a < b;
    });

    std::vector<uint64_t> starts;
    std::vector<uint32_t> entries;
    const uint32_t outside = SymbolTable::Pack(SymbolTable::Kind::kOutside, 0);
    size_t group = 0;
    while (group < order.size()) {
      const SymbolRecord& best = records[order[group]];
      size_t next = group + 1;
      while (next < order.size() && records[order[next]].start == best.start) ++next;
      uint64_t end = PageEnd(best.start);
      if (next < order.size()) {
        const SymbolRecord& following = records[order[next]];
        if (following.module == best.module || following.start < end) end = following.start;
      }
      starts.push_back(best.start);
      entries.push_back(SymbolTable::Pack(SymbolTable::Kind::kSymbol, order[group]));
      for (size_t i = group; i < next; ++i) listed_.push_back({order[i], end - best.start});
      if (next == order.size() || end < records[order[next]].start) {
        starts.push_back(end);
        entries.push_back(outside);
      }
      group = next;
    }
    table_ = SymbolTable::FromIntervals(std::move(records), {}, std::move(starts),
                                        std::move(entries));
  }

  std::string path_;
  ImageFormat format_;
  std::string text_;  // the symbols' names point into it
  std::string build_id_;
  bool prepared_ = false;
  std::vector<std::string_view> modules_;
  SymbolTable table_;
  std::vector<Listed> listed_;  // every symbol with its inferred size, by address
  std::vector<std::string> warnings_;
};

}  // namespace

ImageResult<std::unique_ptr<Image>> OpenKernelImage(const ImageSpec& spec) {
  auto text = ReadFileToString(spec.path);
  if (!text) {
    ImageFailure f = MakeFailure(Reason::kUnreadableFile, text.error().message());
    f.kind = text.error().kind();
    return f;
  }
  const std::string& content = text.value();
  auto head = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(content.data()),
                                       std::min<size_t>(content.size(), 0x210));
  if (head.size() >= 4 && head[0] == 0x7f && head[1] == 'E' && head[2] == 'L' && head[3] == 'F') {
    return MakeFailure(Reason::kMalformedSymbolFile,
                       fmt::format("{}: an ELF file, not a {} text: pass it as the image (-e)",
                                   spec.path, ImageFormatName(spec.format)));
  }
  if (!content.empty()) {
    ImageFailure binary = ElfFile::ClassifyNonElf(head, spec.path);
    if (binary.reason == Reason::kCompressedImage) return binary;
  }
  return std::unique_ptr<Image>(new KernelImage(spec, std::move(text.value())));
}

}  // namespace hvprof::symbolizer
