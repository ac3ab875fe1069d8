// opreport's flat views over a Profile: images, symbols, details and source lines, filtered,
// sorted and thresholded into a Table. Building the table (what rows, what counts) is separate
// from printing it (writers/text.h, writers/csv.h, writers/json.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/model.h"

namespace hvprof::report {

enum class View {
  kImage,      // the default: one row per image
  kSymbol,     // -l: one row per symbol
  kDetails,    // -d: per symbol, then one row per sampled address
  kDebugInfo,  // -g: one row per symbol and source line
};

enum class SortKey { kSamples, kImage, kSymbol, kDebug, kVma, kDomain };

// Whether `name` matches one of `globs` (fnmatch(3), as --symbol and --image take them).
bool MatchesAnyGlob(const std::vector<std::string>& globs, const std::string& name);

struct ReportOptions {
  View view = View::kImage;
  bool by_domain = false;           // --by-domain: rows per domain first
  // --by-process: rows per process (domain and pid), processes by their samples, most first;
  // as perf report --sort pid. Kernel samples count for the process they interrupted.
  bool by_process = false;
  std::vector<uint16_t> domains;    // --domain: only these
  std::vector<uint8_t> modes;       // --mode: only these (0 user, 1 kernel, 2 hypervisor)
  std::vector<std::string> images;  // --image: only images matching these globs (name or path)
  std::vector<uint32_t> events;     // --event: only these counters
  // --symbol: only rows of symbols matching these globs; percentages stay shares of all the
  // samples the other filters keep.
  std::vector<std::string> symbols;
  // --pid (in any domain) and --comm (resolved against the session, domain by domain): only
  // samples taken in these processes (a kernel sample counts for the process it interrupted);
  // both sorted. Needs LoadOptions::processes. SelectsProcess says whether a sample's is one.
  std::vector<uint32_t> pids;
  std::vector<std::pair<uint16_t, uint32_t>> processes;
  bool SelectsProcess(uint16_t domain, uint32_t pid) const;
  // Whether `name` matches one of --symbol's globs; true when there are none.
  bool SelectsSymbol(const std::string& name) const { return symbols.empty() || MatchesAnyGlob(symbols, name); }
  double threshold = 0.0;           // -t: hide rows below this percent (of the first column)
  std::vector<SortKey> sort = {SortKey::kSamples};
  bool reverse = false;             // -r
  bool merge_unit_masks = false;    // -m unitmask: one column per event name
  bool merge_all = false;           // -m all: one column for every event
  bool show_address = false;        // -w
  bool long_filenames = false;      // -f
  bool accumulated = false;         // -a
  bool global_percent = false;      // -%: details relative to all samples
  bool exclude_dependent = false;   // -x: only the applications' own images
  bool no_header = false;           // -n
  bool verbose = false;             // -V: reasons for unresolved addresses
  // --include-idle: keep the idle loop's samples (Entry::idle) as rows and in the shares. By
  // default they are counted apart (Column::idle) and left out, unless --domain names idle.
  bool include_idle = false;
  bool color = false;               // text: ANSI colours (--color)
};

struct Column {
  std::string event;      // event name, or "all events" when merged
  std::string unit_mask;  // name or hex
  std::vector<uint32_t> counters;
  uint64_t count = 0;     // events per sample (0 when merged from different counts)
  uint64_t total = 0;     // samples in this column after filters
  // Idle samples the filters kept, left out of `total` and the rows (0 with include_idle).
  uint64_t idle = 0;
};

struct Row {
  std::string domain;      // by-domain view: the domain's name
  uint16_t domain_id = 0;
  // by-process view: the pid (kNoPid: none, e.g. the hypervisor's own or the idle loop), and
  // the process as printed: "COMM (PID)", "pid PID" when the session has no name for it.
  uint32_t pid = kNoPid;
  std::string process;
  uint32_t image = kNoIndex;
  uint32_t symbol = kNoIndex;
  uint32_t line = kNoIndex;
  uint64_t address = 0;    // details rows and -w
  std::vector<uint64_t> samples;  // per column
  std::vector<Row> details;       // -d: sampled addresses of a symbol
};

// Whether the idle loop's samples stay in the shares: --include-idle, or --domain names idle.
bool KeepsIdle(const ReportOptions& options);

// The idle loop's share of one event of the session, over all its samples (before any filter),
// and per physical CPU where the session says on which CPU each sample was taken.
struct EventIdle {
  std::string event;
  uint32_t counter = 0;
  uint64_t samples = 0;
  uint64_t idle = 0;
  std::vector<CpuIdle> cpus;
};
std::vector<EventIdle> IdleByEvent(const Profile& profile);

// Samples per domain and mode, for the header and --by-domain summaries.
struct DomainSummary {
  uint16_t domain;
  std::string name;
  std::string role;
  uint64_t samples[sample_mode::kCount] = {};  // per mode (sample_mode::), first column
};

struct Table {
  View view = View::kImage;
  std::vector<Column> columns;
  std::vector<Row> rows;
  std::vector<DomainSummary> domains;
  uint64_t hidden_rows = 0;  // below the threshold
};

// Removes the rows whose first column is under `threshold` percent of `first_total` (nothing when
// either is 0): how many went. BuildTable applies ReportOptions::threshold so; a caller that
// wants a table both whole and thresholded builds it once and drops rows from a copy.
uint64_t DropRowsBelow(uint64_t first_total, double threshold, std::vector<Row>& rows);

// With `row_of_entry`, also where each of profile.entries() went: the index of its row in the
// table, or kNoIndex for entries the filters left out, of another column than the first, or in
// rows under the threshold.
Result<Table> BuildTable(const Profile& profile, const ReportOptions& options,
                         std::vector<uint32_t>* row_of_entry = nullptr);

}  // namespace hvprof::report
