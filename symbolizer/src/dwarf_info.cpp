#include "dwarf_info.h"

#include <dwarf.h>

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <cstring>
#include <limits>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "interval_search.h"

namespace hvprof::symbolizer {
namespace {

constexpr uint32_t kNoUnit = std::numeric_limits<uint32_t>::max();
// Bounds that keep hostile DWARF from running away (no real unit comes close).
constexpr size_t kMaxRangesPerDie = 1 << 16;
constexpr size_t kMaxWalkStack = 1 << 14;

template <typename Entry>
void EmitInterval(std::vector<uint64_t>* starts, std::vector<Entry>* entries, uint64_t start,
                  Entry entry) {
  if (!starts->empty() && starts->back() == start) {
    entries->back() = entry;
    if (entries->size() >= 2 && (*entries)[entries->size() - 2] == entry) {
      starts->pop_back();
      entries->pop_back();
    }
    return;
  }
  if (!entries->empty() && entries->back() == entry) return;
  starts->push_back(start);
  entries->push_back(entry);
}

// The attributes of a subprogram or inlined-subroutine DIE the scope walk needs, read in one
// pass over the DIE (dwarf_attr would scan it once per attribute).
struct ScopeAttributes {
  bool has_code = false;    // DW_AT_low_pc or DW_AT_ranges
  bool has_ranges = false;  // DW_AT_ranges: read them with dwarf_ranges
  bool has_low = false;
  bool has_high = false;
  bool high_is_offset = false;
  Dwarf_Addr low = 0;
  Dwarf_Word high = 0;
  uint32_t call_file = 0;
  uint32_t call_line = 0;
  uint32_t call_column = 0;
};

uint32_t Udata(Dwarf_Attribute* attr) {
  Dwarf_Word value = 0;
  if (dwarf_formudata(attr, &value) != 0) return 0;
  return value > std::numeric_limits<uint32_t>::max() ? 0 : static_cast<uint32_t>(value);
}

int CollectScopeAttribute(Dwarf_Attribute* attr, void* arg) {
  auto* out = static_cast<ScopeAttributes*>(arg);
  switch (dwarf_whatattr(attr)) {
    case DW_AT_low_pc:
      out->has_code = true;
      out->has_low = dwarf_formaddr(attr, &out->low) == 0;
      break;
    case DW_AT_high_pc:
      // DWARF 4+ usually gives the size (a constant); DWARF 2/3 an address.
      if (dwarf_whatform(attr) == DW_FORM_addr || dwarf_whatform(attr) == DW_FORM_addrx ||
          dwarf_whatform(attr) == DW_FORM_GNU_addr_index) {
        Dwarf_Addr high = 0;
        out->has_high = dwarf_formaddr(attr, &high) == 0;
        out->high = high;
      } else {
        out->has_high = dwarf_formudata(attr, &out->high) == 0;
        out->high_is_offset = true;
      }
      break;
    case DW_AT_ranges:
      out->has_code = true;
      out->has_ranges = true;
      break;
    case DW_AT_call_file: out->call_file = Udata(attr); break;
    case DW_AT_call_line: out->call_line = Udata(attr); break;
    case DW_AT_call_column: out->call_column = Udata(attr); break;
    default: break;
  }
  return DWARF_CB_OK;
}

}  // namespace

struct DwarfInfo::Unit {
  struct Node {
    Dwarf_Off offset = 0;
    int32_t parent = -1;
    uint32_t call_file = 0;
    uint32_t call_line = 0;
    uint32_t call_column = 0;
    uint32_t range_begin = 0;
    uint32_t range_count = 0;
    bool inlined = false;
    bool names_loaded = false;
    const char* linkage_name = nullptr;
    const char* name = nullptr;
  };

