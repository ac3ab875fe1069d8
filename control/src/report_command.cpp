#include "hvprof/control/report_command.h"

#include <signal.h>

#include <chrono>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "hvprof/base/escape.h"
#include "hvprof/push/profile.h"
#include "hvprof/report/compare.h"
#include "hvprof/report/load.h"
#include "hvprof/report/sched_records.h"
#include "hvprof/report/source.h"
#include "hvprof/report/views/callgraph.h"
#include "hvprof/report/views/scheduling.h"
#include "hvprof/report/views/stacks.h"
#include "hvprof/report/views/timeline.h"
#include "hvprof/report/writers/callgraph.h"
#include "hvprof/report/writers/csv.h"
#include "hvprof/report/writers/diff.h"
#include "hvprof/report/writers/flamegraph.h"
#include "hvprof/report/writers/folded.h"
#include "hvprof/report/writers/json.h"
#include "hvprof/report/writers/pprof.h"
#include "hvprof/report/writers/scheduling.h"
#include "hvprof/report/writers/sessions.h"
#include "hvprof/report/writers/text.h"
#include "hvprof/report/writers/timeline.h"
#include "hvprof/store/session.h"

namespace hvprof::control {

namespace {

// What a run of hvprof-report says besides the report: each line prefixed with the program.
class Say {
 public:
  explicit Say(std::ostream& err) : err_(err) {}
  void Note(std::string_view text) const { err_ << "hvprof-report: " << EscapeForTerminal(text) << "\n"; }
  void Warning(std::string_view text) const { err_ << "hvprof-report: warning: " << EscapeForTerminal(text) << "\n"; }
  // Exit status 3 (kReportIncomplete), with why on stderr whatever the output showed: the first
  // of `warnings` and how many more, or (`said`: stderr has them already) that they are above.
  // 0 when there are none.
  int IncompleteIf(const std::vector<std::string>& warnings, std::string_view what, bool said = false) const {
    if (warnings.empty()) return 0;
    err_ << "hvprof-report: " << what << " is incomplete (exit status 3): ";
    if (said) {
      err_ << (warnings.size() == 1 ? "see the warning above" : "see the warnings above");
    } else {
      err_ << EscapeForTerminal(warnings[0]);
      if (warnings.size() > 1) err_ << " (and " << warnings.size() - 1 << " more warnings)";
    }
    err_ << "\n";
    return kReportIncomplete;
  }
  int Fail(const Error& error, int status) const {
    err_ << "hvprof-report: " << error.message() << "\n";
    return status;
  }
  std::ostream& stream() const { return err_; }

