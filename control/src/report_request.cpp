#include "hvprof/control/report_request.h"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <sstream>
#include <tuple>
#include <utility>

#include <boost/program_options.hpp>

#include "did_you_mean.h"
#include "hvprof/base/terminal.h"
#include "hvprof/base/units.h"
#include "hvprof/setup/setup.h"

namespace hvprof::control {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(Usage: hvprof-report [SESSION] [options]
  or:  hvprof-report --diff BASE NEW [options]
  or:  hvprof-report --list

Reports where the samples of a profiling session went: by image (the default), by symbol (-l),
per instruction (-d), by source line (-g), or per domain (--by-domain). SESSION is a session
directory, the name given to `hvprof --save`, or archive:FILE, an archive `hvprof archive` wrote
(reported from the images in it, wherever it is). Without SESSION it is the current session if
that has samples, else the newest saved session with samples (its header names it; --verbose
says why); `hvprof-report --list` lists the sessions.

Samples in the idle loop (the hypervisor's idle domain, on linux the idle task, and kernel or
hypervisor samples in idle functions such as default_idle or mwait_idle) are left out of the
rows and shares; the header says how idle each CPU was. --include-idle keeps them.

Examples:
  hvprof-report
      images, most sampled first
  hvprof-report --list
      the sessions: date, platform, time sampled, samples, losses
  hvprof-report -l -t 1
      symbols above 1% of the samples
  hvprof-report -l --by-domain
      symbols, domain by domain
  hvprof-report -l --domain=dom0 --mode=kernel
      dom0's kernel, symbol by symbol
  hvprof-report -l --comm=make --mode=user
      one program's own code (--pid=PID for one process)
  hvprof-report --format=json -o report.json
      the same tables, for scripts
  hvprof-report archive:run1.tar -l
      from an archive (`hvprof archive run1 -o run1.tar`)
  hvprof-report -c -t 2
      callers and callees of each symbol above 2% (stacks need `hvprof --start-daemon -g`)
  hvprof-report -c --symbol=vfs_read
      the call graph of one function
  hvprof-report --format=folded -o stacks.folded
      call stacks for flame-graph tools (--stack-root=process: each process apart)
  hvprof-report --format=html -o flame.html
      an interactive flame graph that opens offline
  hvprof-report --format=pprof -o cpu.pb.gz
      for `go tool pprof` and Pyroscope
  hvprof-report --push=http://127.0.0.1:4040
      also send the stacks to a Pyroscope server
  hvprof-report --diff before after -l
      what changed, symbol by symbol, and whether it is significant (docs/compare.md)
  hvprof-report { a-1 a-2 a-3 } { b-1 b-2 b-3 } -l
      the same with three runs a side (OProfile's spelling; --diff a-1,a-2,a-3 b-1,b-2,b-3
      too): a rank test across runs
  hvprof-report --diff before after --format=html -o diff.html
      a differential flame graph
  hvprof-report --diff range:-25h..-24h range:-1h..now -l
      continuous profiling: this hour against the same hour yesterday, window by window
  hvprof-report --sched
      running, runnable, blocked and offline time per domain and vCPU, wake-up latency,
      waits, migrations, preemptors (sessions recorded with `hvprof --sched`; docs/sched.md)
  hvprof-report --sched -l
      the same, and each domain's CPU time beside its sample share
  hvprof-report --timeline --buckets=120
      which domain ran on each pCPU, in 120 columns
  hvprof-report --timeline --format=perfetto -o trace.json
      open it in https://ui.perfetto.dev
  hvprof-report --timeline --format=html -o lanes.html
      a swim lane per pCPU (or per task: lanes.html#lanes=task), coloured by process, in any browser

Exit status:
  0   a complete report
  1   no report (e.g. no session)
  2   bad usage
  3   a report, but incomplete (damaged samples, images missing or changed): stderr says why
  4   a report, but the push (--push) failed: the message says why; the session is untouched
  5   with --diff and --fail-on-regression: a significant regression over the threshold (the
      rows are printed on stderr)
  6   with --diff: a session of one side has no samples (of what was selected): nothing was
      compared

Options)";

// The options' words as given, before they are checked.
struct Words {
  std::vector<std::string> sessions;
  std::string session_root = store::kDefaultSessionRoot;
  std::string domains, modes, images, symbols, events, sort, merge, demangle = "smart", format = "text", output;
  std::string pids, tids, comms;
  std::string stack_root = "domain";
  std::string color = "auto";
  std::string push_url, push_app, push_tenant;
  std::string image_path;
  std::string since, until, last;
  double threshold = 0.0;
  double alpha = 0.05;
  double fail_points = -1;
  uint32_t pseudo_slices = 0;
  uint32_t timeline_buckets = report::kDefaultTimelineBuckets;
  uint32_t sched_top = 10;
};

po::options_description Describe(Words& w) {
  po::options_description described(kUsage);
  described.add_options()
      ("help,h", "show this help")
      ("version", "print hvprof's version")
      ("session-dir", po::value(&w.session_root)->default_value(w.session_root), "the session root given to hvprof")
      ("list", "list the sessions of the session root, oldest first (created, platform, time sampled, samples, "
               "lost, state); '*' marks the one a report takes when none is named; --format=json too")
      ("since", po::value(&w.since),
       "continuous mode (hvprof --continuous): merge the windows from TIME on into one report, in any view and "
       "format but those by process: 2026-11-30 14:25, 14:25 (today), @SECONDS, or -2h (before now); windows "
       "count whole, so the report covers from the start of the first to the end of the last, as its header says")
      ("until", po::value(&w.until), "with --since (or alone: every window before TIME): up to TIME")
      ("last", po::value(&w.last), "the windows of the last DURATION (e.g. 5m, 1h): --since=-DURATION")
      ("include-idle", "keep the idle loop's samples in the rows and shares (by default they are left out and "
                       "the header gives each CPU's idle share)")
      ("color", po::value(&w.color)->default_value("auto"),
       "colour the text report: auto (on a terminal, unless NO_COLOR is set), always or never")
      ("symbols,l", "list symbols, not only images")
      ("details,d", "per-instruction counts of each symbol")
      ("debug-info,g", "counts per source file:line (needs DWARF)")
      ("callgraph,c", "call graph, as opreport -c: each symbol with its callers above and callees below "
                      "(needs chains: `hvprof --start-daemon --callgraph=16`)")
      ("children", "with -c: rank symbols by inclusive samples (theirs and their callees'), as perf report "
                   "--children")
      ("by-domain", "break every row down by domain")
      ("by-process", "break every row down by process (its name and pid; kernel samples count for the "
                     "process they interrupted), processes with most samples first, as perf report --sort pid; "
                     "`hvprof-report --by-process` alone gives each process's images")
      ("all-domains", "dom0's session plus the profiles its active guests published (`hvprof --publish` in "
                      "each): the whole host in one report")
      ("domain", po::value(&w.domains), "only these domains (ids, names or domN, comma-separated; idle for the idle loop, whose samples it keeps)")
      ("pid", po::value(&w.pids), "only samples taken in these processes (pids, comma-separated; a kernel sample "
              "counts for the process it interrupted), in every view and format")
      ("comm", po::value(&w.comms), "only samples of the processes of these names (comm, as ps and perf show them; "
               "comma-separated)")
      ("tid", po::value(&w.tids), "only samples of these threads (tids, comma-separated): the views of stacks (-c, "
              "--format=folded, pprof or html); the tables count by process, so narrow them with --pid")
      ("mode", po::value(&w.modes), "only these modes: user, kernel, hypervisor")
      ("image", po::value(&w.images), "only images whose name or path matches these globs")
      ("event", po::value(&w.events), "only these events (names)")
      ("symbol", po::value(&w.symbols), "only symbols matching these globs (comma-separated); percentages stay of all "
                 "samples. With -c: the call graph of those symbols, each with its callers and callees")
      ("threshold,t", po::value(&w.threshold), "hide rows below this percent of the samples")
      ("sort,s", po::value(&w.sort), "sort keys: sample, image, symbol, debug, vma, domain")
      ("reverse-sort,r", "reverse the sort order")
      ("merge,m", po::value(&w.merge), "add events up: unitmask (one column per event name) or all (one column); stack "
                                   "views (-c, folded, pprof, html) count the merged events together")
      ("demangle,D", po::value(&w.demangle)->default_value("smart"), "C++ names: none, normal or smart")
      ("show-address,w", "show each symbol's address")
      ("long-filenames,f", "show full image paths")
      ("accumulated,a", "add a cumulative percent column")
      ("global-percent,%", "with -d, percentages of all samples rather than of the symbol")
      ("exclude-dependent,x", "only samples in the applications' own executables (no libraries, kernel or hypervisor)")
      ("no-header,n", "leave out the header")
      ("format", po::value(&w.format)->default_value("text"),
       "text, csv, json (docs/report-json.md); folded: one line per call stack, root first, "
       "'frame;frame;frame COUNT', as flame-graph tools read it; pprof: gzipped profile.proto for "
       "`go tool pprof` and Pyroscope, with -o; html: a flame graph in one self-contained page (click "
       "to zoom, search, flame or icicle), with -o, or with --timeline a swim lane per pCPU (wheel to zoom, drag "
       "to move, hover for the vCPU or task); perfetto (or chrome-json), with --timeline: Chrome's "
       "trace-event JSON, which ui.perfetto.dev and chrome://tracing open (docs/report-formats.md)")
      ("stack-root", po::value(&w.stack_root)->default_value("domain"),
       "folded and html: what each stack starts with: domain (the domain's name, then the mode), process (the "
       "domain, the process as \"comm (pid)\", then the mode), mode, or none. Default: process for a linux "
       "session (as perf's flame graphs), domain for the others")
      ("output,o", po::value(&w.output), "write the report to this file")
      ("push", po::value(&w.push_url),
       "also send the stacks to the Grafana Pyroscope server at this base URL (http:// or https://, e.g. "
       "http://127.0.0.1:4040): one pprof series per domain, labelled domain, domain_name, event, platform and "
       "host; --domain, --mode and --event choose what is sent. Credentials: in the URL, or from the "
       "environment variables HVPROF_PUSH_USER and HVPROF_PUSH_PASSWORD (docs/report-formats.md)")
      ("push-app", po::value(&w.push_app)->default_value("hvprof"),
       "--push: Pyroscope's application name (its service_name): letters, digits, '_', '.' and '-'")
      ("push-tenant", po::value(&w.push_tenant), "--push: the tenant, sent as X-Scope-OrgID, for multi-tenant servers")
      ("image-path", po::value(&w.image_path), "directories to look for images that moved (comma-separated)")
      ("no-debuginfod", "do not ask the debuginfod servers of DEBUGINFOD_URLS for images that are missing here "
                        "(or are not the ones profiled) and for debug info (they are asked by build-id when "
                        "DEBUGINFOD_URLS is set; the report's notes name what came from there)")
      ("verbose,V", "say more: why addresses could not be resolved, and which session was chosen when none is named")
      ("diff", "compare two sides: `--diff BASE NEW`, each side a session or a comma-separated set of sessions "
               "(or OProfile's `{ BASE... } { NEW... }`), or range:SINCE..UNTIL, continuous mode's windows in that "
               "time range compared window by window (e.g. `--diff range:-25h..-24h range:-1h..now`); per image "
               "(default), symbol (-l), domain (--by-domain) or stack (-c, --format=folded or html): shares, the "
               "change in points, its interval and a p-value corrected for testing every row (docs/compare.md)")
      ("fdr", "--diff: Benjamini-Hochberg's correction (controls the share of false findings) instead of Holm's "
              "(controls the chance of any)")
      ("alpha", po::value(&w.alpha)->default_value(0.05), "--diff: the significance level")
      ("slices", po::value(&w.pseudo_slices),
       "--diff of one session a side: cut each into N time slices and compare them as repeats with the rank test "
       "(pseudo-repeats; the caveat is printed)")
      ("fail-on-regression", po::value(&w.fail_points)->implicit_value(0.0),
       "--diff: exit 5 when a row's share grew significantly by at least this many points (default any)")
      ("raw-samples", "count the raw samples again instead of using the session's aggregate")
      ("timing", "print where the time went to stderr")
      ("sched", "the scheduling report instead of the samples: per domain and per vCPU (or task) the time "
                "running, runnable (waiting for a pCPU), blocked and offline, wake-up latency percentiles, the "
                "longest waits, migrations and who ran while each waited; text, csv or json; with -l each "
                "domain's CPU time beside its share of the samples (needs a session recorded with --sched; "
                "docs/sched.md)")
      ("timeline", "the scheduling time line: which domain ran on each pCPU, a row per pCPU cut into --buckets "
                   "columns; csv: a row per pCPU and bucket; --format=html: swim lanes in one self-contained page; "
                   "--format=perfetto: every stretch a vCPU ran as Chrome trace JSON for ui.perfetto.dev (needs a "
                   "session recorded with --sched)")
      ("buckets", po::value(&w.timeline_buckets)->default_value(w.timeline_buckets),
       "--timeline: how many columns the window is cut into (1 to 10000)")
      ("top", po::value(&w.sched_top)->default_value(w.sched_top),
       "--sched: how many of the longest waits, and of each vCPU's preemptors, to show");
  return described;
}

// OProfile's comparison spelling, `{ BASE... } { NEW... }`, taken out of the arguments.
struct Braces {
  bool used = false;
  std::vector<std::string> base, next;
};

Result<Braces> TakeBraces(std::vector<std::string>& args) {
  Braces braces;
  std::vector<std::string> rest;
  int side = -1;  // -1 outside, 0 in the first, 1 in the second
  int closed = 0;
  for (const std::string& arg : args) {
    if (arg == "{") {
      if (side >= 0 || closed == 2) return Error(ErrorKind::kInvalidArgument, "{ BASE } { NEW }: an unexpected '{'");
      side = closed;
      braces.used = true;
    } else if (arg == "}") {
      if (side < 0) return Error(ErrorKind::kInvalidArgument, "{ BASE } { NEW }: a '}' without its '{'");
      ++closed;
      side = -1;
    } else if (side >= 0) {
      (side == 0 ? braces.base : braces.next).push_back(arg);
    } else {
      rest.push_back(arg);
    }
  }
  if (braces.used && (side >= 0 || closed != 2)) {
    return Error(ErrorKind::kInvalidArgument, "{ BASE } { NEW }: give both sides, each closed with '}'");
  }
  args = std::move(rest);
  return braces;
}

Result<std::vector<uint8_t>> ParseModes(const std::string& text) {
  std::vector<uint8_t> modes;
  HVPROF_TRY(items, setup::SplitList(text, "mode"));
  for (const std::string& item : items) {
    if (const std::optional<Mode> mode = sample_mode::FromName(item)) modes.push_back(sample_mode::Byte(*mode));
    else return MakeError(ErrorKind::kInvalidArgument, "--mode: '{}' is not user, kernel or hypervisor", item);
  }
  return modes;
}

Result<std::vector<report::SortKey>> ParseSort(const std::string& text) {
  std::vector<report::SortKey> keys;
  HVPROF_TRY(items, setup::SplitList(text, "sort"));
  for (const std::string& item : items) {
    if (item == "sample" || item == "samples") keys.push_back(report::SortKey::kSamples);
    else if (item == "image") keys.push_back(report::SortKey::kImage);
    else if (item == "symbol") keys.push_back(report::SortKey::kSymbol);
    else if (item == "debug") keys.push_back(report::SortKey::kDebug);
    else if (item == "vma") keys.push_back(report::SortKey::kVma);
    else if (item == "domain") keys.push_back(report::SortKey::kDomain);
    else return MakeError(ErrorKind::kInvalidArgument,
                          "--sort: '{}' is not a sort key; use sample, image, symbol, debug, vma or domain", item);
  }
  return keys;
}


// Whether the user gave `option` (not only its default).
bool Given(const po::variables_map& values, const char* option) {
  return values.count(option) != 0 && !values[option].defaulted();
}

Error Refuse(std::string message) { return Error(ErrorKind::kInvalidArgument, std::move(message)); }

// One session, or (with --diff) none here: the sides are read later.
Result<void> CheckSessions(const po::variables_map& values, const Words& w, bool diffing, ReportRequest& request) {
  if (diffing) return Ok();
  if (w.sessions.size() > 1) return Refuse("one session at a time; to compare two, use --diff BASE NEW");
  if (!w.sessions.empty()) request.session = w.sessions.front();
  for (const char* option : {"fdr", "slices", "fail-on-regression"}) {
    if (values.count(option) != 0) return MakeError(ErrorKind::kInvalidArgument, "--{} goes with --diff", option);
  }
  return Ok();
}

// --since, --until and --last: continuous mode's windows in a range, merged.
Result<void> ReadRange(const po::variables_map& values, const Words& w, bool diffing, ReportRequest& request) {
  const bool since = values.count("since") != 0, until = values.count("until") != 0, last = values.count("last") != 0;
  if (!since && !until && !last) return Ok();
  if (last && (since || until)) return Refuse("--last is --since=-DURATION until now: give it or --since/--until");
  if (diffing || !w.sessions.empty() || values.count("list") != 0 || values.count("sched") != 0 ||
      values.count("timeline") != 0 || values.count("all-domains") != 0) {
    return Refuse("--since, --until and --last merge continuous mode's windows into one profile: not with a session "
                  "named, --diff, --list, --sched, --timeline or --all-domains");
  }
  const uint64_t now = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  report::TimeRange range;
  if (last) {
    auto duration = ParseDurationNs(w.last);
    if (!duration) return Refuse(fmt::format("--last: {}", duration.error().message()));
    range.since_ns = now - std::min(now, duration.value());
  }
  if (since) {
    auto time = ParseTimeNs(w.since, now);
    if (!time) return Refuse(fmt::format("--since: {}", time.error().message()));
    range.since_ns = time.value();
  }
  if (until) {
    auto time = ParseTimeNs(w.until, now);
    if (!time) return Refuse(fmt::format("--until: {}", time.error().message()));
    range.until_ns = time.value();
  }
  if (range.until_ns <= range.since_ns) return Refuse("--until is not after --since: the range is empty");
  request.range = range;
  return Ok();
}

// -l, -d, -g and the tables' switches.
Result<void> ReadTableOptions(const po::variables_map& values, const Words& w, const ReportTerminal& terminal,
                              ReportRequest& request) {
  report::ReportOptions& options = request.table;
  const int views = static_cast<int>(values.count("symbols") + values.count("details") + values.count("debug-info"));
  options.view = values.count("details")      ? report::View::kDetails
                 : values.count("debug-info") ? report::View::kDebugInfo
                 : values.count("symbols")    ? report::View::kSymbol
                                              : report::View::kImage;
  if (views > 1 && !(views == 2 && values.count("symbols"))) return Refuse("choose one of -d and -g");
  options.by_domain = values.count("by-domain") != 0;
  options.by_process = values.count("by-process") != 0;
  options.threshold = w.threshold;
  options.reverse = values.count("reverse-sort") != 0;
  options.show_address = values.count("show-address") != 0;
  options.long_filenames = values.count("long-filenames") != 0;
  options.accumulated = values.count("accumulated") != 0;
  options.global_percent = values.count("global-percent") != 0;
  options.exclude_dependent = values.count("exclude-dependent") != 0;
  options.no_header = values.count("no-header") != 0;
  options.verbose = values.count("verbose") != 0;
  options.include_idle = values.count("include-idle") != 0;
  // Colour only what goes to this terminal (or wherever `always` says).
  HVPROF_TRY(colored, UseColor(w.color, w.output.empty() || w.output == "-" ? terminal.stdout_fd : -1));
  options.color = colored && request.format == ReportFormat::kText;
  if (w.threshold < 0 || w.threshold > 100) return Refuse("--threshold must be 0-100");
  return Ok();
}

// --sched and --timeline take one session's scheduling records and few of the samples' options.
Result<void> CheckSchedOptions(const po::variables_map& values, const Words& w, bool diffing, ReportRequest& request) {
  SchedRequest& sched = request.sched;
  sched.sched = values.count("sched") != 0;
  sched.timeline = values.count("timeline") != 0;
  const ReportFormat format = request.format;
  if (format == ReportFormat::kPerfetto && !sched.timeline) {
    return MakeError(ErrorKind::kInvalidArgument, "--format={} is the scheduling time line's: add --timeline", w.format);
  }
  if (Given(values, "top") && !sched.sched) return Refuse("--top goes with --sched");
  if (sched.sched || sched.timeline) {
    const char* view = sched.sched ? "--sched" : "--timeline";
    if (diffing) return MakeError(ErrorKind::kInvalidArgument, "{} reports one session's scheduling: not with --diff", view);
    for (const char* option : {"list", "details", "debug-info", "callgraph", "children", "by-domain", "by-process",
                               "all-domains", "domain", "pid", "tid", "comm", "mode", "image", "event", "symbol",
                               "threshold", "sort",
                               "reverse-sort", "merge", "show-address", "long-filenames", "accumulated",
                               "global-percent", "exclude-dependent", "include-idle", "push", "raw-samples",
                               "stack-root", "verbose", "timing"}) {
      if (Given(values, option)) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "{} does not take --{}: it reports the scheduling records of every domain, not the samples",
                         view, option);
      }
    }
    if (values.count("symbols") != 0 && !sched.sched) {
      return Refuse("--timeline does not take -l (--sched -l adds the samples' shares)");
    }
    if (sched.sched && sched.timeline && format != ReportFormat::kText) {
      return Refuse("--sched and --timeline together print text: give one of them for csv, json, html or perfetto");
    }
    if (sched.sched && format != ReportFormat::kText && format != ReportFormat::kCsv && format != ReportFormat::kJson) {
      return MakeError(ErrorKind::kInvalidArgument, "--sched writes text, csv or json, not {}", w.format);
    }
    if (sched.timeline && format != ReportFormat::kText && format != ReportFormat::kCsv &&
        format != ReportFormat::kHtml && format != ReportFormat::kPerfetto) {
      return MakeError(ErrorKind::kInvalidArgument, "--timeline writes text, csv, html or perfetto, not {}", w.format);
    }
    if (w.timeline_buckets == 0 || w.timeline_buckets > report::kMaxTimelineBuckets) {
      return MakeError(ErrorKind::kInvalidArgument, "--buckets: 1 to {}", report::kMaxTimelineBuckets);
    }
    request.kind = ReportKind::kSched;
  }
  if (Given(values, "buckets") && !sched.timeline) return Refuse("--buckets goes with --timeline");
  sched.samples = values.count("symbols") != 0;
  sched.buckets = w.timeline_buckets;
  sched.top = w.sched_top;
  return Ok();
}

