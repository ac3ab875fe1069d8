// hvprof-report: opreport-like reports over a session directory. Thin main over hvprof_report.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <map>
#include <optional>

#include <boost/program_options.hpp>

#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/base/terminal.h"
#include "hvprof/base/version.h"
#include "hvprof/push/profile.h"
#include "hvprof/setup/setup.h"
#include "hvprof/report/sched_records.h"
#include "hvprof/report/views/callgraph.h"
#include "hvprof/report/views/scheduling.h"
#include "hvprof/report/views/stacks.h"
#include "hvprof/report/views/timeline.h"
#include "hvprof/report/writers/callgraph.h"
#include "hvprof/report/writers/csv.h"
#include "hvprof/report/writers/diff.h"
#include "hvprof/report/writers/flamegraph.h"
#include "hvprof/report/writers/folded.h"
#include "hvprof/report/writers/pprof.h"
#include "hvprof/report/writers/scheduling.h"
#include "hvprof/report/writers/sessions.h"
#include "hvprof/report/writers/json.h"
#include "hvprof/report/writers/text.h"
#include "hvprof/report/writers/timeline.h"
#include "hvprof/report/compare.h"
#include "hvprof/report/load.h"
#include "hvprof/report/source.h"
#include "hvprof/report/views/table.h"
#include "hvprof/store/session.h"

namespace po = boost::program_options;
using namespace hvprof;

namespace {

constexpr const char* kUsage = R"(Usage: hvprof-report [SESSION] [options]

Reports where the samples of a profiling session went: by image (the default), by symbol (-l),
per instruction (-d), by source line (-g), or per domain (--by-domain). SESSION is a session
directory, the name given to `hvprof --save`, or archive:FILE, an archive `hvprof archive` wrote
(reported from the images in it, wherever it is). Without SESSION it is the current session if
that has samples, else the newest saved session with samples (a note on stderr says which);
`hvprof-report --list` lists the sessions.

Samples in the idle loop (the hypervisor's idle domain, on linux the idle task, and kernel or
hypervisor samples in idle functions such as default_idle or mwait_idle) are left out of the
rows and shares; the header says how idle each CPU was. --include-idle keeps them.

Examples:
  hvprof-report                       images, most sampled first
  hvprof-report --list                the sessions: date, platform, time sampled, samples, losses
  hvprof-report -l -t 1               symbols above 1% of the samples
  hvprof-report -l --by-domain        symbols, domain by domain
  hvprof-report -l --domain=dom0 --mode=kernel
  hvprof-report --format=json -o report.json
  hvprof-report archive:run1.tar -l   from an archive (`hvprof archive run1 -o run1.tar`)
  hvprof-report -c -t 2                callers and callees of each symbol above 2%
  hvprof-report --format=folded -o stacks.folded   call stacks for flame-graph tools
  hvprof-report --format=html -o flame.html        an interactive flame graph, opens offline
  hvprof-report --format=pprof -o cpu.pb.gz        for `go tool pprof` and Pyroscope
  hvprof-report --push=http://127.0.0.1:4040       also send the stacks to a Pyroscope server
                                      (stacks need `hvprof --start-daemon --callgraph=16`)
  hvprof-report --diff before after -l             what changed, symbol by symbol, and whether it is
                                                   significant (docs/compare.md)
  hvprof-report { a-1 a-2 a-3 } { b-1 b-2 b-3 } -l the same with three runs a side (OProfile's spelling;
                                                   --diff a-1,a-2,a-3 b-1,b-2,b-3 too): a rank test across runs
  hvprof-report --diff before after --format=html -o diff.html   a differential flame graph
  hvprof-report --sched               running, runnable, blocked and offline time per domain and vCPU,
                                      wake-up latency, waits, migrations, preemptors (sessions
                                      recorded with `hvprof --sched`; docs/sched.md)
  hvprof-report --sched -l            the same, and each domain's CPU time beside its sample share
  hvprof-report --timeline --buckets=120   which domain ran on each pCPU, in 120 columns
  hvprof-report --timeline --format=perfetto -o trace.json   open it in https://ui.perfetto.dev
  hvprof-report --timeline --format=html -o lanes.html   a swim lane per pCPU, in any browser

Exit status: 0 complete report; 1 no report (e.g. no session); 2 bad usage;
3 report printed but incomplete (damaged samples, images missing or changed: see its warnings);
4 report printed but the push (--push) failed: the message says why; the session is untouched;
5 with --diff and --fail-on-regression: a significant regression over the threshold (the rows are
printed on stderr);
6 with --diff: a session of one side has no samples (of what was selected): nothing was compared.

Options)";