  Dwarf_Die die{};
  const char* comp_dir = nullptr;
  // Relative file names joined with the compilation directory, by libdw's name.
  std::unordered_map<const char*, std::string> joined;
  bool lines_loaded = false;
  Dwarf_Lines* lines = nullptr;
  size_t line_count = 0;
  size_t line_cursor = 0;  // the row found last (queries come in address order)
  bool files_loaded = false;
  Dwarf_Files* files = nullptr;
  size_t file_count = 0;
  bool scopes_loaded = false;
  bool lines_queued = false;   // Prefetch() bookkeeping
  bool scopes_queued = false;
  std::vector<Node> nodes;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<uint64_t> scope_starts;
  std::vector<int32_t> scope_entries;
  size_t scope_cursor = 0;
};

DwarfInfo::DwarfInfo(ScopedDwarf dwarf) : dwarf_(std::move(dwarf)) {}
DwarfInfo::~DwarfInfo() = default;

ImageResult<std::unique_ptr<DwarfInfo>> DwarfInfo::Open(Elf* elf, const std::string& path) {
  ScopedDwarf dwarf(dwarf_begin_elf(elf, DWARF_C_READ, nullptr));
  if (!dwarf.valid()) {
    return MakeFailure(Reason::kNoLineInfo,
                       fmt::format("{}: cannot read DWARF: {}", path, dwarf_errmsg(-1)));
  }
  auto info = std::unique_ptr<DwarfInfo>(new DwarfInfo(std::move(dwarf)));
  info->BuildUnitIndex();
  return info;
}

void DwarfInfo::BuildUnitIndex() {
  std::vector<std::tuple<uint64_t, uint64_t, uint32_t>> ranges;
  Dwarf_CU* cu = nullptr;
  Dwarf_Half version = 0;
  uint8_t unit_type = 0;
  Dwarf_Die cudie;
  Dwarf_Die subdie;
  size_t split_units = 0;
  while (dwarf_get_units(dwarf_.get(), cu, &cu, &version, &unit_type, &cudie, &subdie) == 0) {
    if (unit_type == DW_UT_skeleton || unit_type == DW_UT_split_compile) {
      ++split_units;
      continue;
    }
    if (unit_type != DW_UT_compile) continue;  // type and partial units hold no code
    auto unit = std::make_unique<Unit>();
    unit->die = cudie;
    Dwarf_Attribute comp_dir;
    if (dwarf_attr(&cudie, DW_AT_comp_dir, &comp_dir) != nullptr) {
      unit->comp_dir = dwarf_formstring(&comp_dir);
    }
    auto index = static_cast<uint32_t>(units_.size());
    bool any = false;
    Dwarf_Addr base = 0;
    Dwarf_Addr start = 0;
    Dwarf_Addr end = 0;
    ptrdiff_t offset = 0;
    size_t count = 0;
    while (count++ < kMaxRangesPerDie &&
           (offset = dwarf_ranges(&cudie, offset, &base, &start, &end)) > 0) {
      if (end > start) {
        ranges.emplace_back(start, end, index);
        any = true;
      }
    }
    if (!any) {
      // Some producers give the unit no ranges: take them from its line table.
      LoadLines(unit.get());
      uint64_t lo = std::numeric_limits<uint64_t>::max();
      uint64_t hi = 0;
      for (size_t i = 0; i < unit->line_count; ++i) {
        Dwarf_Addr a = 0;
        if (dwarf_lineaddr(dwarf_onesrcline(unit->lines, i), &a) != 0) continue;
        lo = std::min<uint64_t>(lo, a);
        hi = std::max<uint64_t>(hi, a);
      }
      if (hi > lo) ranges.emplace_back(lo, hi, index);
    }
    units_.push_back(std::move(unit));
  }
  if (split_units != 0) {
    warnings_.push_back(fmt::format("{} split-DWARF units skipped: .dwo/.dwp files are not "
                                    "supported",
                                    split_units));
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  bool first = true;
  for (const auto& [start, end, index] : ranges) {
    if (!first && end <= covered) continue;
    uint64_t s = first ? start : std::max(start, covered);
    if (!first && s > covered) EmitInterval(&unit_starts_, &unit_entries_, covered, kNoUnit);
    EmitInterval(&unit_starts_, &unit_entries_, s, index);
    covered = end;
    first = false;
  }
  if (!first) EmitInterval(&unit_starts_, &unit_entries_, covered, kNoUnit);
}

DwarfInfo::Unit* DwarfInfo::FindUnit(uint64_t address, size_t* cursor) {
  size_t i = FindInterval(unit_starts_, address, cursor);
  if (i == kNoInterval || unit_entries_[i] == kNoUnit) return nullptr;
  return units_[unit_entries_[i]].get();
}

void DwarfInfo::Prefetch(std::span<const uint64_t> addresses, bool scopes, unsigned threads) {
  std::vector<Unit*> lines;
  std::vector<Unit*> walks;
  size_t cursor = 0;
  Unit* last = nullptr;
  for (uint64_t a : addresses) {
    Unit* unit = FindUnit(a, &cursor);
    if (unit == nullptr || unit == last) continue;
    last = unit;
    if (!unit->lines_loaded && !unit->lines_queued) {
      unit->lines_queued = true;
      lines.push_back(unit);
    }
    if (scopes && !unit->scopes_loaded && !unit->scopes_queued) {
      unit->scopes_queued = true;
      walks.push_back(unit);
    }
  }
  std::atomic<size_t> next{0};
  auto walk = [this, &walks, &next] {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < walks.size();) {
      LoadScopes(walks[i]);
    }
  };
  std::vector<std::thread> helpers;
  if (walks.size() >= 2) {
    for (unsigned t = 1; t < threads && t < walks.size(); ++t) {
      try {
        helpers.emplace_back(walk);
      } catch (const std::system_error&) {
        break;  // no more threads: the rest is done here
      }
    }
  }
  for (Unit* unit : lines) LoadLines(unit);
  walk();
  for (std::thread& helper : helpers) helper.join();
  for (Unit* unit : lines) unit->lines_queued = false;
  for (Unit* unit : walks) unit->scopes_queued = false;
}

void DwarfInfo::LoadLines(Unit* unit) {
  if (unit->lines_loaded) return;
  unit->lines_loaded = true;
  if (dwarf_getsrclines(&unit->die, &unit->lines, &unit->line_count) != 0) {
    unit->lines = nullptr;
    unit->line_count = 0;
  }
  lines_loaded_ += unit->line_count;
}

bool DwarfInfo::FindLine(uint64_t address, SourceLocation* out, size_t* cursor) {
  Unit* unit = FindUnit(address, cursor);
  if (unit == nullptr) return false;
  LoadLines(unit);
  if (unit->line_count == 0) return false;
  // libdw sorts the rows by address: find the last row at or below the address. Queries come
  // sorted, so gallop forward from the previous answer before searching.
  auto row_address = [unit](size_t i) {
    Dwarf_Addr a = 0;
    dwarf_lineaddr(dwarf_onesrcline(unit->lines, i), &a);
    return a;
  };
  size_t lo = 0;
  size_t hi = unit->line_count;
  if (unit->line_cursor < unit->line_count && row_address(unit->line_cursor) <= address) {
    lo = unit->line_cursor;
    size_t step = 1;
    while (lo + step < unit->line_count && row_address(lo + step) <= address) {
      lo += step;
      step *= 2;
    }
    hi = std::min(unit->line_count, lo + step);
  }
  // Invariant: rows before lo are <= address, rows from hi on are above it.
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (row_address(mid) <= address) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  unit->line_cursor = lo == 0 ? 0 : lo - 1;
  if (lo == 0) return false;
  Dwarf_Line* line = dwarf_onesrcline(unit->lines, lo - 1);
  bool end_sequence = false;
  if (line == nullptr || dwarf_lineendsequence(line, &end_sequence) != 0 || end_sequence) {
    return false;
  }
  int number = 0;
  int column = 0;
  dwarf_lineno(line, &number);
  dwarf_linecol(line, &column);
  out->file = Absolute(unit, dwarf_linesrc(line, nullptr, nullptr));
  out->line = number > 0 ? static_cast<uint32_t>(number) : 0;
  out->column = column > 0 ? static_cast<uint32_t>(column) : 0;
  return true;
}

void DwarfInfo::LoadScopes(Unit* unit) {
  if (unit->scopes_loaded) return;
  unit->scopes_loaded = true;
  struct Pending {
    Dwarf_Die die;
    int32_t parent;
  };
  std::vector<Pending> stack;
  Dwarf_Die child;
  if (dwarf_child(&unit->die, &child) == 0) stack.push_back({child, -1});
  while (!stack.empty()) {
    Pending p = stack.back();
    stack.pop_back();
    Dwarf_Die sibling;
    if (dwarf_siblingof(&p.die, &sibling) == 0) stack.push_back({sibling, p.parent});
    int tag = dwarf_tag(&p.die);
    int32_t child_parent = p.parent;
    bool descend = false;
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
      Unit::Node node;
      node.offset = dwarf_dieoffset(&p.die);
      node.parent = p.parent;
      node.inlined = tag == DW_TAG_inlined_subroutine;
      node.range_begin = static_cast<uint32_t>(unit->ranges.size());
      ScopeAttributes attributes;
      dwarf_getattrs(&p.die, CollectScopeAttribute, &attributes, 0);
      if (attributes.has_code && !attributes.has_ranges && attributes.has_low &&
          attributes.has_high) {
        // The common case, without a second pass over the DIE.
        Dwarf_Addr end = attributes.high_is_offset ? attributes.low + attributes.high
                                                   : attributes.high;
        if (end > attributes.low) unit->ranges.emplace_back(attributes.low, end);
      } else if (attributes.has_code) {
        Dwarf_Addr base = 0;
        Dwarf_Addr start = 0;
        Dwarf_Addr end = 0;
        ptrdiff_t offset = 0;
        size_t count = 0;
        while (count++ < kMaxRangesPerDie &&
               (offset = dwarf_ranges(&p.die, offset, &base, &start, &end)) > 0) {
          if (end > start) unit->ranges.emplace_back(start, end);
        }
      }
      node.range_count = static_cast<uint32_t>(unit->ranges.size() - node.range_begin);
      // Without code (declarations, abstract instances) neither it nor its children matter.
      if (node.range_count != 0) {
        if (node.inlined) {
          node.call_file = attributes.call_file;
          node.call_line = attributes.call_line;
          node.call_column = attributes.call_column;
        }
        child_parent = static_cast<int32_t>(unit->nodes.size());
        unit->nodes.push_back(node);
        descend = true;
      }
    } else if (tag == DW_TAG_lexical_block || tag == DW_TAG_namespace || tag == DW_TAG_module) {
      descend = true;
    }
    if (descend && stack.size() < kMaxWalkStack && dwarf_haschildren(&p.die) > 0 &&
        dwarf_child(&p.die, &child) == 0) {
      stack.push_back({child, child_parent});
    }
  }