// -c, folded, pprof and html: views of whole stacks, which honour fewer filters than the tables.
Result<void> CheckStackOptions(const po::variables_map& values, const Words& w, const ReportTerminal& terminal,
                               ReportRequest& request) {
  const ReportFormat format = request.format;
  const bool pprof = format == ReportFormat::kPprof;
  const bool html = format == ReportFormat::kHtml;
  if ((pprof || html) && (w.output.empty() || w.output == "-") && terminal.stdout_fd >= 0 &&
      ::isatty(terminal.stdout_fd)) {
    return MakeError(ErrorKind::kInvalidArgument, "--format={} is a file to open elsewhere: give -o FILE (or pipe it)",
                     w.format);
  }
  const bool folded = format == ReportFormat::kFolded || pprof || html;
  const bool callgraph = values.count("callgraph") != 0;
  if (values.count("children") != 0 && !callgraph) return Refuse("--children goes with -c (--callgraph)");
  if (callgraph || folded) {
    // What the stack views do not honour is refused, never silently ignored.
    const char* view = callgraph ? "-c" : pprof ? "--format=pprof" : html ? "--format=html" : "--format=folded";
    for (const char* option : {"image", "symbol", "exclude-dependent", "all-domains", "accumulated", "show-address",
                               "global-percent", "sort", "reverse-sort", "by-process"}) {
      // -c --symbol: the call graph focused on those symbols, with their callers and callees.
      if (callgraph && std::string_view(option) == "symbol") continue;
      if (Given(values, option)) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "{} does not take --{}: stacks are filtered by --domain, --mode, --event and --merge{}", view,
                         option,
                         std::string_view(option) == "all-domains" ? " (the profiles guests publish carry no call chains)"
                                                                   : "");
      }
    }
    if (folded && (values.count("by-domain") != 0 || w.threshold != 0.0)) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "{} writes every stack: --by-domain and -t are for the tables and -c (--stack-root puts the "
                       "domain at the root)",
                       view);
    }
  }
  const bool views = values.count("symbols") + values.count("details") + values.count("debug-info") != 0;
  if (callgraph && (folded || views)) {
    return Refuse("-c is a view of its own: use it without -l, -d, -g and --format=folded, pprof or html");
  }
  request.children = values.count("children") != 0;
  if (request.kind == ReportKind::kTable) {
    request.kind = callgraph ? ReportKind::kCallgraph : folded ? ReportKind::kStacks : ReportKind::kTable;
  }
  return Ok();
}

