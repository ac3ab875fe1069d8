#include "hvprof/report/views/table.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace hvprof::report {

namespace {

struct RowKey {
  uint16_t domain;
  uint32_t pid;
  uint32_t image;
  uint32_t symbol;
  uint32_t line;
  bool operator==(const RowKey&) const = default;
};

struct RowKeyHash {
  size_t operator()(const RowKey& key) const {
    uint64_t h = (uint64_t{key.image} << 32 | key.symbol) * 0x9E3779B97F4A7C15ULL;
    h ^= (uint64_t{key.line} << 16 | key.domain) + 0x7F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= uint64_t{key.pid} * 0xC2B2AE3D27D4EB4FULL + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

bool Matches(const std::vector<std::string>& globs, const Image& image) {
  return MatchesAnyGlob(globs, image.name) || MatchesAnyGlob(globs, image.long_name);
}

}  // namespace

bool KeepsIdle(const ReportOptions& options) {
  return options.include_idle ||
         std::find(options.domains.begin(), options.domains.end(), kIdleDomain) != options.domains.end();
}

std::vector<EventIdle> IdleByEvent(const Profile& profile) {
  std::vector<EventIdle> out;
  for (const store::EventRecord& event : profile.metadata().events) {
    EventIdle counted;
    counted.event = event.name;
    counted.counter = event.counter;
    for (const Entry& entry : profile.entries()) {
      if (entry.event != event.counter) continue;
      counted.samples += entry.count;
      if (entry.idle) counted.idle += entry.count;
    }
    for (const CpuIdle& cpu : profile.cpu_idle()) {
      if (cpu.event == event.counter) counted.cpus.push_back(cpu);
    }
    out.push_back(std::move(counted));
  }
  return out;
}

uint64_t DropRowsBelow(uint64_t first_total, double threshold, std::vector<Row>& rows) {
  if (threshold <= 0.0 || first_total == 0) return 0;
  return std::erase_if(rows, [&](const Row& row) {
    return 100.0 * static_cast<double>(row.samples[0]) / static_cast<double>(first_total) < threshold;
  });
}

namespace {

// The table's columns: one per event, or merged. A session that names no event (a Xen guest's
// agent started without dom0's --event: Xen does not tell a guest, and the session's notes say
// so) gets one unnamed column per counter its samples used; counter 0 if none, as the stack
// views take it. Returns each counter's column (-1: not shown).
Result<std::vector<int>> MakeColumns(const Profile& profile, const ReportOptions& options, Table& table) {
  const store::SessionMetadata& m = profile.metadata();
  std::vector<store::EventRecord> unnamed;
  if (m.events.empty()) {
    std::set<uint32_t> counters;
    for (const Entry& entry : profile.entries()) counters.insert(entry.event);
    if (counters.empty()) counters.insert(0);
    for (uint32_t counter : counters) {
      store::EventRecord event;
      event.counter = counter;
      event.name = fmt::format("counter {}", counter);
      event.unit_mask_name = "?";
      unnamed.push_back(std::move(event));
    }
  }
  std::vector<int> column_of(256, -1);
  for (const store::EventRecord& event : m.events.empty() ? unnamed : m.events) {
    if (!options.events.empty() &&
        std::find(options.events.begin(), options.events.end(), event.counter) == options.events.end()) {
      continue;
    }
    int found = -1;
    for (size_t c = 0; c < table.columns.size(); ++c) {
      if (options.merge_all || (options.merge_unit_masks && table.columns[c].event == event.name)) {
        found = static_cast<int>(c);
      }
    }
    if (found < 0) {
      Column column;
      column.event = options.merge_all ? "all events" : event.name;
      column.unit_mask = event.unit_mask_name.empty() ? fmt::format("{:#04x}", event.unit_mask) : event.unit_mask_name;
      column.count = event.count;
      table.columns.push_back(column);
      found = static_cast<int>(table.columns.size() - 1);
    } else {
      Column& column = table.columns[found];
      if (column.count != event.count) column.count = 0;
      if (options.merge_unit_masks || options.merge_all) column.unit_mask = "merged";
    }
    table.columns[found].counters.push_back(event.counter);
    if (event.counter < column_of.size()) column_of[event.counter] = found;
  }
  if (table.columns.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "--event selects none of the session's events");
  }
  return column_of;
}

// -d: each row's addresses, in address order.
void AttachDetails(std::vector<std::unordered_map<uint64_t, std::vector<uint64_t>>>& details, std::vector<Row>& rows) {
  for (size_t r = 0; r < rows.size(); ++r) {
    for (const auto& [address, samples] : details[r]) {
      Row detail;
      detail.address = address;
      detail.samples = samples;
      rows[r].details.push_back(std::move(detail));
    }
    std::sort(rows[r].details.begin(), rows[r].details.end(),
              [](const Row& a, const Row& b) { return a.address < b.address; });
  }
}

// Sorts by the keys in order; samples sort descending, names ascending; -r reverses it all.
// --by-process puts each process's rows together, processes by their samples; --by-domain
// each domain's.
void SortRows(const Profile& profile, const ReportOptions& options,
              std::map<std::pair<uint16_t, uint32_t>, uint64_t>& process_samples, std::vector<Row>& rows) {
  auto name_of_image = [&](const Row& row) -> const std::string& {
    const Image& image = profile.images()[row.image];
    return options.long_filenames ? image.long_name : image.name;
  };
  auto symbol_name = [&](const Row& row) -> std::string {
    return row.symbol == kNoIndex ? std::string() : profile.symbols()[row.symbol].name;
  };
  auto line_of = [&](const Row& row) -> std::pair<std::string, uint32_t> {
    if (row.line == kNoIndex) return {"", 0};
    return {profile.lines()[row.line].file, profile.lines()[row.line].line};
  };
  auto less = [&](const Row& a, const Row& b) {
    for (SortKey key : options.sort) {
      switch (key) {
        case SortKey::kSamples:
          if (a.samples[0] != b.samples[0]) return a.samples[0] > b.samples[0];
          break;
        case SortKey::kImage:
          if (name_of_image(a) != name_of_image(b)) return name_of_image(a) < name_of_image(b);
          break;
        case SortKey::kSymbol:
          if (symbol_name(a) != symbol_name(b)) return symbol_name(a) < symbol_name(b);
          break;
        case SortKey::kDebug:
          if (line_of(a) != line_of(b)) return line_of(a) < line_of(b);
          break;
        case SortKey::kVma:
          if (a.address != b.address) return a.address < b.address;
          break;
        case SortKey::kDomain:
          if (a.domain_id != b.domain_id) return a.domain_id < b.domain_id;
          break;
      }
    }
    // A stable, total order: the rest of the key.
    return std::tie(a.domain_id, a.pid, a.image, a.symbol, a.line) < std::tie(b.domain_id, b.pid, b.image, b.symbol, b.line);
  };
  std::sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    return options.reverse ? less(b, a) : less(a, b);
  });
  if (options.by_process) {
    // Processes by their samples, most first (-r: fewest), each process's rows together.
    auto samples_of = [&](const Row& row) { return process_samples[{row.domain_id, row.pid}]; };
    std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
      const uint64_t sa = samples_of(a), sb = samples_of(b);
      if (sa != sb) return options.reverse ? sa < sb : sa > sb;
      return std::tie(a.domain_id, a.pid) < std::tie(b.domain_id, b.pid);
    });
  }
  if (options.by_domain) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.domain_id < b.domain_id; });
  }
}

}  // namespace

