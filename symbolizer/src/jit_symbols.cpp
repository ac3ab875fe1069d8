#include "hvprof/symbolizer/jit_symbols.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <map>

#include <fmt/format.h>

namespace hvprof::symbolizer {
namespace {

constexpr size_t kMaxProblems = 5;

void Problem(JitParseStats* stats, std::string text) {
  if (stats != nullptr && stats->problems.size() < kMaxProblems) stats->problems.push_back(std::move(text));
}

// Hex with an optional 0x, the whole of `text`.
bool ParseHex(std::string_view text, uint64_t* value) {
  if (text.starts_with("0x") || text.starts_with("0X")) text.remove_prefix(2);
  if (text.empty() || text.size() > 16) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value, 16);
  return error == std::errc() && end == text.data() + text.size();
}

// Splits off the next blank-separated field.
std::string_view NextField(std::string_view* rest) {
  const size_t begin = rest->find_first_not_of(" \t");
  if (begin == std::string_view::npos) {
    *rest = {};
    return {};
  }
  rest->remove_prefix(begin);
  const size_t end = rest->find_first_of(" \t");
  std::string_view field = rest->substr(0, end);
  rest->remove_prefix(end == std::string_view::npos ? rest->size() : end);
  return field;
}

// Reads little-endian (the writer's order, checked from the magic) fields of a record.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, size_t offset) : bytes_(bytes), offset_(offset) {}
  template <typename T>
  bool Read(T* value) {
    if (offset_ > bytes_.size() || bytes_.size() - offset_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }
  // A NUL-terminated string ending before `limit`.
  bool ReadString(size_t limit, std::string* out) {
    if (offset_ >= limit) return false;
    const auto* begin = reinterpret_cast<const char*>(bytes_.data() + offset_);
    const void* nul = std::memchr(begin, 0, limit - offset_);
    if (nul == nullptr) return false;
    const size_t length = static_cast<size_t>(static_cast<const char*>(nul) - begin);
    out->assign(begin, std::min(length, kMaxJitName));
    offset_ += length + 1;
    return true;
  }
  size_t offset() const { return offset_; }

 private:
  std::span<const std::byte> bytes_;
  size_t offset_;
};

enum RecordType : uint32_t {
  kCodeLoad = 0,
  kCodeMove = 1,
  kCodeDebugInfo = 2,
  kCodeClose = 3,
  kCodeUnwindingInfo = 4,
};
constexpr size_t kHeaderBytes = 40;
constexpr size_t kPrefixBytes = 16;
constexpr uint64_t kFlagArchTimestamp = 1;

}  // namespace

std::vector<JitSymbol> ParsePerfMap(std::string_view text, JitParseStats* stats, bool complete) {
  JitParseStats ignored;
  if (stats == nullptr) stats = &ignored;
  std::vector<JitSymbol> symbols;
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    if (newline == std::string_view::npos && !complete) {
      stats->truncated = true;  // a line still being written
      break;
    }
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++line_number;
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    ++stats->entries;
    if (line.size() > kMaxPerfMapLine) {
      ++stats->too_long;
      Problem(stats, fmt::format("line {}: {} bytes, longer than {}", line_number, line.size(), kMaxPerfMapLine));
      continue;
    }
    std::string_view rest = line;
    JitSymbol symbol;
    const std::string_view start = NextField(&rest);
    const std::string_view size = NextField(&rest);
    const size_t name_begin = rest.find_first_not_of(" \t");
    std::string_view name = name_begin == std::string_view::npos ? std::string_view() : rest.substr(name_begin);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    if (!ParseHex(start, &symbol.start) || !ParseHex(size, &symbol.size) || symbol.size == 0 ||
        symbol.size > kMaxJitRegion || name.empty() || symbol.start + symbol.size < symbol.start) {
      ++stats->malformed;
      Problem(stats, fmt::format("line {}: not \"START SIZE NAME\" with START and SIZE in hex", line_number));
      continue;
    }
    symbol.name.assign(name.substr(0, kMaxJitName));
    symbols.push_back(std::move(symbol));
  }
  return symbols;
}