// The words with a closed set of values, and the comma-separated lists.
Result<void> ReadFilters(const Words& w, ReportRequest& request) {
  report::ReportOptions& options = request.table;
  HVPROF_TRY(root, report::ParseStackRoot(w.stack_root));
  request.root = root;
  if (w.demangle != "none" && w.demangle != "normal" && w.demangle != "smart") {
    return MakeError(ErrorKind::kInvalidArgument, "--demangle: '{}' is not none, normal or smart", w.demangle);
  }
  if (!w.merge.empty() && w.merge != "unitmask" && w.merge != "all") {
    return MakeError(ErrorKind::kInvalidArgument, "--merge: '{}' is not unitmask or all", w.merge);
  }
  options.merge_unit_masks = w.merge == "unitmask";
  options.merge_all = w.merge == "all";
  if (!w.sort.empty()) {
    HVPROF_TRY(keys, ParseSort(w.sort));
    options.sort = std::move(keys);
  }
  if (!w.modes.empty()) {
    HVPROF_TRY(modes, ParseModes(w.modes));
    options.modes = std::move(modes);
  }
  // --pid and --tid: numbers; --comm, as --domain and --event, is resolved against each session.
  for (auto [text, option, target] : {std::tuple{&w.pids, "pid", &options.pids},
                                      std::tuple{&w.tids, "tid", &request.tids}}) {
    if (text->empty()) continue;
    HVPROF_TRY(items, setup::SplitList(*text, option));
    for (const std::string& item : items) {
      uint32_t id = 0;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
      if (ec != std::errc() || end != item.data() + item.size()) {
        return MakeError(ErrorKind::kInvalidArgument, "--{}: '{}' is not a {} (a number)", option, item,
                         option == std::string_view("pid") ? "process id" : "thread id");
      }
      target->push_back(id);
    }
    std::sort(target->begin(), target->end());  // looked up by binary search, sample by sample
    target->erase(std::unique(target->begin(), target->end()), target->end());
  }
  // --domain and --event are resolved against each session.
  for (auto [text, option, target] : {std::tuple{&w.symbols, "symbol", &options.symbols},
                                      std::tuple{&w.images, "image", &options.images},
                                      std::tuple{&w.domains, "domain", &request.domains},
                                      std::tuple{&w.events, "event", &request.events},
                                      std::tuple{&w.comms, "comm", &request.comms},
                                      std::tuple{&w.image_path, "image-path", &request.load.image_path}}) {
    if (text->empty()) continue;
    HVPROF_TRY(parsed, setup::SplitList(*text, option));
    *target = std::move(parsed);
  }
  if (!request.tids.empty() && request.kind != ReportKind::kStacks && request.kind != ReportKind::kCallgraph) {
    return Refuse("--tid narrows the views of stacks (-c, --format=folded, pprof or html); the tables count "
                  "samples by process: narrow them with --pid");
  }
  return Ok();
}

