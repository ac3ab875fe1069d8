#include "symbol_table.h"

#include <elf.h>

#include <algorithm>
#include <limits>
#include <queue>
#include <utility>

#include "hvprof/symbolizer/types.h"
#include "interval_search.h"

namespace hvprof::symbolizer {
namespace {

int TypeRank(uint8_t type) {
  switch (type) {
    case STT_FUNC:
    case STT_GNU_IFUNC: return 2;
    case STT_NOTYPE: return 1;
    default: return 0;
  }
}

uint64_t EndOf(const SymbolRecord& s) {
  uint64_t end = s.start + s.size;
  return end < s.start ? std::numeric_limits<uint64_t>::max() : end;
}

// True if `a` should be chosen over `b` when both are candidates for the same address.
bool Better(const std::vector<SymbolRecord>& syms, uint32_t a, uint32_t b) {
  const SymbolRecord& x = syms[a];
  const SymbolRecord& y = syms[b];
  if (x.start != y.start) return x.start > y.start;
  if (BindingRank(x.binding) != BindingRank(y.binding)) {
    return BindingRank(x.binding) > BindingRank(y.binding);
  }
  if (x.size != y.size) return x.size < y.size;
  if (TypeRank(x.type) != TypeRank(y.type)) return TypeRank(x.type) > TypeRank(y.type);
  return a < b;
}

class IntervalEmitter {
 public:
  IntervalEmitter(std::vector<uint64_t>* starts, std::vector<uint32_t>* entries)
      : starts_(starts), entries_(entries) {}

  void Emit(uint64_t start, uint32_t entry) {
    if (!starts_->empty() && starts_->back() == start) {
      // The previous interval was empty: replace it.
      entries_->back() = entry;
      if (entries_->size() >= 2 && (*entries_)[entries_->size() - 2] == entry) {
        starts_->pop_back();
        entries_->pop_back();
      }
      return;
    }
    if (!entries_->empty() && entries_->back() == entry) return;
    starts_->push_back(start);
    entries_->push_back(entry);
  }

 private:
  std::vector<uint64_t>* starts_;
  std::vector<uint32_t>* entries_;
};

// Emits the intervals of one section over [lo, hi). `members` are its symbols sorted by start.
void SweepSection(const std::vector<SymbolRecord>& syms, const std::vector<uint32_t>& members,
                  uint32_t section, uint64_t lo, uint64_t hi, IntervalEmitter* out) {
  std::vector<uint64_t> points;
  points.reserve(members.size() * 2 + 1);
  points.push_back(lo);
  for (uint32_t m : members) {
    const SymbolRecord& s = syms[m];
    if (s.start > lo && s.start < hi) points.push_back(s.start);
    if (s.sized) {
      uint64_t end = EndOf(s);
      if (end > lo && end < hi) points.push_back(end);
    }
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());

  auto worse = [&syms](uint32_t a, uint32_t b) { return Better(syms, b, a); };
  std::priority_queue<uint32_t, std::vector<uint32_t>, decltype(worse)> active(worse);
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  uint32_t sizeless = kNone;
  uint64_t min_label = 0;        // greatest end of a sized symbol seen so far
  uint32_t last_ended = kNone;   // the sized symbol with that end
  size_t next = 0;

  for (uint64_t p : points) {
    while (next < members.size() && syms[members[next]].start <= p) {
      uint32_t m = members[next++];
      const SymbolRecord& s = syms[m];
      if (s.sized) {
        active.push(m);
        uint64_t end = EndOf(s);
        if (last_ended == kNone || end > min_label) {
          min_label = end;
          last_ended = m;
        }
      } else if (sizeless == kNone || Better(syms, m, sizeless)) {
        sizeless = m;
      }
    }
    while (!active.empty() && EndOf(syms[active.top()]) <= p) active.pop();

    uint32_t entry;
    if (!active.empty()) {
      entry = SymbolTable::Pack(SymbolTable::Kind::kSymbol, active.top());
    } else if (sizeless != kNone && (last_ended == kNone || syms[sizeless].start >= min_label)) {
      entry = SymbolTable::Pack(SymbolTable::Kind::kSymbol, sizeless);
    } else if (last_ended != kNone) {
      entry = SymbolTable::Pack(SymbolTable::Kind::kPastEnd, last_ended);
    } else {
      entry = SymbolTable::Pack(SymbolTable::Kind::kNoSymbol, section);
    }
    out->Emit(p, entry);
  }
}

}  // namespace

int BindingRank(uint8_t binding) {
  switch (static_cast<Binding>(binding)) {
    case Binding::kGlobal: return 2;
    case Binding::kWeak: return 1;
    case Binding::kLocal: return 0;
  }
  return 0;
}

SymbolTable SymbolTable::BuildElf(std::vector<SymbolRecord> symbols,
                                  std::vector<SectionRange> sections,
                                  std::vector<std::pair<uint64_t, uint64_t>> loads) {
  SymbolTable table;
  // Loadable ranges, merged.
  if (loads.empty()) {
    for (const SectionRange& s : sections) loads.emplace_back(s.start, s.end);
  }
  std::erase_if(loads, [](const auto& l) { return l.second <= l.first; });
  std::sort(loads.begin(), loads.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& l : loads) {
    if (!merged.empty() && l.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, l.second);
    } else {
      merged.push_back(l);
    }
  }