namespace {

// What reading the records carries from one to the next: debug info waiting for the next load
// of its address (its first entry's file and line), and the latest symbol at each start, for
// moves.
struct JitReadState {
  std::map<uint64_t, std::pair<std::string, uint32_t>> pending_lines;
  std::map<uint64_t, size_t> by_start;
};

// Reads the jitdump's header into `dump` (valid, or its error). Returns the header's size, where
// the records start.
size_t ReadJitHeader(std::span<const std::byte> bytes, JitDump& dump) {
  Cursor header(bytes, 0);
  uint32_t magic = 0, header_size = 0, pad = 0;
  if (!header.Read(&magic) || !header.Read(&dump.header.version) || !header.Read(&header_size) ||
      !header.Read(&dump.header.elf_machine) || !header.Read(&pad) || !header.Read(&dump.header.pid) ||
      !header.Read(&dump.header.timestamp_ns) || !header.Read(&dump.header.flags)) {
    dump.error = fmt::format("{} bytes, shorter than a jitdump header", bytes.size());
    return 0;
  }
  if (magic == __builtin_bswap32(kJitDumpMagic)) {
    dump.error = "a jitdump of the other byte order (written on another machine)";
    return 0;
  }
  if (magic != kJitDumpMagic) {
    dump.error = fmt::format("magic {:#010x} is not a jitdump's", magic);
    return 0;
  }
  if (header_size < kHeaderBytes || header_size > bytes.size()) {
    dump.error = fmt::format("header size {} is not between {} and the file's {} bytes", header_size,
                             kHeaderBytes, bytes.size());
    return 0;
  }
  dump.valid = true;
  dump.header.arch_timestamp = (dump.header.flags & kFlagArchTimestamp) != 0;
  return header_size;
}

// Applies one record (`id`, its fields from `record`, up to `end`) to `dump`.
void ReadJitRecord(uint32_t id, uint64_t timestamp, Cursor& record, size_t end, JitReadState& state, JitDump& dump,
                   JitParseStats* stats, const std::function<void(std::string_view)>& malformed) {
  auto& pending_lines = state.pending_lines;
  auto& by_start = state.by_start;
  switch (id) {
    case kCodeLoad: {
      uint32_t pid = 0, tid = 0;
      uint64_t vma = 0, code_addr = 0, code_size = 0, code_index = 0;
      JitSymbol symbol;
      if (!record.Read(&pid) || !record.Read(&tid) || !record.Read(&vma) || !record.Read(&code_addr) ||
          !record.Read(&code_size) || !record.Read(&code_index) || !record.ReadString(end, &symbol.name)) {
        malformed("a code load without its fields and name");
        break;
      }
      if (code_size == 0 || code_size > kMaxJitRegion || code_addr + code_size < code_addr || symbol.name.empty()) {
        malformed("a code load of no code, or with no name");
        break;
      }
      symbol.start = code_addr;
      symbol.size = code_size;
      symbol.valid_from_ns = timestamp;
      if (auto lines = pending_lines.find(code_addr); lines != pending_lines.end()) {
        symbol.file = std::move(lines->second.first);
        symbol.line = lines->second.second;
        pending_lines.erase(lines);
      }
      by_start[symbol.start] = dump.symbols.size();
      dump.symbols.push_back(std::move(symbol));
      break;
    }
    case kCodeMove: {
      uint32_t pid = 0, tid = 0;
      uint64_t vma = 0, old_addr = 0, new_addr = 0, code_size = 0, code_index = 0;
      if (!record.Read(&pid) || !record.Read(&tid) || !record.Read(&vma) || !record.Read(&old_addr) ||
          !record.Read(&new_addr) || !record.Read(&code_size) || !record.Read(&code_index)) {
        malformed("a code move without its fields");
        break;
      }
      auto moved = by_start.find(old_addr);
      if (moved == by_start.end() || code_size == 0 || code_size > kMaxJitRegion || new_addr + code_size < new_addr) {
        malformed(fmt::format("a move of code never loaded at {:#x}", old_addr));
        break;
      }
      JitSymbol symbol = dump.symbols[moved->second];
      symbol.start = new_addr;
      symbol.size = code_size;
      symbol.valid_from_ns = timestamp;
      by_start[new_addr] = dump.symbols.size();
      dump.symbols.push_back(std::move(symbol));
      ++stats->moves;
      break;
    }
    case kCodeDebugInfo: {
      uint64_t code_addr = 0, entries = 0;
      if (!record.Read(&code_addr) || !record.Read(&entries)) {
        malformed("debug info without its fields");
        break;
      }
      // The first entry is the region's own position; the others (lines inside) are read over.
      uint64_t address = 0;
      int32_t line = 0, discriminator = 0;
      std::string file;
      if (entries > 0 && record.Read(&address) && record.Read(&line) && record.Read(&discriminator) &&
          record.ReadString(end, &file)) {
        if (line > 0 && !file.empty() && file != "\xff") pending_lines[code_addr] = {std::move(file), uint32_t(line)};
      } else if (entries > 0) {
        malformed("debug info with a cut entry");
      }
      break;
    }
    case kCodeClose:
    case kCodeUnwindingInfo:
      break;
    default:
      malformed("unknown record type, read over");
      break;
  }
}

}  // namespace