  // Flatten: at each address the deepest scope wins.
  std::vector<uint32_t> depth(unit->nodes.size(), 0);
  struct Item {
    uint64_t start;
    uint64_t end;
    uint32_t node;
  };
  std::vector<Item> items;
  items.reserve(unit->ranges.size());
  for (uint32_t n = 0; n < unit->nodes.size(); ++n) {
    const Unit::Node& node = unit->nodes[n];
    if (node.parent >= 0) depth[n] = depth[static_cast<uint32_t>(node.parent)] + 1;
    for (uint32_t r = 0; r < node.range_count; ++r) {
      const auto& range = unit->ranges[node.range_begin + r];
      items.push_back({range.first, range.second, n});
    }
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.start != b.start ? a.start < b.start : a.node < b.node;
  });
  std::vector<uint64_t> points;
  points.reserve(items.size() * 2);
  for (const Item& item : items) {
    points.push_back(item.start);
    points.push_back(item.end);
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  auto lower = [&items, &depth](uint32_t a, uint32_t b) {
    const Item& x = items[a];
    const Item& y = items[b];
    if (depth[x.node] != depth[y.node]) return depth[x.node] < depth[y.node];
    if (x.start != y.start) return x.start < y.start;
    return x.node < y.node;
  };
  std::priority_queue<uint32_t, std::vector<uint32_t>, decltype(lower)> active(lower);
  size_t next = 0;
  for (uint64_t p : points) {
    while (next < items.size() && items[next].start <= p) active.push(static_cast<uint32_t>(next++));
    while (!active.empty() && items[active.top()].end <= p) active.pop();
    int32_t entry = active.empty() ? -1 : static_cast<int32_t>(items[active.top()].node);
    EmitInterval(&unit->scope_starts, &unit->scope_entries, p, entry);
  }
  unit->nodes.shrink_to_fit();
  unit->ranges.shrink_to_fit();
  unit->scope_starts.shrink_to_fit();
  unit->scope_entries.shrink_to_fit();
}

