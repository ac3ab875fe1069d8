// hvprof-report: opreport-like reports over a session directory. Thin main over hvprof_report.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>

#include <boost/program_options.hpp>

#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/push/profile.h"
#include "hvprof/setup/setup.h"
#include "hvprof/report/views/callgraph.h"
#include "hvprof/report/views/stacks.h"
#include "hvprof/report/writers/callgraph.h"
#include "hvprof/report/writers/csv.h"
#include "hvprof/report/writers/flamegraph.h"
#include "hvprof/report/writers/folded.h"
#include "hvprof/report/writers/pprof.h"
#include "hvprof/report/writers/json.h"
#include "hvprof/report/writers/text.h"
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
(reported from the images in it, wherever it is); by default it is the current session.

Examples:
  hvprof-report                       images, most sampled first
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

Exit status: 0 complete report; 1 no report (e.g. no session); 2 bad usage;
3 report printed but incomplete (damaged samples, images missing or changed: see its warnings);
4 report printed but the push (--push) failed: the message says why; the session is untouched.

Options)";

constexpr int kIncomplete = 3;
constexpr int kPushFailed = 4;

Result<std::vector<uint8_t>> ParseModes(const std::string& text) {
  std::vector<uint8_t> modes;
  HVPROF_TRY(items, setup::SplitList(text, "mode"));
  for (const std::string& item : items) {
    if (item == "user") modes.push_back(0);
    else if (item == "kernel") modes.push_back(1);
    else if (item == "hypervisor" || item == "xen") modes.push_back(2);
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

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string session_arg;
    std::string session_root = store::kDefaultSessionRoot;
    std::string domains, modes, images, symbols, events, sort, merge, demangle = "smart", format = "text", output;
    std::string stack_root = "domain";
    std::string push_url, push_app, push_tenant;
    std::string image_path;
    double threshold = 0.0;
    report::ReportOptions options;
    po::options_description described(kUsage);
    described.add_options()
        ("help,h", "show this help")
        ("session-dir", po::value(&session_root)->default_value(session_root), "the session root given to hvprof")
        ("symbols,l", "list symbols, not only images")
        ("details,d", "per-instruction counts of each symbol")
        ("debug-info,g", "counts per source file:line (needs DWARF)")
        ("callgraph,c", "call graph, as opreport -c: each symbol with its callers above and callees below "
                        "(needs chains: `hvprof --start-daemon --callgraph=16`)")
        ("children", "with -c: rank symbols by inclusive samples (theirs and their callees'), as perf report "
                     "--children")
        ("by-domain", "break every row down by domain")
        ("all-domains", "dom0's session plus the profiles its active guests published (`hvprof --publish` in "
                        "each): the whole host in one report")
        ("domain", po::value(&domains), "only these domains (ids or names, comma-separated; idle for the idle loop)")
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
         "to zoom, search, flame or icicle), with -o (docs/report-formats.md)")
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
        ("raw-samples", "count the raw samples again instead of using the session's aggregate")
        ("timing", "print where the time went to stderr");
    po::positional_options_description positional;
    positional.add("session", 1);
    po::options_description hidden;
    hidden.add_options()("session", po::value(&session_arg));
    po::options_description all;
    all.add(described).add(hidden);
    po::variables_map values;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), values);
    po::notify(values);
    if (values.count("help") != 0) {
      std::cout << described << "\n";
      return 0;
    }

    auto fail = [](const Error& error, int code) {
      std::cerr << "hvprof-report: " << error.message() << "\n";
      return code;
    };
    int views = static_cast<int>(values.count("symbols") + values.count("details") + values.count("debug-info"));
    options.view = values.count("details") ? report::View::kDetails
                   : values.count("debug-info") ? report::View::kDebugInfo
                   : values.count("symbols") ? report::View::kSymbol
                                             : report::View::kImage;
    if (views > 1 && !(views == 2 && values.count("symbols"))) {
      return fail(Error(ErrorKind::kInvalidArgument, "choose one of -d and -g"), 2);
    }
    options.by_domain = values.count("by-domain") != 0;
    options.threshold = threshold;
    options.reverse = values.count("reverse-sort") != 0;
    options.show_address = values.count("show-address") != 0;
    options.long_filenames = values.count("long-filenames") != 0;
    options.accumulated = values.count("accumulated") != 0;
    options.global_percent = values.count("global-percent") != 0;
    options.exclude_dependent = values.count("exclude-dependent") != 0;
    options.no_header = values.count("no-header") != 0;
    options.verbose = values.count("verbose") != 0;
    if (threshold < 0 || threshold > 100) return fail(Error(ErrorKind::kInvalidArgument, "--threshold must be 0-100"), 2);
    if (format != "text" && format != "csv" && format != "json" && format != "folded" && format != "pprof" &&
        format != "html") {
      return fail(
          MakeError(ErrorKind::kInvalidArgument, "--format: '{}' is not text, csv, json, folded, pprof or html", format),
          2);
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
                                 "show-address", "global-percent", "sort", "reverse-sort"}) {
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
    if (!symbols.empty()) {
      auto parsed = setup::SplitList(symbols, "symbol");
      if (!parsed) return fail(parsed.error(), 2);
      options.symbols = parsed.value();
    }
    if (!images.empty()) {
      auto parsed = setup::SplitList(images, "image");
      if (!parsed) return fail(parsed.error(), 2);
      options.images = parsed.value();
    }

    // The session: a directory, a saved name, or the current one.
    store::SessionPaths paths{session_root};
    auto source = report::OpenSessionSource(session_arg, session_root);
    if (!source) return fail(source.error(), 1);
    report::LoadOptions load;
    load.demangle = demangle != "none";
    load.lines = options.view == report::View::kDebugInfo;
    load.use_aggregate = values.count("raw-samples") == 0;
    load.all_domains = values.count("all-domains") != 0;
    load.stacks = folded || callgraph || !push_url.empty();
    load.stack_threads = pprof || !push_url.empty();
    load.inlines = pprof || !push_url.empty();
    load.build_id_roots = source.value().build_id_roots;
    load.shown_directory = source.value().shown_directory;
    load.debuginfod = values.count("no-debuginfod") == 0;
    const auto started = std::chrono::steady_clock::now();
    if (!image_path.empty()) {
      auto parsed = setup::SplitList(image_path, "image-path");
      if (!parsed) return fail(parsed.error(), 2);
      load.image_path = parsed.value();
    }
    auto profile = report::LoadProfile(source.value().directory, load);
    if (!profile) return fail(profile.error(), 1);

    // Filters that need the session: domains by name, events by name.
    if (!domains.empty()) {
      auto items = setup::SplitList(domains, "domain");
      if (!items) return fail(items.error(), 2);
      for (const std::string& item : items.value()) {
        bool found = item == "idle";
        if (found) options.domains.push_back(0x7FFF);
        for (const auto& record : profile.value().metadata().domains) {
          if (record.name == item || std::to_string(record.id) == item) {
            options.domains.push_back(record.id);
            found = true;
          }
        }
        if (!found) return fail(MakeError(ErrorKind::kNotFound, "--domain: the session has no domain '{}'", item), 2);
      }
    }
    if (!events.empty()) {
      auto items = setup::SplitList(events, "event");
      if (!items) return fail(items.error(), 2);
      for (const std::string& item : items.value()) {
        bool found = false;
        for (const auto& event : profile.value().metadata().events) {
          if (event.name == item) {
            options.events.push_back(event.counter);
            found = true;
          }
        }
        if (!found) {
          return fail(MakeError(ErrorKind::kNotFound, "--event: the session did not count '{}'", item), 2);
        }
      }
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
    if (session_arg.empty() && profile.value().total_samples() == 0) {
      if (auto newest = store::NewestSavedSession(paths)) {
        std::cerr << fmt::format("hvprof-report: the current session has no samples; the newest saved one is "
                                 "'{0}' (`hvprof-report {0}`, or `hvprof-report --help` for how to pick one)\n",
                                 *newest);
      }
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