JitDump ParseJitDump(std::span<const std::byte> bytes, JitParseStats* stats) {
  JitParseStats ignored;
  if (stats == nullptr) stats = &ignored;
  JitDump dump;
  const size_t header_size = ReadJitHeader(bytes, dump);
  if (!dump.valid) return dump;
  JitReadState state;
  size_t offset = header_size;
  while (offset < bytes.size()) {
    Cursor prefix(bytes, offset);
    uint32_t id = 0, total = 0;
    uint64_t timestamp = 0;
    if (!prefix.Read(&id) || !prefix.Read(&total) || !prefix.Read(&timestamp)) {
      stats->truncated = true;
      break;
    }
    if (total < kPrefixBytes) {
      ++stats->malformed;
      Problem(stats, fmt::format("record at {:#x}: size {} is smaller than a record's prefix; the rest is unreadable",
                                 offset, total));
      break;
    }
    if (total > bytes.size() - offset) {
      stats->truncated = true;  // still being written, or cut
      break;
    }
    const size_t end = offset + total;
    ++stats->entries;
    Cursor record(bytes.first(end), prefix.offset());
    auto malformed = [&](std::string_view what) {
      ++stats->malformed;
      Problem(stats, fmt::format("record at {:#x} (type {}): {}", offset, id, what));
    };
    ReadJitRecord(id, timestamp, record, end, state, dump, stats, malformed);
    offset = end;
  }
  return dump;
}

void JitTable::Add(std::vector<JitSymbol> symbols) {
  for (JitSymbol& symbol : symbols) regions_.push_back({std::move(symbol), regions_.size()});
}

void JitTable::Finish() {
  std::sort(regions_.begin(), regions_.end(), [](const Region& a, const Region& b) {
    return a.symbol.start != b.symbol.start ? a.symbol.start < b.symbol.start : a.order < b.order;
  });
  max_end_.resize(regions_.size());
  uint64_t max_end = 0, max_valid_from = 0;
  has_reuse_ = false;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const JitSymbol& symbol = regions_[i].symbol;
    // An overlap where times matter: lookups need the sample's time.
    if (symbol.start < max_end && (symbol.valid_from_ns != 0 || max_valid_from != 0)) has_reuse_ = true;
    max_end = std::max(max_end, symbol.start + symbol.size);
    max_valid_from = std::max(max_valid_from, symbol.valid_from_ns);
    max_end_[i] = max_end;
  }
}

const JitSymbol* JitTable::Find(uint64_t address, uint64_t time_ns) const {
  auto upper = std::upper_bound(regions_.begin(), regions_.end(), address,
                                [](uint64_t a, const Region& region) { return a < region.symbol.start; });
  const Region* best = nullptr;
  for (size_t i = static_cast<size_t>(upper - regions_.begin()); i-- > 0;) {
    if (max_end_[i] <= address) break;  // nothing at or before i reaches the address
    const Region& region = regions_[i];
    if (address - region.symbol.start >= region.symbol.size) continue;
    if (region.symbol.valid_from_ns > time_ns) continue;
    // The latest valid; at equal times the one added later (a perf map's later line).
    if (best == nullptr || region.symbol.valid_from_ns > best->symbol.valid_from_ns ||
        (region.symbol.valid_from_ns == best->symbol.valid_from_ns && region.order > best->order)) {
      best = &region;
    }
  }
  return best != nullptr ? &best->symbol : nullptr;
}

}  // namespace hvprof::symbolizer