void DwarfInfo::LoadNames(Unit* unit, size_t index) {
  Unit::Node& node = unit->nodes[index];
  if (node.names_loaded) return;
  node.names_loaded = true;
  Dwarf_Die die;
  if (dwarf_offdie(dwarf_.get(), node.offset, &die) == nullptr) return;
  Dwarf_Attribute attr;
  if (dwarf_attr_integrate(&die, DW_AT_linkage_name, &attr) != nullptr ||
      dwarf_attr_integrate(&die, DW_AT_MIPS_linkage_name, &attr) != nullptr) {
    node.linkage_name = dwarf_formstring(&attr);
  }
  if (dwarf_attr_integrate(&die, DW_AT_name, &attr) != nullptr) {
    node.name = dwarf_formstring(&attr);
  }
}

const char* DwarfInfo::FileName(Unit* unit, uint32_t index) {
  if (!unit->files_loaded) {
    unit->files_loaded = true;
    if (dwarf_getsrcfiles(&unit->die, &unit->files, &unit->file_count) != 0) {
      unit->files = nullptr;
      unit->file_count = 0;
    }
  }
  if (unit->files == nullptr || index >= unit->file_count) return nullptr;
  return Absolute(unit, dwarf_filesrc(unit->files, index, nullptr, nullptr));
}