bool ReportOptions::SelectsProcess(uint16_t domain, uint32_t pid) const {
  if (pids.empty() && processes.empty()) return true;
  return std::binary_search(pids.begin(), pids.end(), pid) ||
         std::binary_search(processes.begin(), processes.end(), std::pair{domain, pid});
}

bool MatchesAnyGlob(const std::vector<std::string>& globs, const std::string& name) {
  return std::any_of(globs.begin(), globs.end(),
                     [&](const std::string& glob) { return ::fnmatch(glob.c_str(), name.c_str(), 0) == 0; });
}

namespace {

// Whether --domain, --mode, --pid (and --comm), --image and -x keep an entry.
bool Selected(const Profile& profile, const ReportOptions& options, const std::set<std::string>& main_images,
              const Entry& entry) {
  if (!options.domains.empty() &&
      std::find(options.domains.begin(), options.domains.end(), entry.domain) == options.domains.end()) {
    return false;
  }
  if (!options.modes.empty() && std::find(options.modes.begin(), options.modes.end(), entry.mode) == options.modes.end()) {
    return false;
  }
  if (!options.SelectsProcess(entry.domain, entry.pid)) return false;
  const Image& image = profile.images()[entry.image];
  if (!options.images.empty() && !Matches(options.images, image)) return false;
  return !options.exclude_dependent || (entry.mode == sample_mode::kUser && main_images.count(image.path) != 0);
}

// A row of no samples yet, for `key` (whose pid is kNoPid unless the rows are per process).
Row NewRow(const Profile& profile, const RowKey& key, size_t ncolumns, bool per_domain) {
  Row row;
  if (per_domain) {
    row.domain = profile.DomainName(key.domain);
    row.domain_id = key.domain;
  }
  row.pid = key.pid;
  row.image = key.image;
  row.symbol = key.symbol;
  row.line = key.line;
  if (key.symbol != kNoIndex) row.address = profile.symbols()[key.symbol].start;
  row.samples.assign(ncolumns, 0);
  return row;
}

// Each entry's row in the finished table, from the row it was first counted in (`first_row`,
// before the threshold and the sort): each row found again by its key.
std::vector<uint32_t> FinalRows(const std::vector<Row>& rows, const std::unordered_map<RowKey, size_t, RowKeyHash>& index,
                                const std::vector<uint32_t>& first_row, const ReportOptions& options) {
  const bool per_domain = options.by_domain || options.by_process;
  std::vector<uint32_t> final_row(index.size(), kNoIndex);
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const RowKey key{per_domain ? row.domain_id : uint16_t{0}, options.by_process ? row.pid : kNoPid, row.image,
                     row.symbol, row.line};
    final_row[index.at(key)] = static_cast<uint32_t>(r);
  }
  std::vector<uint32_t> out(first_row.size(), kNoIndex);
  for (size_t e = 0; e < first_row.size(); ++e) {
    if (first_row[e] != kNoIndex) out[e] = final_row[first_row[e]];
  }
  return out;
}