// What loading the session needs, from the kind of report.
void ChooseLoad(const po::variables_map& values, const Words& w, ReportRequest& request) {
  report::LoadOptions& load = request.load;
  const bool stacks = request.kind == ReportKind::kStacks || request.kind == ReportKind::kCallgraph;
  const bool pprof = request.format == ReportFormat::kPprof;
  request.push.url = w.push_url;
  request.push.app = w.push_app;
  request.push.tenant = w.push_tenant;
  const bool push = !w.push_url.empty();
  load.demangle = w.demangle != "none";
  load.lines = request.table.view == report::View::kDebugInfo;
  load.use_aggregate = values.count("raw-samples") == 0;
  load.all_domains = values.count("all-domains") != 0;
  load.stacks = stacks || push;
  load.stack_threads = pprof || push;
  load.inlines = pprof || push;
  // A process's own samples: every entry and stack keeps its pid (and its thread for --tid).
  const bool narrowed = !request.table.pids.empty() || !request.comms.empty() || !request.tids.empty() ||
                        request.root == report::StackRoot::kProcess;
  load.processes = request.table.by_process || narrowed;
  request.root_chosen = !values["stack-root"].defaulted();
  load.stack_threads = load.stack_threads || !request.tids.empty();
  load.debuginfod = values.count("no-debuginfod") == 0;
  request.timing = values.count("timing") != 0;
}