constexpr int kIncomplete = 3;
constexpr int kPushFailed = 4;
constexpr int kRegression = 5;
constexpr int kEmptySide = 6;

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

// --sched and --timeline: what to print of the session's scheduling records.
struct SchedRequest {
  bool sched = false;
  bool timeline = false;
  bool samples = false;  // --sched -l: each domain's CPU time beside its sample share
  uint32_t buckets = report::kDefaultTimelineBuckets;
  uint32_t top = 10;
  std::string format;
  bool no_header = false;
};

struct SchedOutput {
  std::string text;
  std::vector<std::string> warnings;  // the report is incomplete: exit 3
};

Result<SchedOutput> MakeSchedReport(const std::string& directory, const SchedRequest& request,
                                    const report::LoadOptions& load, const report::ReportOptions& options) {
  HVPROF_TRY(session, report::LoadSchedRecords(directory));
  session.options.top = request.top;
  SchedOutput out;
  out.warnings = session.problems;
  // The time line's pass is the analysis too: one pass when both are asked for.
  std::optional<report::Timeline> timeline;
  if (request.timeline) {
    report::TimelineOptions timeline_options;
    timeline_options.buckets = request.buckets;
    timeline_options.slices = request.format == "perfetto" || request.format == "chrome-json" || request.format == "html";
    HVPROF_TRY(built, report::BuildTimeline(session.records, session.options, timeline_options));
    timeline = std::move(built);
  }
  if (request.sched) {
    std::optional<report::SchedReport> analysed;
    if (!timeline) {
      HVPROF_TRY(analysis, report::AnalyzeSched(session.records, session.options));
      analysed = std::move(analysis);
    }
    const report::SchedReport& analysis = timeline ? timeline->report : *analysed;
    std::optional<report::SchedShares> shares;
    if (request.samples) {
      HVPROF_TRY(profile, report::LoadProfile(directory, load));
      HVPROF_TRY(table, report::BuildTable(profile, options));
      std::map<uint16_t, uint64_t> samples;
      for (const report::DomainSummary& d : table.domains) samples[d.domain] = d.samples[0] + d.samples[1] + d.samples[2];
      shares = report::SharesBesideSamples(analysis, samples, session.options);
      const auto warnings = profile.Warnings();
      out.warnings.insert(out.warnings.end(), warnings.begin(), warnings.end());
    }
    const report::SchedShares* beside = shares ? &*shares : nullptr;
    out.text = request.format == "json"  ? report::FormatSchedJson(analysis, beside)
               : request.format == "csv" ? report::FormatSchedCsv(analysis, beside)
                                         : report::FormatSchedText(analysis, request.no_header, beside);
  }
  if (timeline) {
    if (!out.text.empty()) out.text += "\n";
    out.text += request.format == "text"   ? report::FormatTimelineText(*timeline)
                : request.format == "csv"  ? report::FormatTimelineCsv(*timeline)
                : request.format == "html" ? report::FormatTimelineHtml(*timeline, directory)
                                           : report::FormatChromeTrace(*timeline);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto braces = TakeBraces(args);
    if (!braces) {
      std::cerr << "hvprof-report: " << braces.error().message() << "\n";
      return 2;
    }
    std::vector<std::string> session_args;
    std::string session_arg;
    double alpha = 0.05;
    double fail_points = -1;
    uint32_t pseudo_slices = 0;
    std::string session_root = store::kDefaultSessionRoot;
    std::string domains, modes, images, symbols, events, sort, merge, demangle = "smart", format = "text", output;
    std::string stack_root = "domain";
    std::string color = "auto";
    std::string push_url, push_app, push_tenant;
    std::string image_path;
    double threshold = 0.0;
    uint32_t timeline_buckets = report::kDefaultTimelineBuckets;
    uint32_t sched_top = 10;
    report::ReportOptions options;
    po::options_description described(kUsage);
    described.add_options()
        ("help,h", "show this help")
        ("version", "print hvprof's version")
        ("session-dir", po::value(&session_root)->default_value(session_root), "the session root given to hvprof")
        ("list", "list the sessions of the session root, oldest first (created, platform, time sampled, samples, "
                 "lost, state); '*' marks the one a report takes when none is named; --format=json too")
        ("include-idle", "keep the idle loop's samples in the rows and shares (by default they are left out and "
                         "the header gives each CPU's idle share)")
        ("color", po::value(&color)->default_value("auto"),
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
        ("domain", po::value(&domains), "only these domains (ids, names or domN, comma-separated; idle for the idle loop, whose samples it keeps)")
        ("mode", po::value(&modes), "only these modes: user, kernel, hypervisor")
        ("image", po::value(&images), "only images whose name or path matches these globs")
        ("event", po::value(&events), "only these events (names)")
        ("symbol", po::value(&symbols), "only symbols matching these globs (comma-separated); percentages stay of all samples")
        ("threshold,t", po::value(&threshold), "hide rows below this percent of the samples")
        ("sort,s", po::value(&sort), "sort keys: sample, image, symbol, debug, vma, domain")
        ("reverse-sort,r", "reverse the sort order")
        ("merge,m", po::value(&merge), "add events up: unitmask (one column per event name) or all (one column); stack "
                                     "views (-c, folded, pprof, html) count the merged events together")
        ("demangle,D", po::value(&demangle)->default_value("smart"), "C++ names: none, normal or smart")
        ("show-address,w", "show each symbol's address")
        ("long-filenames,f", "show full image paths")
        ("accumulated,a", "add a cumulative percent column")
        ("global-percent,%", "with -d, percentages of all samples rather than of the symbol")
        ("exclude-dependent,x", "only samples in the applications' own executables (no libraries, kernel or hypervisor)")
        ("no-header,n", "leave out the header")
        ("format", po::value(&format)->default_value("text"),
         "text, csv, json (docs/report-json.md); folded: one line per call stack, root first, "
         "'frame;frame;frame COUNT', as flame-graph tools read it; pprof: gzipped profile.proto for "
         "`go tool pprof` and Pyroscope, with -o; html: a flame graph in one self-contained page (click "
         "to zoom, search, flame or icicle), with -o, or with --timeline a swim lane per pCPU (wheel to zoom, drag "
         "to move, hover for the vCPU or task); perfetto (or chrome-json), with --timeline: Chrome's "
         "trace-event JSON, which ui.perfetto.dev and chrome://tracing open (docs/report-formats.md)")
        ("stack-root", po::value(&stack_root)->default_value("domain"),
         "folded and html: what each stack starts with: domain (the domain's name, then the mode), mode, or none")
        ("output,o", po::value(&output), "write the report to this file")
        ("push", po::value(&push_url),
         "also send the stacks to the Grafana Pyroscope server at this base URL (http:// or https://, e.g. "
         "http://127.0.0.1:4040): one pprof series per domain, labelled domain, domain_name, event, platform and "
         "host; --domain, --mode and --event choose what is sent. Credentials: in the URL, or from the "
         "environment variables HVPROF_PUSH_USER and HVPROF_PUSH_PASSWORD (docs/report-formats.md)")
        ("push-app", po::value(&push_app)->default_value("hvprof"),
         "--push: Pyroscope's application name (its service_name): letters, digits, '_', '.' and '-'")
        ("push-tenant", po::value(&push_tenant), "--push: the tenant, sent as X-Scope-OrgID, for multi-tenant servers")
        ("image-path", po::value(&image_path), "directories to look for images that moved (comma-separated)")
        ("no-debuginfod", "do not ask the debuginfod servers of DEBUGINFOD_URLS for images that are missing here "
                          "(or are not the ones profiled) and for debug info (they are asked by build-id when "
                          "DEBUGINFOD_URLS is set; the report's notes name what came from there)")
        ("verbose,V", "say why addresses could not be resolved")
        ("diff", "compare two sides: `--diff BASE NEW`, each side a session or a comma-separated set of sessions "
                 "(or OProfile's `{ BASE... } { NEW... }`); per image (default), symbol (-l), domain (--by-domain) "
                 "or stack (-c, --format=folded or html): shares, the change in points, its interval and a p-value "
                 "corrected for testing every row (docs/compare.md)")
        ("fdr", "--diff: Benjamini-Hochberg's correction (controls the share of false findings) instead of Holm's "
                "(controls the chance of any)")
        ("alpha", po::value(&alpha)->default_value(0.05), "--diff: the significance level")
        ("slices", po::value(&pseudo_slices),
         "--diff of one session a side: cut each into N time slices and compare them as repeats with the rank test "
         "(pseudo-repeats; the caveat is printed)")
        ("fail-on-regression", po::value(&fail_points)->implicit_value(0.0),
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
        ("buckets", po::value(&timeline_buckets)->default_value(timeline_buckets),
         "--timeline: how many columns the window is cut into (1 to 10000)")
        ("top", po::value(&sched_top)->default_value(sched_top),
         "--sched: how many of the longest waits, and of each vCPU's preemptors, to show");
    po::positional_options_description positional;
    positional.add("session", -1);
    po::options_description hidden;
    hidden.add_options()("session", po::value(&session_args));
    po::options_description all;
    all.add(described).add(hidden);
    po::variables_map values;
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), values);
    po::notify(values);
    if (values.count("help") != 0) {
      std::cout << described << "\n";
      return 0;
    }
    if (values.count("version") != 0) {
      std::cout << "hvprof-report (hvprof) " << kVersion << "\n";
      return 0;
    }

    auto fail = [](const Error& error, int code) {
      std::cerr << "hvprof-report: " << error.message() << "\n";
      return code;
    };
    const bool diffing = values.count("diff") != 0 || braces.value().used;
    if (!diffing) {
      if (session_args.size() > 1) {
        return fail(Error(ErrorKind::kInvalidArgument,
                          "one session at a time; to compare two, use --diff BASE NEW"),
                    2);
      }
      if (!session_args.empty()) session_arg = session_args.front();
      for (const char* option : {"fdr", "slices", "fail-on-regression"}) {
        if (values.count(option) != 0) {
          return fail(MakeError(ErrorKind::kInvalidArgument, "--{} goes with --diff", option), 2);
        }
      }
    }
    int views = static_cast<int>(values.count("symbols") + values.count("details") + values.count("debug-info"));
    options.view = values.count("details") ? report::View::kDetails
                   : values.count("debug-info") ? report::View::kDebugInfo
                   : values.count("symbols") ? report::View::kSymbol
                                             : report::View::kImage;
    if (views > 1 && !(views == 2 && values.count("symbols"))) {
      return fail(Error(ErrorKind::kInvalidArgument, "choose one of -d and -g"), 2);
    }
    options.by_domain = values.count("by-domain") != 0;
    options.by_process = values.count("by-process") != 0;
    options.threshold = threshold;
    options.reverse = values.count("reverse-sort") != 0;
    options.show_address = values.count("show-address") != 0;
    options.long_filenames = values.count("long-filenames") != 0;
    options.accumulated = values.count("accumulated") != 0;
    options.global_percent = values.count("global-percent") != 0;
    options.exclude_dependent = values.count("exclude-dependent") != 0;
    options.no_header = values.count("no-header") != 0;
    options.verbose = values.count("verbose") != 0;
    options.include_idle = values.count("include-idle") != 0;
    {
      // Colour only what goes to this terminal (or wherever `always` says).
      auto colored = UseColor(color, output.empty() || output == "-" ? STDOUT_FILENO : -1);
      if (!colored) return fail(colored.error(), 2);
      options.color = colored.value() && format == "text";
    }
    if (threshold < 0 || threshold > 100) return fail(Error(ErrorKind::kInvalidArgument, "--threshold must be 0-100"), 2);
    const bool trace = format == "perfetto" || format == "chrome-json";
    if (format != "text" && format != "csv" && format != "json" && format != "folded" && format != "pprof" &&
        format != "html" && !trace) {
      return fail(MakeError(ErrorKind::kInvalidArgument,
                            "--format: '{}' is not text, csv, json, folded, pprof, html or perfetto", format),
                  2);
    }
    // The scheduling views: one session's scheduling records, with few of the samples' options.
    const bool sched_view = values.count("sched") != 0;
    const bool timeline = values.count("timeline") != 0;
    if (trace && !timeline) {
      return fail(MakeError(ErrorKind::kInvalidArgument, "--format={} is the scheduling time line's: add --timeline",
                            format),
                  2);
    }
    if (!values["top"].defaulted() && !sched_view) {
      return fail(Error(ErrorKind::kInvalidArgument, "--top goes with --sched"), 2);
    }
    if (sched_view || timeline) {
      const char* view = sched_view ? "--sched" : "--timeline";
      if (diffing) {
        return fail(MakeError(ErrorKind::kInvalidArgument, "{} reports one session's scheduling: not with --diff", view), 2);
      }
      for (const char* option : {"list", "details", "debug-info", "callgraph", "children", "by-domain", "by-process",
                                 "all-domains", "domain", "mode", "image", "event", "symbol", "threshold", "sort",
                                 "reverse-sort", "merge", "show-address", "long-filenames", "accumulated",
                                 "global-percent", "exclude-dependent", "include-idle", "push", "raw-samples",
                                 "stack-root", "verbose", "timing"}) {
        if (values.count(option) != 0 && !values[option].defaulted()) {
          return fail(MakeError(ErrorKind::kInvalidArgument, "{} does not take --{}: it reports the scheduling "
                                                             "records of every domain, not the samples",
                                view, option),
                      2);
        }
      }
      if (values.count("symbols") != 0 && !sched_view) {
        return fail(Error(ErrorKind::kInvalidArgument, "--timeline does not take -l (--sched -l adds the samples' shares)"),
                    2);
      }
      if (sched_view && timeline && format != "text") {
        return fail(Error(ErrorKind::kInvalidArgument, "--sched and --timeline together print text: give one of them "
                                                       "for csv, json, html or perfetto"),
                    2);
      }
      if (sched_view && format != "text" && format != "csv" && format != "json") {
        return fail(MakeError(ErrorKind::kInvalidArgument, "--sched writes text, csv or json, not {}", format), 2);
      }
      if (timeline && format != "text" && format != "csv" && format != "html" && !trace) {
        return fail(MakeError(ErrorKind::kInvalidArgument, "--timeline writes text, csv, html or perfetto, not {}", format),
                    2);
      }
      if (timeline_buckets == 0 || timeline_buckets > report::kMaxTimelineBuckets) {
        return fail(MakeError(ErrorKind::kInvalidArgument, "--buckets: 1 to {}", report::kMaxTimelineBuckets), 2);
      }
    }
    if (!values["buckets"].defaulted() && !timeline) {
      return fail(Error(ErrorKind::kInvalidArgument, "--buckets goes with --timeline"), 2);
    }
    if (values.count("list") != 0) {
      if (format != "text" && format != "json") {
        return fail(Error(ErrorKind::kInvalidArgument, "--list prints text or json"), 2);
      }
      if (!session_args.empty() || diffing) {
        return fail(Error(ErrorKind::kInvalidArgument, "--list lists every session: name none"), 2);
      }
      const auto sessions = report::ListSessions(session_root);
      const std::string text = format == "json" ? report::FormatSessionListJson(session_root, sessions)
                                                : report::FormatSessionList(session_root, sessions, options.color);
      if (!output.empty()) {
        if (auto written = WriteOutput(output, text); !written) return fail(written.error(), 1);
      } else {
        std::cout << text << std::flush;
      }
      return 0;
    }
    const bool pprof = format == "pprof";
    const bool html = format == "html";
    if ((pprof || html) && (output.empty() || output == "-") && ::isatty(STDOUT_FILENO)) {
      return fail(MakeError(ErrorKind::kInvalidArgument, "--format={} is a file to open elsewhere: give -o FILE (or pipe it)",
                            format),
                  2);
    }
    // The views of whole stacks: folded, pprof and the flame graph.
    const bool folded = format == "folded" || pprof || html;
    const bool callgraph = values.count("callgraph") != 0;
    if (values.count("children") != 0 && !callgraph) {
      return fail(Error(ErrorKind::kInvalidArgument, "--children goes with -c (--callgraph)"), 2);
    }
    if (callgraph || folded) {
      // What the stack views do not honour is refused, never silently ignored.
      const char* view = callgraph ? "-c" : pprof ? "--format=pprof" : html ? "--format=html" : "--format=folded";
      for (const char* option : {"image", "symbol", "exclude-dependent", "all-domains", "accumulated",
                                 "show-address", "global-percent", "sort", "reverse-sort", "by-process"}) {
        if (values.count(option) != 0 && !values[option].defaulted()) {
          return fail(MakeError(ErrorKind::kInvalidArgument,
                                "{} does not take --{}: stacks are filtered by --domain, --mode, --event and --merge{}", view,
                                option,
                                std::string_view(option) == "all-domains"
                                    ? " (the profiles guests publish carry no call chains)"
                                    : ""),
                      2);
        }
      }
      if (folded && (values.count("by-domain") != 0 || threshold != 0.0)) {
        return fail(MakeError(ErrorKind::kInvalidArgument,
                              "{} writes every stack: --by-domain and -t are for the tables and -c (--stack-root "
                              "puts the domain at the root)",
                              view),
                    2);
      }
    }
    if (callgraph && (folded || views > 0)) {
      return fail(Error(ErrorKind::kInvalidArgument, "-c is a view of its own: use it without -l, -d, -g and "
                                                     "--format=folded, pprof or html"),
                  2);
    }
    auto root = report::ParseStackRoot(stack_root);
    if (!root) return fail(root.error(), 2);
    if (demangle != "none" && demangle != "normal" && demangle != "smart") {
      return fail(MakeError(ErrorKind::kInvalidArgument, "--demangle: '{}' is not none, normal or smart", demangle), 2);
    }
    if (!merge.empty() && merge != "unitmask" && merge != "all") {
      return fail(MakeError(ErrorKind::kInvalidArgument, "--merge: '{}' is not unitmask or all", merge), 2);
    }
    options.merge_unit_masks = merge == "unitmask";
    options.merge_all = merge == "all";
    if (!sort.empty()) {
      auto keys = ParseSort(sort);
      if (!keys) return fail(keys.error(), 2);
      options.sort = keys.value();
    }
    if (!modes.empty()) {
      auto parsed = ParseModes(modes);
      if (!parsed) return fail(parsed.error(), 2);
      options.modes = parsed.value();
    }
    // The comma-separated lists; --domain and --event are resolved against each session.
    std::vector<std::string> domain_names, event_names, image_dirs;
    for (auto [text, option, target] : {std::tuple{&symbols, "symbol", &options.symbols},
                                        std::tuple{&images, "image", &options.images},
                                        std::tuple{&domains, "domain", &domain_names},
                                        std::tuple{&events, "event", &event_names},
                                        std::tuple{&image_path, "image-path", &image_dirs}}) {
      if (text->empty()) continue;
      auto parsed = setup::SplitList(*text, option);
      if (!parsed) return fail(parsed.error(), 2);
      *target = parsed.value();
    }

    if (diffing) {
      report::DiffRequest request;
      if (braces.value().used) {
        if (!session_args.empty()) {
          return fail(Error(ErrorKind::kInvalidArgument, "with { BASE } { NEW }, name no other session"), 2);
        }
        request.base = braces.value().base;
        request.next = braces.value().next;
      } else {
        if (session_args.size() != 2) {
          return fail(Error(ErrorKind::kInvalidArgument,
                            "--diff takes two sides: --diff BASE NEW (each a session, or sessions separated by commas)"),
                      2);
        }
        auto base = setup::SplitList(session_args[0], "diff");
        auto next = setup::SplitList(session_args[1], "diff");
        if (!base) return fail(base.error(), 2);
        if (!next) return fail(next.error(), 2);
        request.base = base.value();
        request.next = next.value();
      }
      if (options.view == report::View::kDetails || options.view == report::View::kDebugInfo) {
        return fail(Error(ErrorKind::kInvalidArgument, "--diff compares images, symbols (-l) or stacks (-c, "
                                                       "--format=folded or html): not -d or -g"),
                    2);
      }
      for (const char* option : {"all-domains", "push", "children", "accumulated", "global-percent", "show-address",
                                 "by-process"}) {
        if (values.count(option) != 0 && !values[option].defaulted()) {
          return fail(MakeError(ErrorKind::kInvalidArgument, "--diff does not take --{}", option), 2);
        }
      }
      if (pprof) {
        return fail(Error(ErrorKind::kInvalidArgument,
                          "--diff writes text, csv, json, folded (two counts per stack) or html, not pprof"),
                    2);
      }
      if (alpha <= 0 || alpha >= 1) return fail(Error(ErrorKind::kInvalidArgument, "--alpha must be between 0 and 1"), 2);
      if (values.count("slices") != 0 && (pseudo_slices < 2 || pseudo_slices > 64)) {
        return fail(Error(ErrorKind::kInvalidArgument, "--slices must be 2 to 64"), 2);
      }
      if (values.count("slices") != 0 && (folded || callgraph)) {
        return fail(Error(ErrorKind::kInvalidArgument,
                          "--slices compares images or symbols (-l); a stack diff takes each stack's dispersion from "
                          "its function's slices already"),
                    2);
      }
      request.session_root = session_root;
      request.load.demangle = demangle != "none";
      request.load.use_aggregate = values.count("raw-samples") == 0;
      request.load.debuginfod = values.count("no-debuginfod") == 0;
      request.load.stacks = folded || callgraph;
      request.load.image_path = image_dirs;
      request.table = options;
      request.domains = domain_names;
      request.events = event_names;
      request.diff.stacks = folded || callgraph;
      request.diff.root = root.value();
      request.diff.threshold = threshold;
      request.diff.compare.alpha = alpha;
      request.diff.compare.correction =
          values.count("fdr") != 0 ? stats::Correction::kBenjaminiHochberg : stats::Correction::kHolm;
      if (pseudo_slices != 0) {
        request.diff.compare.method = stats::Method::kSlices;
        request.diff.slices = pseudo_slices;
      }
      auto compared = report::DiffSessions(request);
      if (!compared) {
        const ErrorKind kind = compared.error().kind();
        return fail(compared.error(), kind == ErrorKind::kInvalidArgument ? 2 : kind == ErrorKind::kEmpty ? kEmptySide : 1);
      }
      const report::Diff& diff = compared.value().diff;
      const std::string text = format == "json"     ? report::FormatDiffJson(diff, fail_points)
                               : format == "csv"    ? report::FormatDiffCsv(diff)
                               : format == "folded" ? report::FormatDiffFolded(diff)
                               : html               ? report::FormatDiffFlameGraph(diff)
                                                    : report::FormatDiffText(diff, options.no_header);
      if (!output.empty()) {
        if (auto written = WriteOutput(output, text); !written) return fail(written.error(), 1);
      } else {
        std::cout << text << std::flush;
      }
      if (format != "text") {
        for (const std::string& note : diff.notes) std::cerr << "hvprof-report: " << EscapeForTerminal(note) << "\n";
        for (const std::string& warning : diff.warnings) {
          std::cerr << "hvprof-report: warning: " << EscapeForTerminal(warning) << "\n";
        }
      }
      if (fail_points >= 0) {
        const auto regressions = report::Regressions(diff, fail_points);
        if (!regressions.empty()) {
          std::cerr << fmt::format("hvprof-report: {} significant regression{} of at least {} points:\n",
                                   regressions.size(), regressions.size() == 1 ? "" : "s", fail_points);
          for (const report::DiffRow* row : regressions) {
            std::cerr << fmt::format("  {:+.2f} points ({:.2f}% -> {:.2f}%, p adj {:.2g})  {}\n", 100 * row->c.delta,
                                     100 * row->c.base_share, 100 * row->c.new_share, row->c.p_adjusted,
                                     EscapeForTerminal(report::DiffRowName(*row)));
          }
          return kRegression;
        }
      }
      return diff.warnings.empty() ? 0 : kIncomplete;
    }

    // The session: a directory, a saved name, or (none named) the one with samples.
    Result<report::SessionSource> source = Error(ErrorKind::kNotFound, "no session");
    if (session_arg.empty()) {
      auto chosen = report::ChooseSession(session_root);
      if (!chosen) return fail(chosen.error(), 1);
      if (!chosen.value().note.empty()) std::cerr << "hvprof-report: " << EscapeForTerminal(chosen.value().note) << "\n";
      source = std::move(chosen.value().source);
    } else {
      source = report::OpenSessionSource(session_arg, session_root);
    }
    if (!source) return fail(source.error(), 1);
    report::LoadOptions load;
    load.demangle = demangle != "none";
    load.lines = options.view == report::View::kDebugInfo;
    load.use_aggregate = values.count("raw-samples") == 0;
    load.all_domains = values.count("all-domains") != 0;
    load.stacks = folded || callgraph || !push_url.empty();
    load.stack_threads = pprof || !push_url.empty();
    load.inlines = pprof || !push_url.empty();
    load.processes = options.by_process;
    load.build_id_roots = source.value().build_id_roots;
    load.shown_directory = source.value().shown_directory;
    load.debuginfod = values.count("no-debuginfod") == 0;
    const auto started = std::chrono::steady_clock::now();
    load.image_path = image_dirs;
    if (sched_view || timeline) {
      SchedRequest request;
      request.sched = sched_view;
      request.timeline = timeline;
      request.samples = values.count("symbols") != 0;
      request.buckets = timeline_buckets;
      request.top = sched_top;
      request.format = format;
      request.no_header = options.no_header;
      auto made = MakeSchedReport(source.value().directory, request, load, options);
      if (!made) return fail(made.error(), 1);
      std::string text = std::move(made.value().text);
      if (format == "text") {
        for (const std::string& warning : made.value().warnings) text += "Warning: " + EscapeForTerminal(warning) + "\n";
      } else {
        for (const std::string& warning : made.value().warnings) {
          std::cerr << "hvprof-report: warning: " << EscapeForTerminal(warning) << "\n";
        }
      }
      if (!output.empty()) {
        if (auto written = WriteOutput(output, text); !written) return fail(written.error(), 1);
      } else {
        std::cout << text << std::flush;
      }
      return made.value().warnings.empty() ? 0 : kIncomplete;
    }
    auto profile = report::LoadProfile(source.value().directory, load);
    if (!profile) return fail(profile.error(), 1);

    // Filters that need the session: domains by name, events by name.
    if (auto resolved = report::ResolveNamedFilters(profile.value(), domain_names, event_names, &options); !resolved) {
      return fail(resolved.error(), 2);
    }

    std::string text;
    report::StackFilter stack_filter;
    if (folded || callgraph || !push_url.empty()) {
      auto counted = report::SelectStackEvents(profile.value(), options.events, options.merge_unit_masks,
                                              options.merge_all);
      if (!counted) return fail(counted.error(), 2);
      stack_filter.events = std::move(counted).value();
    }
    stack_filter.domains = options.domains;
    stack_filter.modes = options.modes;
    stack_filter.include_idle = options.include_idle;
    if (callgraph) {
      report::CallgraphOptions graph_options;
      graph_options.filter = stack_filter;
      graph_options.by_domain = options.by_domain;
      graph_options.children = values.count("children") != 0;
      graph_options.threshold = options.threshold;
      const report::Callgraph graph = report::BuildCallgraph(profile.value(), graph_options);
      text = format == "json"  ? report::FormatCallgraphJson(profile.value(), graph, graph_options, options)
             : format == "csv" ? report::FormatCallgraphCsv(profile.value(), graph, graph_options, options)
                               : report::FormatCallgraphText(profile.value(), graph, graph_options, options);
      if (format == "text") {
        for (const std::string& warning : profile.value().Warnings()) {
          text += "Warning: " + EscapeForTerminal(warning) + "\n";
        }
      }
    } else if (folded) {
      report::StackOptions stack_options;
      stack_options.root = root.value();
      stack_options.filter = stack_filter;
      if (pprof) {
        auto encoded = report::FormatPprof(profile.value(), stack_filter);
        if (!encoded) return fail(encoded.error(), 1);
        text = std::move(encoded).value();
      } else if (html) {
        text = report::FormatFlameGraph(profile.value(), report::NameStacks(profile.value(), stack_options),
                                        stack_filter);
      } else {
        text = report::FormatFolded(report::NameStacks(profile.value(), stack_options));
      }
      if (profile.value().metadata().backtrace_depth == 0) {
        std::cerr << "hvprof-report: no sample has a call chain: every stack is one frame deep (profile with "
                     "`hvprof --start-daemon --callgraph=16` to record chains)\n";
      }
      for (const std::string& warning : profile.value().Warnings()) {
        std::cerr << "hvprof-report: warning: " << EscapeForTerminal(warning) << "\n";
      }
    } else {
      auto table = report::BuildTable(profile.value(), options);
      if (!table) return fail(table.error(), 1);
      text = format == "json" ? report::FormatJson(profile.value(), table.value(), options)
             : format == "csv" ? report::FormatCsv(profile.value(), table.value(), options)
                               : report::FormatText(profile.value(), table.value(), options);
    }
    if (!output.empty()) {
      if (auto written = WriteOutput(output, text); !written) return fail(written.error(), 1);
    } else {
      std::cout << text << std::flush;
    }
    if (values.count("timing") != 0) {
      const report::LoadTimings& t = profile.value().timings();
      const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      std::cerr << fmt::format(
          "timing: {} samples, {} distinct addresses, {} distinct stacks\n"
          "  read samples ({}): {:.3f} s\n  symbol tables: {:.3f} s\n  attribute: {:.3f} s\n"
          "  resolve: {:.3f} s\n  table and output: {:.3f} s\n  total: {:.3f} s; without symbol tables: {:.3f} s\n",
          profile.value().total_samples(), t.distinct_addresses, t.distinct_stacks, t.from_aggregate ? "aggregate" : "raw",
          t.read_seconds, t.symbol_tables_seconds, t.attribute_seconds, t.resolve_seconds,
          total - t.read_seconds - t.symbol_tables_seconds - t.attribute_seconds - t.resolve_seconds, total,
          total - t.symbol_tables_seconds);
    }
    if (!push_url.empty()) {
      // An https server closing early must not kill the report with SIGPIPE.
      ::signal(SIGPIPE, SIG_IGN);
      auto pushed = push::PushProfile(profile.value(), stack_filter,
                                      push::PushFromCommandLine(push_url, push_tenant, push_app));
      if (!pushed) {
        std::cerr << "hvprof-report: " << EscapeForTerminal(pushed.error().message()) << "\n";
        return kPushFailed;
      }
      std::cerr << fmt::format("hvprof-report: pushed {} series ({} bytes of pprof) to Pyroscope\n",
                               pushed.value().series, pushed.value().bytes);
    }
    bool incomplete = !profile.value().problems().empty();
    for (const report::Image& image : profile.value().images()) {
      incomplete |= !image.problem.empty() && !image.path.empty();
    }
    if (incomplete && format != "text") {
      std::cerr << "hvprof-report: the report is incomplete; see its problems and images\n";
    }
    return incomplete ? kIncomplete : 0;
  } catch (const po::error& error) {
    std::cerr << "hvprof-report: " << error.what() << "\nTry 'hvprof-report --help'.\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "hvprof-report: internal error: " << error.what() << "\n";
    return 1;
  }
}
