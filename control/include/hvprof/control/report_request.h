// hvprof-report's command line, read into a typed request: which report, of what, in which
// format, to where. Every rule that refuses a combination of options lives here, where a unit
// test reaches it without running the program (tests/unit/report_request_test.cpp); the report
// itself is made by RunReport (report_command.h) and printed by the main.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/compare.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/stacks.h"
#include "hvprof/report/views/table.h"
#include "hvprof/report/views/timeline.h"

namespace hvprof::control {

// --format.
enum class ReportFormat : uint8_t { kText, kCsv, kJson, kFolded, kPprof, kHtml, kPerfetto };
// "text", "csv", ... ("chrome-json" is perfetto's other name), or nothing.
std::optional<ReportFormat> ReportFormatFromName(std::string_view name);
std::string_view ReportFormatName(ReportFormat format);

// What the command asks for, one kind each.
enum class ReportKind : uint8_t {
  kHelp,       // --help: ReportUsage()
  kVersion,    // --version
  kList,       // --list: the sessions
  kTable,      // images, symbols (-l), instructions (-d), lines (-g), per domain or process
  kStacks,     // whole stacks: folded, pprof, html
  kCallgraph,  // -c
  kDiff,       // --diff BASE NEW, or { BASE... } { NEW... }
  kSched,      // --sched and/or --timeline: the scheduling records
};

// --sched and --timeline.
struct SchedRequest {
  bool sched = false;
  bool timeline = false;
  bool samples = false;  // --sched -l: each domain's CPU time beside its sample share
  uint32_t buckets = report::kDefaultTimelineBuckets;
  uint32_t top = 10;
};

// --push: where the stacks go besides the report.
struct PushRequest {
  std::string url;  // empty: no push
  std::string app = "hvprof";
  std::string tenant;
};

struct ReportRequest {
  ReportKind kind = ReportKind::kTable;
  ReportFormat format = ReportFormat::kText;
  std::string output;        // -o; empty (or "-"): standard output
  std::string session;       // the one session reported; empty: the one report::ChooseSession picks
  std::string session_root;  // --session-dir
  // --since, --until, --last: continuous mode's windows in this range, merged (report::LoadWindows),
  // instead of one session.
  std::optional<report::TimeRange> range;
  // The tables' view and filters (the colour decided for the terminal the report goes to).
  report::ReportOptions table;
  // What the command line says of loading; the session's own fields (build-id roots, the
  // directory shown) are added once it is opened.
  report::LoadOptions load;
  // --domain and --event as given: names are resolved against each session.
  std::vector<std::string> domains;
  std::vector<std::string> events;
  std::vector<std::string> comms;  // --comm as given: resolved to pids against the session
  std::vector<uint32_t> tids;      // --tid: the stack views' threads
  report::StackRoot root = report::StackRoot::kDomain;  // folded, html, stack diffs
  // --stack-root was given; without it, folded and html stacks of a linux session start at their
  // process (RunReport), those of other sessions at their domain.
  bool root_chosen = false;
  bool children = false;                                // -c --children
  bool timing = false;                                  // --timing
  PushRequest push;
  // kDiff: the two sides and the comparison (its load, table, domains and events are the
  // fields above), and --fail-on-regression's points (negative: not asked).
  report::DiffRequest diff;
  double fail_points = -1;
  SchedRequest sched;
};

// hvprof-report's exit statuses beyond 0 (complete), 1 (no report) and 2 (bad usage).
inline constexpr int kReportIncomplete = 3;  // printed, but damaged samples or images missing
inline constexpr int kReportPushFailed = 4;  // printed, the push failed
inline constexpr int kReportRegression = 5;  // --fail-on-regression: a significant regression
inline constexpr int kReportEmptySide = 6;   // --diff: a side has no samples

// Where the request is made: the report's standard output, to decide colour and to refuse
// binary formats on a terminal. -1: not a terminal (as in tests).
struct ReportTerminal {
  int stdout_fd = -1;
};

// Reads hvprof-report's arguments (without the program's name). A combination the report cannot
// honour is refused (kInvalidArgument) with what to do instead: exit status 2.
Result<ReportRequest> ParseReportRequest(const std::vector<std::string>& args, const ReportTerminal& terminal);

// --help's text: usage, examples, exit statuses and every option.
std::string ReportUsage();

}  // namespace hvprof::control