// A side of --diff written range:SINCE..UNTIL: continuous mode's windows in that time range,
// each a run of the side. nullopt for a side of sessions.
Result<std::optional<report::TimeRange>> RangeSide(const std::vector<std::string>& side, std::string_view which) {
  constexpr std::string_view kPrefix = "range:";
  const auto is_range = [&](const std::string& argument) { return argument.starts_with(kPrefix); };
  if (std::none_of(side.begin(), side.end(), is_range)) return std::optional<report::TimeRange>();
  if (side.size() != 1) {
    return Refuse(fmt::format("--diff: the {} side is a time range or sessions, not both (give one range:SINCE..UNTIL)",
                              which));
  }
  const std::string_view text = std::string_view(side[0]).substr(kPrefix.size());
  const size_t dots = text.find("..");
  if (dots == std::string_view::npos) {
    return Refuse(fmt::format("--diff: {}: write a range as range:SINCE..UNTIL, e.g. range:-25h..-24h (times as "
                              "--since takes them; UNTIL may be now)",
                              side[0]));
  }
  const uint64_t now = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  report::TimeRange range;
  auto since = ParseTimeNs(text.substr(0, dots), now);
  if (!since) return Refuse(fmt::format("--diff: {}: the start: {}", side[0], since.error().message()));
  auto until = ParseTimeNs(text.substr(dots + 2), now);
  if (!until) return Refuse(fmt::format("--diff: {}: the end: {}", side[0], until.error().message()));
  if (until.value() <= since.value()) {
    return Refuse(fmt::format("--diff: {}: the end is not after the start: the range is empty", side[0]));
  }
  range.since_ns = since.value();
  range.until_ns = until.value();
  return std::optional<report::TimeRange>(range);
}