// Each domain's samples per mode, named, with its role.
void FillDomains(const Profile& profile, std::map<uint16_t, DomainSummary>& domains, Table& table) {
  const store::SessionMetadata& m = profile.metadata();
  for (auto& [id, summary] : domains) {
    summary.name = profile.DomainName(id);
    for (const auto& record : m.domains) {
      if (record.id == id) summary.role = record.role;
    }
    if (id == kIdleDomain) summary.role = "idle";
    table.domains.push_back(summary);
  }
}

}  // namespace

Result<Table> BuildTable(const Profile& profile, const ReportOptions& options, std::vector<uint32_t>* row_of_entry) {
  const store::SessionMetadata& m = profile.metadata();
  Table table;
  table.view = options.view;

  HVPROF_TRY(column_of, MakeColumns(profile, options, table));
  const size_t ncolumns = table.columns.size();

  // -x: only samples in the applications' own executables.
  std::set<std::string> main_images;
  if (options.exclude_dependent) {
    for (const auto& domain : m.domains) {
      for (const std::string& path : profile.context().MainImages(domain.id)) main_images.insert(path);
    }
  }

  std::unordered_map<RowKey, size_t, RowKeyHash> index;
  std::vector<Row> rows;
  std::map<uint16_t, DomainSummary> domains;
  std::vector<std::unordered_map<uint64_t, std::vector<uint64_t>>> details;
  const bool per_domain = options.by_domain || options.by_process;
  const bool per_process = options.by_process;
  // --by-process: what the session calls each process (its comm), and each one's samples.
  std::map<std::pair<uint16_t, uint32_t>, std::string> comms;
  std::map<std::pair<uint16_t, uint32_t>, uint64_t> process_samples;
  if (per_process) {
    // A pid's latest process names it.
    for (const auto& domain : m.domains) {
      for (const auto& [pid, comm] : profile.context().Processes(domain.id)) comms.emplace(std::pair{domain.id, pid}, comm);
    }
  }
  // Pids are per domain: outside dom0, and without a domain column, the domain says whose.
  auto process_name = [&](uint16_t domain, uint32_t pid) {
    std::string name;
    if (pid == kNoPid) {
      name = "(no process)";
    } else if (auto it = comms.find({domain, pid}); it == comms.end() || it->second.empty()) {
      name = fmt::format("pid {}", pid);
    } else {
      name = fmt::format("{} ({})", it->second, pid);
    }
    return options.by_domain || domain == 0 ? name : profile.DomainName(domain) + ": " + name;
  };
  // --symbol, decided once per symbol.
  const bool keep_idle = KeepsIdle(options);
  std::vector<int8_t> symbol_shown(options.symbols.empty() ? 0 : profile.symbols().size(), -1);
  auto SymbolShown = [&](uint32_t symbol) {
    if (symbol >= symbol_shown.size()) return false;
    if (symbol_shown[symbol] < 0) {
      const std::string& name = profile.symbols()[symbol].name;
      symbol_shown[symbol] = options.SelectsSymbol(name);
    }
    return symbol_shown[symbol] == 1;
  };
  // With row_of_entry: each entry's row before the threshold and the sort.
  std::vector<uint32_t> first_row;
  if (row_of_entry != nullptr) first_row.assign(profile.entries().size(), kNoIndex);
  RowKey last_key{};
  uint32_t last_row = kNoIndex;
  for (size_t e = 0; e < profile.entries().size(); ++e) {
    const Entry& entry = profile.entries()[e];
    if (entry.event >= column_of.size() || column_of[entry.event] < 0) continue;
    if (!Selected(profile, options, main_images, entry)) continue;
    const size_t column = static_cast<size_t>(column_of[entry.event]);
    if (entry.idle && !keep_idle) {
      table.columns[column].idle += entry.count;
      continue;
    }
    table.columns[column].total += entry.count;

    DomainSummary& summary = domains[entry.domain];
    summary.domain = entry.domain;
    if (column == 0) summary.samples[entry.mode] += entry.count;
    if (!options.symbols.empty() && !SymbolShown(entry.symbol)) continue;

    if (per_process && column == 0) process_samples[{entry.domain, entry.pid}] += entry.count;
    RowKey key{per_domain ? entry.domain : uint16_t{0}, per_process ? entry.pid : kNoPid, entry.image,
               options.view == View::kImage ? kNoIndex : entry.symbol,
               options.view == View::kDebugInfo ? entry.line : kNoIndex};
    // Neighbouring entries mostly fall in one row (addresses of one function, in order).
    bool added = false;
    if (last_row == kNoIndex || !(key == last_key)) {
      const auto [it, inserted] = index.try_emplace(key, rows.size());
      added = inserted;
      last_key = key;
      last_row = static_cast<uint32_t>(it->second);
    }
    if (added) {
      rows.push_back(NewRow(profile, key, ncolumns, per_domain));
      if (per_process) rows.back().process = process_name(entry.domain, entry.pid);
      if (options.view == View::kDetails) details.emplace_back();
    }
    rows[last_row].samples[column] += entry.count;
    if (row_of_entry != nullptr && column == 0) first_row[e] = last_row;
    if (options.view == View::kDetails) {
      auto& per_address = details[last_row][entry.address];
      if (per_address.empty()) per_address.assign(ncolumns, 0);
      per_address[column] += entry.count;
    }
  }
  if (options.view == View::kDetails) AttachDetails(details, rows);

  // Threshold on the first column.
  table.hidden_rows += DropRowsBelow(table.columns[0].total, options.threshold, rows);

  SortRows(profile, options, process_samples, rows);
  table.rows = std::move(rows);
  if (row_of_entry != nullptr) *row_of_entry = FinalRows(table.rows, index, first_row, options);

  FillDomains(profile, domains, table);
  return table;
}

}  // namespace hvprof::report