const char* DwarfInfo::Absolute(Unit* unit, const char* file) {
  if (file == nullptr) return nullptr;
  bool relative = file[0] != '/' && unit->comp_dir != nullptr && unit->comp_dir[0] != '\0';
  if (!relative && std::strstr(file, "//") == nullptr) return file;
  auto [it, inserted] = unit->joined.try_emplace(file);
  if (inserted) {
    std::string joined;
    if (relative) {
      joined = unit->comp_dir;
      joined += '/';
    }
    joined += file;
    // Directory entries sometimes end in '/': "asm//msr-trace.h" -> "asm/msr-trace.h".
    std::string& clean = it->second;
    clean.reserve(joined.size());
    for (char c : joined) {
      if (c == '/' && !clean.empty() && clean.back() == '/') continue;
      clean += c;
    }
  }
  return it->second.c_str();
}

void DwarfInfo::FindScopes(uint64_t address, std::vector<ScopeFrame>* out, size_t* cursor) {
  out->clear();
  Unit* unit = FindUnit(address, cursor);
  if (unit == nullptr) return;
  LoadScopes(unit);
  size_t i = FindInterval(unit->scope_starts, address, &unit->scope_cursor);
  if (i == kNoInterval) return;
  int32_t node = unit->scope_entries[i];
  size_t guard = 0;
  while (node >= 0 && guard++ < unit->nodes.size()) {
    auto n = static_cast<size_t>(node);
    LoadNames(unit, n);
    const Unit::Node& s = unit->nodes[n];
    ScopeFrame frame;
    frame.linkage_name = s.linkage_name;
    frame.name = s.name;
    frame.inlined = s.inlined;
    frame.range_start = unit->ranges[s.range_begin].first;
    for (uint32_t r = 0; r < s.range_count; ++r) {
      const auto& range = unit->ranges[s.range_begin + r];
      if (range.first <= address && address < range.second) {
        frame.range_start = range.first;
        break;
      }
    }
    if (s.inlined) {
      frame.call_site.file = FileName(unit, s.call_file);
      frame.call_site.line = s.call_line;
      frame.call_site.column = s.call_column;
    }
    out->push_back(frame);
    node = s.parent;
  }
}

uint64_t DwarfInfo::FootprintBytes() const {
  uint64_t bytes = lines_loaded_ * 48 + units_.size() * sizeof(Unit) +
                   unit_starts_.capacity() * sizeof(uint64_t) +
                   unit_entries_.capacity() * sizeof(uint32_t);
  for (const auto& unit : units_) {
    bytes += unit->nodes.capacity() * sizeof(Unit::Node) +
             unit->ranges.capacity() * sizeof(unit->ranges[0]) +
             unit->scope_starts.capacity() * sizeof(uint64_t) +
             unit->scope_entries.capacity() * sizeof(int32_t);
  }
  return bytes;
}

std::vector<std::string> DwarfInfo::TakeWarnings() { return std::exchange(warnings_, {}); }

}  // namespace hvprof::symbolizer