// --diff BASE NEW (or { BASE... } { NEW... }): two sides, each one session or several, or the
// windows of a time range.
Result<void> ReadDiff(const po::variables_map& values, const Words& w, const Braces& braces, ReportRequest& request) {
  report::DiffRequest& diff = request.diff;
  if (braces.used) {
    if (!w.sessions.empty()) return Refuse("with { BASE } { NEW }, name no other session");
    diff.base = braces.base;
    diff.next = braces.next;
  } else {
    if (w.sessions.size() != 2) {
      return Refuse("--diff takes two sides: --diff BASE NEW (each a session, or sessions separated by commas)");
    }
    HVPROF_TRY(base, setup::SplitList(w.sessions[0], "diff"));
    HVPROF_TRY(next, setup::SplitList(w.sessions[1], "diff"));
    diff.base = std::move(base);
    diff.next = std::move(next);
  }
  HVPROF_TRY(base_range, RangeSide(diff.base, "base"));
  HVPROF_TRY(next_range, RangeSide(diff.next, "new"));
  if (base_range) {
    diff.base_range = base_range;
    diff.base.clear();
  }
  if (next_range) {
    diff.next_range = next_range;
    diff.next.clear();
  }
  const report::ReportOptions& options = request.table;
  if (options.view == report::View::kDetails || options.view == report::View::kDebugInfo) {
    return Refuse("--diff compares images, symbols (-l) or stacks (-c, --format=folded or html): not -d or -g");
  }
  for (const char* option : {"all-domains", "push", "children", "accumulated", "global-percent", "show-address",
                             "by-process", "pid", "tid", "comm"}) {
    if (Given(values, option)) return MakeError(ErrorKind::kInvalidArgument, "--diff does not take --{}", option);
  }
  if (request.format == ReportFormat::kPprof) {
    return Refuse("--diff writes text, csv, json, folded (two counts per stack) or html, not pprof");
  }
  if (w.alpha <= 0 || w.alpha >= 1) return Refuse("--alpha must be between 0 and 1");
  const bool slices = values.count("slices") != 0;
  if (slices && (w.pseudo_slices < 2 || w.pseudo_slices > 64)) return Refuse("--slices must be 2 to 64");
  const bool stacks = request.kind == ReportKind::kStacks || request.kind == ReportKind::kCallgraph;
  if (slices && stacks) {
    return Refuse("--slices compares images or symbols (-l); a stack diff takes each stack's dispersion from its "
                  "function's slices already");
  }
  diff.session_root = request.session_root;
  diff.load = request.load;
  diff.load.stacks = stacks;
  diff.load.stack_threads = false;
  diff.load.inlines = false;
  diff.load.processes = false;
  diff.load.all_domains = false;
  diff.table = options;
  diff.domains = request.domains;
  diff.events = request.events;
  diff.diff.stacks = stacks;
  if (request.root == report::StackRoot::kProcess) {
    return Refuse("--stack-root=process is not for --diff: the processes of two sessions are not the same ones "
                  "(their pids differ)");
  }
  diff.diff.root = request.root;
  diff.diff.threshold = options.threshold;
  diff.diff.compare.alpha = w.alpha;
  diff.diff.compare.correction =
      values.count("fdr") != 0 ? stats::Correction::kBenjaminiHochberg : stats::Correction::kHolm;
  if (w.pseudo_slices != 0) {
    diff.diff.compare.method = stats::Method::kSlices;
    diff.diff.slices = w.pseudo_slices;
  }
  request.fail_points = w.fail_points;
  request.kind = ReportKind::kDiff;
  return Ok();
}

}  // namespace