 private:
  std::ostream& err_;
};

// Emits the report; a file that cannot be written is a report not made.
int Emit(const ReportSink& sink, const Say& say, std::string_view text, int status) {
  if (auto written = sink.emit(text); !written) return say.Fail(written.error(), 1);
  return status;
}

int RunList(const ReportRequest& request, const ReportSink& sink, const Say& say) {
  const auto sessions = report::ListSessions(request.session_root);
  const std::string text = request.format == ReportFormat::kJson
                               ? report::FormatSessionListJson(request.session_root, sessions)
                               : report::FormatSessionList(request.session_root, sessions, request.table.color);
  return Emit(sink, say, text, 0);
}

std::string WriteDiff(const report::Diff& diff, ReportFormat format, double fail_points, bool no_header) {
  switch (format) {
    case ReportFormat::kJson: return report::FormatDiffJson(diff, fail_points);
    case ReportFormat::kCsv: return report::FormatDiffCsv(diff);
    case ReportFormat::kFolded: return report::FormatDiffFolded(diff);
    case ReportFormat::kHtml: return report::FormatDiffFlameGraph(diff);
    default: return report::FormatDiffText(diff, no_header);
  }
}

int RunDiff(const ReportRequest& request, const ReportSink& sink, const Say& say) {
  auto compared = report::DiffSessions(request.diff);
  if (!compared) {
    const ErrorKind kind = compared.error().kind();
    return say.Fail(compared.error(), kind == ErrorKind::kInvalidArgument ? 2
                                      : kind == ErrorKind::kEmpty         ? kReportEmptySide
                                                                          : 1);
  }
  const report::Diff& diff = compared.value().diff;
  if (int status = Emit(sink, say, WriteDiff(diff, request.format, request.fail_points, request.table.no_header), 0);
      status != 0) {
    return status;
  }
  if (request.format != ReportFormat::kText) {
    for (const std::string& note : diff.notes) say.Note(note);
    for (const std::string& warning : diff.warnings) say.Warning(warning);
  }
  if (request.fail_points >= 0) {
    const auto regressions = report::Regressions(diff, request.fail_points);
    if (!regressions.empty()) {
      say.stream() << fmt::format("hvprof-report: {} significant regression{} of at least {} points:\n",
                                  regressions.size(), regressions.size() == 1 ? "" : "s", request.fail_points);
      for (const report::DiffRow* row : regressions) {
        say.stream() << fmt::format("  {:+.2f} points ({:.2f}% -> {:.2f}%, p adj {:.2g})  {}\n", 100 * row->c.delta,
                                    100 * row->c.base_share, 100 * row->c.new_share, row->c.p_adjusted,
                                    EscapeForTerminal(report::DiffRowName(*row)));
      }
      return kReportRegression;
    }
  }
  return say.IncompleteIf(diff.warnings, "the comparison", request.format != ReportFormat::kText);
}

struct SchedOutput {
  std::string text;
  std::vector<std::string> warnings;  // the report is incomplete: exit 3
};

// --sched -l: each domain's CPU time beside its share of the samples.
Result<report::SchedShares> SharesOfSamples(const std::string& directory, const ReportRequest& request,
                                            const report::LoadOptions& load, const report::SchedReport& analysis,
                                            const report::SchedSession& session, SchedOutput& out) {
  HVPROF_TRY(profile, report::LoadProfile(directory, load));
  HVPROF_TRY(table, report::BuildTable(profile, request.table));
  std::map<uint16_t, uint64_t> samples;
  for (const report::DomainSummary& d : table.domains) {
    for (uint64_t count : d.samples) samples[d.domain] += count;
  }
  const auto warnings = profile.Warnings();
  out.warnings.insert(out.warnings.end(), warnings.begin(), warnings.end());
  return report::SharesBesideSamples(analysis, samples, session.options);
}

Result<SchedOutput> MakeSchedReport(const std::string& directory, const ReportRequest& request,
                                    const report::LoadOptions& load) {
  const SchedRequest& sched = request.sched;
  const ReportFormat format = request.format;
  HVPROF_TRY(session, report::LoadSchedRecords(directory));
  session.options.top = sched.top;
  SchedOutput out;
  out.warnings = session.problems;
  // The time line's pass is the analysis too: one pass when both are asked for.
  std::optional<report::Timeline> timeline;
  if (sched.timeline) {
    report::TimelineOptions timeline_options;
    timeline_options.buckets = sched.buckets;
    timeline_options.slices = format == ReportFormat::kPerfetto || format == ReportFormat::kHtml;
    HVPROF_TRY(built, report::BuildTimeline(session.records, session.options, timeline_options));
    timeline = std::move(built);
  }
  if (sched.sched) {
    std::optional<report::SchedReport> analysed;
    if (!timeline) {
      HVPROF_TRY(analysis, report::AnalyzeSched(session.records, session.options));
      analysed = std::move(analysis);
    }
    const report::SchedReport& analysis = timeline ? timeline->report : *analysed;
    std::optional<report::SchedShares> shares;
    if (sched.samples) {
      HVPROF_TRY(beside, SharesOfSamples(directory, request, load, analysis, session, out));
      shares = std::move(beside);
    }
    const report::SchedShares* beside = shares ? &*shares : nullptr;
    out.text = format == ReportFormat::kJson  ? report::FormatSchedJson(analysis, beside)
               : format == ReportFormat::kCsv ? report::FormatSchedCsv(analysis, beside)
                                              : report::FormatSchedText(analysis, request.table.no_header, beside);
  }
  if (timeline) {
    if (!out.text.empty()) out.text += "\n";
    switch (format) {
      case ReportFormat::kText: out.text += report::FormatTimelineText(*timeline); break;
      case ReportFormat::kCsv: out.text += report::FormatTimelineCsv(*timeline); break;
      case ReportFormat::kHtml: out.text += report::FormatTimelineHtml(*timeline, directory); break;
      default: out.text += report::FormatChromeTrace(*timeline); break;
    }
  }
  return out;
}

int RunSched(const ReportRequest& request, const report::SessionSource& source, const report::LoadOptions& load,
             const ReportSink& sink, const Say& say) {
  auto made = MakeSchedReport(source.directory, request, load);
  if (!made) return say.Fail(made.error(), 1);
  std::string text = std::move(made.value().text);
  if (request.format == ReportFormat::kText) {
    for (const std::string& warning : made.value().warnings) text += "Warning: " + EscapeForTerminal(warning) + "\n";
  } else {
    for (const std::string& warning : made.value().warnings) say.Warning(warning);
  }
  if (int status = Emit(sink, say, text, 0); status != 0) return status;
  return say.IncompleteIf(made.value().warnings, "the scheduling report", request.format != ReportFormat::kText);
}

// The samples' views of one profile: the call graph, whole stacks, or a table.
Result<std::string> WriteProfile(const ReportRequest& request, const report::Profile& profile,
                                 const report::ReportOptions& options, const report::StackFilter& filter,
                                 const Say& say) {
  const ReportFormat format = request.format;
  if (request.kind == ReportKind::kCallgraph) {
    report::CallgraphOptions graph_options;
    graph_options.filter = filter;
    graph_options.by_domain = options.by_domain;
    graph_options.children = request.children;
    graph_options.threshold = options.threshold;
    graph_options.symbols = options.symbols;
    const report::Callgraph graph = report::BuildCallgraph(profile, graph_options);
    if (format == ReportFormat::kJson) return report::FormatCallgraphJson(profile, graph, graph_options, options);
    if (format == ReportFormat::kCsv) return report::FormatCallgraphCsv(profile, graph, graph_options, options);
    std::string text = report::FormatCallgraphText(profile, graph, graph_options, options);
    for (const std::string& warning : profile.Warnings()) text += "Warning: " + EscapeForTerminal(warning) + "\n";
    return text;
  }
  if (request.kind == ReportKind::kStacks) {
    report::StackOptions stack_options;
    stack_options.root = request.root;
    stack_options.filter = filter;
    std::string text;
    if (format == ReportFormat::kPprof) {
      HVPROF_TRY(encoded, report::FormatPprof(profile, filter));
      text = std::move(encoded);
    } else if (format == ReportFormat::kHtml) {
      text = report::FormatFlameGraph(profile, report::NameStacks(profile, stack_options), filter);
    } else {
      text = report::FormatFolded(report::NameStacks(profile, stack_options));
    }
    if (profile.metadata().backtrace_depth == 0) {
      say.Note("no sample has a call chain: every stack is one frame deep (profile with "
               "`hvprof --start-daemon --callgraph=16` to record chains)");
    }
    for (const std::string& warning : profile.Warnings()) say.Warning(warning);
    return text;
  }
  HVPROF_TRY(table, report::BuildTable(profile, options));
  if (format == ReportFormat::kJson) return report::FormatJson(profile, table, options);
  if (format == ReportFormat::kCsv) return report::FormatCsv(profile, table, options);
  return report::FormatText(profile, table, options);
}

// Why a report is incomplete: its problems, then the images it could not symbolize (how many,
// and the first); empty when it is whole.
std::vector<std::string> IncompleteReasons(const report::Profile& profile) {
  std::vector<std::string> why = profile.problems();
  const report::Image* first = nullptr;
  size_t images = 0;
  for (const report::Image& image : profile.images()) {
    if (image.problem.empty() || image.path.empty()) continue;
    if (first == nullptr) first = &image;
    ++images;
  }
  if (first != nullptr) {
    why.push_back(fmt::format("{} {} not symbolized ({}: {}{})", images, images == 1 ? "image is" : "images are",
                              first->path, first->problem, images > 1 ? "; the header lists them all" : ""));
  }
  return why;
}

void PrintTiming(const report::Profile& profile, std::chrono::steady_clock::time_point started, const Say& say) {
  const report::LoadTimings& t = profile.timings();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  say.stream() << fmt::format(
      "timing: {} samples, {} distinct addresses, {} distinct stacks\n"
      "  read samples ({}; {} pass{} over samples.hvs): {:.3f} s\n  symbol tables: {:.3f} s\n  attribute: {:.3f} s\n"
      "  resolve: {:.3f} s\n  table and output: {:.3f} s\n  total: {:.3f} s; without symbol tables: {:.3f} s\n",
      profile.total_samples(), t.distinct_addresses, t.distinct_stacks, t.from_aggregate ? "aggregate" : "raw",
      t.samples_passes, t.samples_passes == 1 ? "" : "es", t.read_seconds, t.symbol_tables_seconds, t.attribute_seconds, t.resolve_seconds,
      total - t.read_seconds - t.symbol_tables_seconds - t.attribute_seconds - t.resolve_seconds, total,
      total - t.symbol_tables_seconds);
}

int RunProfile(const ReportRequest& request, const report::SessionSource& source, const report::LoadOptions& load,
               const ReportSink& sink, const Say& say) {
  const auto started = std::chrono::steady_clock::now();
  auto profile = request.range ? report::LoadWindows(request.session_root, *request.range, load)
                               : report::LoadProfile(source.directory, load);
  if (!profile) return say.Fail(profile.error(), 1);
  // Filters that need the session: domains by name, events by name.
  report::ReportOptions options = request.table;
  if (auto resolved = report::ResolveNamedFilters(profile.value(), request.domains, request.events, &options);
      !resolved) {
    return say.Fail(resolved.error(), 2);
  }
  if (auto named = report::ResolveProcessNames(profile.value(), request.comms, &options); !named) {
    return say.Fail(named.error(), 2);
  }
  report::StackFilter filter;
  if (load.stacks) {
    auto counted = report::SelectStackEvents(profile.value(), options.events, options.merge_unit_masks, options.merge_all);
    if (!counted) return say.Fail(counted.error(), 2);
    filter.events = std::move(counted).value();
  }
  filter.domains = options.domains;
  filter.modes = options.modes;
  filter.pids = options.pids;
  filter.processes = options.processes;
  filter.tids = request.tids;
  filter.include_idle = options.include_idle;
  auto text = WriteProfile(request, profile.value(), options, filter, say);
  if (!text) return say.Fail(text.error(), 1);
  if (int status = Emit(sink, say, text.value(), 0); status != 0) return status;
  if (request.timing) PrintTiming(profile.value(), started, say);
  if (!request.push.url.empty()) {
    // An https server closing early must not kill the report with SIGPIPE.
    ::signal(SIGPIPE, SIG_IGN);
    auto pushed = push::PushProfile(profile.value(), filter,
                                    push::PushFromCommandLine(request.push.url, request.push.tenant, request.push.app));
    if (!pushed) {
      say.Note(pushed.error().message());
      return kReportPushFailed;
    }
    say.stream() << fmt::format("hvprof-report: pushed {} series ({} bytes of pprof) to Pyroscope\n",
                                pushed.value().series, pushed.value().bytes);
  }
  // Every status but 0 says why on stderr, whatever the format and -n left out.
  return say.IncompleteIf(IncompleteReasons(profile.value()), "the report");
}

}  // namespace

int RunReport(const ReportRequest& request, const ReportSink& sink) {
  const Say say(*sink.err);
  if (request.kind == ReportKind::kList) return RunList(request, sink, say);
  if (request.kind == ReportKind::kDiff) return RunDiff(request, sink, say);
  // Continuous mode's windows in a range, merged: no one session.
  if (request.range) {
    // Each window's aggregate counts the stacks of every thread together: pprof's without their
    // thread labels.
    report::LoadOptions load = request.load;
    if (load.stack_threads) {
      load.stack_threads = false;
      say.Note("over a time range, pprof's samples carry no vcpu, pcpu or tid labels (report one window for them)");
    }
    return RunProfile(request, report::SessionSource{}, load, sink, say);
  }
  // The session: a directory, a saved name, or (none named) the one with samples.
  Result<report::SessionSource> source = Error(ErrorKind::kNotFound, "no session");
  if (request.session.empty()) {
    auto chosen = report::ChooseSession(request.session_root);
    if (!chosen) return say.Fail(chosen.error(), 1);
    // Which session was chosen is in the report's header; said here with -v only.
    if (!chosen.value().note.empty() && request.table.verbose) say.Note(chosen.value().note);
    source = std::move(chosen.value().source);
  } else {
    source = report::OpenSessionSource(request.session, request.session_root);
  }
  if (!source) return say.Fail(source.error(), 1);
  report::LoadOptions load = request.load;
  load.build_id_roots = source.value().build_id_roots;
  load.shown_directory = source.value().shown_directory;
  if (request.kind == ReportKind::kSched) return RunSched(request, source.value(), load, sink, say);
  // On linux, folded stacks and flame graphs start at their process unless --stack-root says
  // otherwise, as perf's do: every process's main and libc frames would merge into one tower.
  if (request.kind == ReportKind::kStacks && !request.root_chosen &&
      (request.format == ReportFormat::kFolded || request.format == ReportFormat::kHtml)) {
    if (auto session = store::OpenSession(source.value().directory); session && session.value().metadata.platform == "linux") {
      ReportRequest by_process = request;
      by_process.root = report::StackRoot::kProcess;
      load.processes = true;
      return RunProfile(by_process, source.value(), load, sink, say);
    }
  }
  return RunProfile(request, source.value(), load, sink, say);
}

}  // namespace hvprof::control