  // Sections in address order, each clipped so that none overlaps the one before.
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < sections.size(); ++i) {
    if (sections[i].end > sections[i].start) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&sections](uint32_t a, uint32_t b) {
    return sections[a].start != sections[b].start ? sections[a].start < sections[b].start : a < b;
  });
  std::vector<std::pair<uint64_t, uint64_t>> clipped(sections.size());
  uint64_t covered = 0;
  for (uint32_t i : order) {
    uint64_t start = std::max(sections[i].start, covered);
    clipped[i] = {start, std::max(start, sections[i].end)};
    covered = std::max(covered, sections[i].end);
  }

  // Members of each section, by start.
  std::vector<std::vector<uint32_t>> members(sections.size());
  for (uint32_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].section < sections.size()) members[symbols[i].section].push_back(i);
  }
  for (auto& list : members) {
    std::sort(list.begin(), list.end(), [&symbols](uint32_t a, uint32_t b) {
      return symbols[a].start != symbols[b].start ? symbols[a].start < symbols[b].start : a < b;
    });
  }

  IntervalEmitter out(&table.starts_, &table.entries_);
  const uint32_t no_symbol = Pack(Kind::kNoSymbol, kNoSection);
  for (size_t li = 0; li < merged.size(); ++li) {
    auto [load_start, load_end] = merged[li];
    uint64_t pos = load_start;
    for (uint32_t i : order) {
      uint64_t s = std::max(clipped[i].first, load_start);
      uint64_t e = std::min(clipped[i].second, load_end);
      if (s >= e || s < pos) continue;
      if (s > pos) out.Emit(pos, no_symbol);
      SweepSection(symbols, members[i], i, s, e, &out);
      pos = e;
    }
    if (pos < load_end) out.Emit(pos, no_symbol);
    out.Emit(load_end, Pack(Kind::kOutside, 0));
  }
  if (table.starts_.empty()) {
    table.starts_.push_back(0);
    table.entries_.push_back(Pack(Kind::kOutside, 0));
  }
  // The symbols in address order (symbol table order among equal starts, so that every order
  // decided by index stays the same): sorted lookups then read them one after the other rather
  // than all over the table.
  {
    std::vector<uint32_t> by_address(symbols.size());
    for (uint32_t i = 0; i < by_address.size(); ++i) by_address[i] = i;
    std::stable_sort(by_address.begin(), by_address.end(),
                     [&symbols](uint32_t a, uint32_t b) { return symbols[a].start < symbols[b].start; });
    std::vector<uint32_t> moved_to(symbols.size());
    std::vector<SymbolRecord> sorted(symbols.size());
    for (uint32_t i = 0; i < by_address.size(); ++i) {
      moved_to[by_address[i]] = i;
      sorted[i] = symbols[by_address[i]];
    }
    for (uint32_t& entry : table.entries_) {
      const auto kind = static_cast<Kind>(entry >> 30);
      if (kind == Kind::kSymbol || kind == Kind::kPastEnd) entry = Pack(kind, moved_to[entry & kNoSection]);
    }
    symbols = std::move(sorted);
  }
  table.symbols_ = std::move(symbols);
  table.sections_ = std::move(sections);
  table.starts_.shrink_to_fit();
  table.entries_.shrink_to_fit();
  return table;
}

SymbolTable SymbolTable::FromIntervals(std::vector<SymbolRecord> symbols,
                                       std::vector<SectionRange> sections,
                                       std::vector<uint64_t> starts,
                                       std::vector<uint32_t> entries) {
  SymbolTable table;
  table.symbols_ = std::move(symbols);
  table.sections_ = std::move(sections);
  table.starts_ = std::move(starts);
  table.entries_ = std::move(entries);
  if (table.starts_.empty() || table.starts_.size() != table.entries_.size()) {
    table.starts_.assign(1, 0);
    table.entries_.assign(1, Pack(Kind::kOutside, 0));
  }
  return table;
}

SymbolTable::Hit SymbolTable::Lookup(uint64_t address, size_t* cursor) const {
  size_t i = FindInterval(starts_, address, cursor);
  if (i == kNoInterval) return Hit{Kind::kOutside, 0};
  uint32_t e = entries_[i];
  return Hit{static_cast<Kind>(e >> 30), e & kNoSection};
}

uint64_t SymbolTable::FootprintBytes() const {
  return symbols_.capacity() * sizeof(SymbolRecord) + starts_.capacity() * sizeof(uint64_t) +
         entries_.capacity() * sizeof(uint32_t) + sections_.capacity() * sizeof(SectionRange);
}

}  // namespace hvprof::symbolizer