std::optional<ReportFormat> ReportFormatFromName(std::string_view name) {
  static constexpr std::pair<std::string_view, ReportFormat> kNames[] = {
      {"text", ReportFormat::kText},   {"csv", ReportFormat::kCsv},   {"json", ReportFormat::kJson},
      {"folded", ReportFormat::kFolded}, {"pprof", ReportFormat::kPprof}, {"html", ReportFormat::kHtml},
      {"perfetto", ReportFormat::kPerfetto}, {"chrome-json", ReportFormat::kPerfetto}};
  for (const auto& [known, format] : kNames) {
    if (known == name) return format;
  }
  return std::nullopt;
}

std::string_view ReportFormatName(ReportFormat format) {
  switch (format) {
    case ReportFormat::kText: return "text";
    case ReportFormat::kCsv: return "csv";
    case ReportFormat::kJson: return "json";
    case ReportFormat::kFolded: return "folded";
    case ReportFormat::kPprof: return "pprof";
    case ReportFormat::kHtml: return "html";
    case ReportFormat::kPerfetto: return "perfetto";
  }
  return "text";
}

std::string ReportUsage() {
  Words words;
  std::ostringstream out;
  out << Describe(words);
  return out.str();
}

Result<ReportRequest> ParseReportRequest(const std::vector<std::string>& arguments, const ReportTerminal& terminal) {
  std::vector<std::string> args = arguments;
  HVPROF_TRY(braces, TakeBraces(args));
  Words w;
  po::options_description described = Describe(w);
  po::positional_options_description positional;
  positional.add("session", -1);
  po::options_description hidden;
  hidden.add_options()("session", po::value(&w.sessions));
  po::options_description all;
  all.add(described).add(hidden);
  po::variables_map values;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), values);
    po::notify(values);
  } catch (const po::error& error) {
    return Error(ErrorKind::kInvalidArgument, DescribeCommandLineError(error, described, "Try 'hvprof-report --help'."));
  }
  ReportRequest request;
  if (values.count("help") != 0) {
    request.kind = ReportKind::kHelp;
    return request;
  }
  if (values.count("version") != 0) {
    request.kind = ReportKind::kVersion;
    return request;
  }
  request.session_root = w.session_root;
  request.output = w.output;
  const bool diffing = values.count("diff") != 0 || braces.used;
  HVPROF_TRYV(CheckSessions(values, w, diffing, request));
  const std::optional<ReportFormat> format = ReportFormatFromName(w.format);
  // The colour is decided before the format is known to be one: a bad --color is said first.
  request.format = format.value_or(ReportFormat::kText);
  HVPROF_TRYV(ReadTableOptions(values, w, terminal, request));
  if (!format) {
    return MakeError(ErrorKind::kInvalidArgument, "--format: '{}' is not text, csv, json, folded, pprof, html or perfetto",
                     w.format);
  }
  HVPROF_TRYV(CheckSchedOptions(values, w, diffing, request));
  HVPROF_TRYV(ReadRange(values, w, diffing, request));
  if (values.count("list") != 0) {
    if (request.format != ReportFormat::kText && request.format != ReportFormat::kJson) {
      return Refuse("--list prints text or json");
    }
    if (!w.sessions.empty() || diffing) return Refuse("--list lists every session: name none");
    request.kind = ReportKind::kList;
    return request;
  }
  HVPROF_TRYV(CheckStackOptions(values, w, terminal, request));
  HVPROF_TRYV(ReadFilters(w, request));
  ChooseLoad(values, w, request);
  if (diffing) HVPROF_TRYV(ReadDiff(values, w, braces, request));
  return request;
}

}  // namespace hvprof::control
