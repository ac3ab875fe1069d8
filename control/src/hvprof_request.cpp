#include "hvprof/control/hvprof_request.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "did_you_mean.h"
#include "hvprof/base/escape.h"
#include "hvprof/buildid_cache/cache.h"
#include "hvprof/base/units.h"
#include "hvpmu/abi/ring.h"
#include "hvprof/control/hypervisor.h"
#include "hvprof/store/session.h"

namespace hvprof::control {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(Usage: hvprof ACTION [options]
  or:  hvprof run [setup options] [--duration=T] [--repeat=N] [--json=FILE] [--] [CMD ...]
  or:  hvprof record [setup options] [--] [CMD ...]
  or:  hvprof archive [--session-dir=DIR] [SESSION] -o FILE.tar

System-wide profiling of a virtualized host: the hypervisor, dom0 and every guest. One action
per call; every action is safe to repeat. `hvprof --ACTION --help`, `hvprof run --help` and
`hvprof archive --help` show one command's options.

The Xenoprof workflow, step by step:
  hvprof --start-daemon --active-domains=1,2 --passive-domains=3
      in dom0, first: check the setup and start hvprofd (the counters stay off)
  hvprof --start-daemon && hvprof --start
      in each active guest (on the sim its commands add --domain=ID; on Xen, every
      --start-daemon adds --platform=xen, and a guest's commands --domain=ID)
  hvprof --start
      in dom0, once every active guest has started; then the workload runs
  hvprof --stop
      in dom0: the samples are written, and profiling can start again
  hvprof --publish
      in a guest: its symbolized profile, for dom0's `hvprof-report --all-domains`
  hvprof --shutdown
      in dom0: releases the hypervisor's profiler and ends hvprofd
  hvprof-report -l
      the report, by symbol

One workload, as perf record takes it:
  hvprof record -g CMD ARGS...
      profiles this host (as root) while CMD runs, saves the session and prints its report;
      beside hvprofd.service on linux, add --session-dir=/tmp/hvprof
  hvprof run --platform=sim --duration=2s
      a simulated host of --scenario, its guests profiled from dom0
  hvprof run --repeat=5 --baseline=before --fail-on-regression=1 CMD
      a gate for benchmark scripts: exits 5 when a symbol's share grew significantly by 1
      point or more against the saved session `before`, or 6 when a side has no samples

The sim and linux platforms run under hvprof-hv (hvprof-hv --help): dom0's --start-daemon and
`hvprof run` start one when none serves --run-dir, and --shutdown (or the run's end) ends it.
--shutdown always finishes: an hvprofd that does not answer within 5 s is ended (SIGTERM, then
SIGKILL) and the next --start-daemon recovers. If hvprof-hv goes away, hvprofd writes the
session, marks it incomplete and exits by itself. The session directory must be changeable
only by root and you (it is refused otherwise). `hvprof --save` refuses a session without
samples.

Exit status:
  0   done
  1   failed: the message says why and what to do
  2   bad usage
  3   done, but samples were lost on the way (a full disk, a peer that died); --stop, --dump
      and --shutdown print a warning saying which
  5   hvprof run --fail-on-regression: a regression, and CMD succeeded
  6   hvprof run --baseline: a side has no samples, and CMD succeeded
  N   hvprof run: CMD's own status

Actions)";

constexpr const char* kRunUsage = R"(Usage: hvprof run [options] [--] CMD [ARGS...]
  or:  hvprof run --platform=sim [--scenario=FILE] [--duration=T] [options]
  or:  hvprof record [options] [--] CMD [ARGS...]

Profiles one workload system-wide: starts hvprofd (and the hvprof-hv that sim and linux need),
starts profiling, runs CMD, stops, saves the session as samples/run-DATE-TIME and prints its
report by symbol. `hvprof record` is the same command, as perf calls it. hvprof's options end
at `--`, or at CMD (the first word that is not one of them), so `hvprof record -g ./bench
--threads=4` passes --threads=4 to ./bench. Without CMD, a real machine is profiled for
--duration; a simulated one (--platform=sim) runs for --duration.

Beside a running hvprofd on linux or the sim (hvprofd.service holds /var/lib/hvprof), give the
run a session directory of its own (e.g. --session-dir=/tmp/hvprof). The run then uses an
hvprof-hv of its own too, and says so; the service keeps profiling. On Xen the hypervisor has
one profiler: stop the service first. A run never joins a running hvprofd's session: that
would cut the service's session where the run starts and ends.

Examples:
  hvprof record -g ./bench --threads=4
      this host (as root), with call chains; the report by symbol at the end
  hvprof run --platform=sim --duration=2s
      the simulated host of --scenario (default: hvprof's own), its guests from dom0
  hvprof run --repeat=5 --json=summary.json -- ./bench
      five runs, each symbol's mean share and spread, and a JSON summary
  hvprof run --repeat=5 --baseline=before --fail-on-regression=1 -- ./bench
      a gate: each run diffed against the saved session `before` (hvprof-report's tests)

Exit status:
  N   CMD's own status (0 without CMD)
  1   hvprof failed: the message says why
  2   bad usage
  5   --fail-on-regression found a regression, and CMD succeeded
  6   the baseline or a run has no samples, so nothing was compared, and CMD succeeded)";

// `hvprof --ACTION --help`: the action's own line and the options that go with it.
constexpr const char* kActionUsage = "Usage: hvprof {} [options]\n\nOne action per call (hvprof --help lists "
                                     "them all, with the workflow)";

constexpr const char* kArchiveUsage = R"(Usage: hvprof archive [--session-dir=DIR] [SESSION] -o FILE.tar

Writes one tar file holding a session (SESSION: a saved session's name or a session directory;
by default the current one) and every image and separate debug file its samples need, stored by
the build-id the session recorded (.build-id/xx/rest and .build-id/xx/rest.debug, the layout of
gdb and debuginfod); images recorded without a build-id (kallsyms, System.map) are stored by
their path under by-path/. `hvprof-report archive:FILE.tar ...` then reports it on any machine,
without the original files, as the session was reported here.

An image that is gone, or whose build-id is not the one recorded (rebuilt or upgraded since),
is refused, and the archive is not written: the message names each file, the build-id expected
and the one found. Put the profiled files back, set DEBUGINFOD_URLS to a debuginfod server that
has them (asked by build-id), or give --partial to archive without them. The format is in
docs/session-format.md (Archives).

Exit status: 0 written; 1 not written (the message says why); 2 bad usage.

Options)";

// The options' words as given, before they are checked.
struct Words {
  setup::SetupOptions setup;
  std::string save_name;
  std::string run_sim;
  std::string cpu_type;
  std::string scenario;
  std::string active, passive, passive_images;
  // Read wide, so that a negative or huge value is refused with its range, not wrapped.
  std::map<std::string, int64_t> numbers{{"buffer-size", 0}, {"callgraph", 0}, {"poll-interval", 0}, {"rate", 0}};
  RunOptions run;
  std::string duration;
  std::string build_id_cache_size;
  std::string continuous, keep_size, keep_age;
};

// Which help page Describe lays out; every page's options are all read on every call.
enum class Page : uint8_t { kWhole, kRun, kAction };

// --start-daemon's setup options (`hvprof run` takes them too). The run page starts with its
// usage, and the setup options are its first.
po::options_description DescribeSetup(Words& w, Page page) {
  po::options_description options(page == Page::kRun ? std::string(kRunUsage) + "\n\nSetup options"
                                                     : std::string("Setup options (with --start-daemon)"));
  options.add_options()
      ("platform", po::value(&w.setup.platform),
       "sim (a simulated machine), linux (this host through perf_event_open) or xen (Xen 4.17's xenoprof, from a "
       "PV dom0 or PV guest as root; docs/xen.md). sim and linux run under hvprof-hv: dom0's --start-daemon and "
       "`hvprof run` start one when none serves --run-dir (--start-daemon's ends at --shutdown, run's with the "
       "run). Default: the platform of the hvprof-hv serving --run-dir, else xen on a Xen host, else linux; "
       "the choice is printed")
      ("scenario", po::value(&w.scenario), "sim: the simulated machine of the hvprof-hv started for it, a scenario "
                   "file or the name of one of hvprof's own (hvprof-hv --help; default: default)")
      ("xen", po::value(&w.setup.xen_image), "the hypervisor image (xen-syms) to symbolize hypervisor samples with; default: what the platform reports")
      ("vmlinux", po::value(&w.setup.vmlinux), "dom0's kernel image (vmlinux, System.map); default: what the platform reports, else /proc/kallsyms")
      ("no-vmlinux", "do not symbolize dom0's kernel samples")
      ("active-domains", po::value(&w.active), "domains (ids or names, comma-separated) that run their own agent; dom0 always does")
      ("passive-domains", po::value(&w.passive), "domains profiled from dom0 without an agent inside (e.g. HVM guests); all: every domain but dom0 and the active ones")
      ("passive-images", po::value(&w.passive_images), "kernel images of the passive domains, in the same order")
      ("event,e", po::value(&w.setup.events), "NAME:COUNT[:UNITMASK[:KERNEL[:USER]]], NAME alone (its count from -F), or 'default'; repeat for more counters")
      ("buffer-size", po::value(&w.numbers["buffer-size"]), "samples per ring (a power of two from 64 to 1048576, default 16384; on xen any size Xen allows)")
      ("callgraph,c", po::value(&w.numbers["callgraph"]), "record call chains this deep (frame pointers; 0-64)")
      (",g", "record call chains as deep as hvprof walks them, as perf record -g: --callgraph=64")
      ("poll-interval", po::value(&w.numbers["poll-interval"]), "drain every N ms, 1-60000 (default: sized from the buffer and the sample rate)")
      ("rate,F", po::value(&w.numbers["rate"]), "sample N times a second per CPU, as perf record -F: sets the count of "
                 "the default event and of events given without one (-e CPU_CLOCK, -e CPU_CLK_UNHALTED at the "
                 "nominal clock); default on linux 4000, elsewhere the event's count")
      ("jit", po::value(&w.setup.jit), "name JIT-compiled code (Node, Java, Python -X perf) from the perf maps and "
              "jitdumps of sampled processes, which hvprofd copies into the session as they grow and when the "
              "process ends: auto (the default: on for linux and xen, off for the sim's made-up processes), on, off")
      ("sched", "also record scheduling: each vCPU's runstate changes (running, runnable, blocked, offline), "
                "wake-ups and migrations, per pCPU, beside the samples (hvprof-report --sched, --timeline). "
                "sim: from its scheduler; linux: from the sched_switch, sched_waking, sched_wakeup_new and "
                "sched_migrate_task tracepoints (root, tracefs), a KVM guest's vCPU threads as its vCPUs and "
                "other threads as tasks; xen: from Xen's trace buffers, as xentrace reads them (hvprof sets "
                "Xen's global trace mask; no xentrace may run meanwhile)")
      ("build-id-cache", po::value(&w.setup.build_id_cache),
       "when a session stops, keep a copy of each image (and separate debug file) it sampled in this directory "
       "(an absolute path), by build-id, so that the session still reports its symbols after its binaries are "
       "rebuilt, upgraded or removed, as perf's ~/.debug; none: keep no copies. Default: $HVPROF_BUILD_ID_CACHE, "
       "else /var/cache/hvprof/build-id for root and $XDG_CACHE_HOME/hvprof/build-id (~/.cache/...) for others")
      ("build-id-cache-size", po::value(&w.build_id_cache_size),
       "the bytes the build-id cache keeps (k, M, G, T: powers of 1024; at least 1M; default 2G): the images no "
       "session used for longest go first, and a file over a quarter of it is not kept")
      ("continuous", po::value(&w.continuous)->implicit_value("60s"),
       "profile always: hvprofd starts profiling at once (no --start; --stop, --save and --reset are refused, "
       "--shutdown ends it) and every WINDOW (default 60s; 1s to 1d; on the sim 1ms to 1d of simulated time) "
       "closes the window into a saved session of its own, samples/window-INDEX-START, without stopping the "
       "counters: no sample is in two windows or none. Without -e and -F it samples at 99 Hz per CPU. Reports "
       "read a window like any saved session (hvprof-report --list shows them), and a range of them merged "
       "(hvprof-report --since, --until, --last); hvprof-push sends each to a Pyroscope server as it closes; "
       "docs/continuous.md")
      ("keep-size", po::value(&w.keep_size),
       "--continuous: the bytes the windows, the window in progress and the build-id cache may take on disk (k, "
       "M, G, T: powers of 1024; default 2G; the cache is held to a quarter of it). Over it, the oldest windows "
       "lose their raw samples first (their aggregate stays, for flat, call-graph and stack reports), then go "
       "whole; the newest window always stays")
      ("keep-age", po::value(&w.keep_age),
       "--continuous: windows that ended longer ago than this go (e.g. 12h, 30d; default 7d)")
      ("verbose,V", "log more in hvprofd.log");
  return options;
}

void Describe(Words& w, po::options_description& all, Page page = Page::kWhole, std::string_view action = {}) {
  po::options_description actions(kUsage);
  actions.add_options()
      ("start-daemon", "check the setup options below, start hvprofd and set up the "
                       "hypervisor's profiler (counters stay off). Again with the same options: nothing to do "
                       "(exit 0); with others: refused until --shutdown. Other events than the current "
                       "session's are refused unless it recorded nothing (--save or --reset it first)")
      ("reload", "give the running hvprofd new settings: the whole setup as --start-daemon takes it (the service "
                 "passes HVPROF_OPTIONS again: `systemctl reload hvprofd`). --keep-size, --keep-age, "
                 "--build-id-cache-size, --verbose and --continuous's window (from the next window on) take effect "
                 "at once; a change of anything else is refused, changing nothing, as it needs a restart. hvprofd "
                 "also reads its settings again (SESSION_DIR/daemonrc.json) on SIGHUP")
      ("start,s", "start profiling (in dom0: once every active guest has started)")
      ("stop,t", "stop profiling and write the samples; the daemon stays up")
      ("dump,d", "write the samples collected so far (fails when no hvprofd runs: there is nothing to write)")
      ("shutdown", "stop, write the samples, release the profiler and end the daemon, then the hvprof-hv its "
                   "--start-daemon started, if any, even if another session root's daemon uses it too "
                   "(opcontrol's -h is help here)")
      ("reset", "empty the current session (samples/current)")
      ("save", po::value(&w.save_name), "keep the current session as samples/NAME and carry on in a fresh one; a session without samples is not "
                                          "saved (`hvprof run` saves each of its runs itself)")
      ("status", "the daemon, the hypervisor's profiler, every domain's role and rings, losses; with --sched, the scheduling records stored and lost")
      ("list-events,l", "the events of this machine's CPU and their unit masks")
      ("publish", "in an active guest: hand this domain's symbolized profile to dom0 for its whole-host report "
                  "(hvprof-report --all-domains)")
      ("run-sim", po::value(&w.run_sim), "simulated machines: advance the clock by DURATION (e.g. 2s) while draining")
      ("help,h", "show this help")
      ("version", "print hvprof's version");
  po::options_description options = DescribeSetup(w, page);
  po::options_description general("General options");
  general.add_options()
      ("domain", po::value(&w.setup.domain), "the domain this command runs in: 0 (the default) is dom0; on the sim, "
                 "a guest's commands give its id (e.g. --domain=1)")
      ("session-dir", po::value(&w.setup.session_root)->default_value(store::kDefaultSessionRoot),
       "where sessions, the lock and the log live (a guest on the sim defaults to its own: "
       "/var/lib/hvprof/domain-ID)")
      ("run-dir", po::value(&w.setup.hv_run_dir), "where hvprof-hv's domain sockets are (default: its default); "
                  "on xen, where dom0's agent keeps its lock (default /run/hvprof)")
      ("session-group", po::value(&w.setup.session_group),
       "with --start-daemon: let GROUP read the sessions (directories 2750, files 0640); without it they are "
       "their owner's alone (0700, 0600), since they say which processes ran, what they mapped and their stacks")
      ("cpu-type", po::value(&w.cpu_type), "with --list-events: list this CPU type's events offline");
  po::options_description run_described("Options of `hvprof run`");
  run_described.add_options()
      ("duration", po::value(&w.duration), "how long to run a simulated machine, or to profile a real one "
                                         "when no command is given (default 1s)")
      ("domain-map", po::value(&w.run.domain_map), "linux: domains for process trees, cgroups and VMs "
                                                         "(hvprof-hv --help), for the hvprof-hv that `hvprof run` "
                                                         "or --start-daemon starts")
      ("repeat", po::value(&w.run.repeat)->default_value(1), "profile the workload N times and report the spread of each symbol's share")
      ("json", po::value(&w.run.json_path), "write a JSON summary here (samples, losses, top symbols, wall time, exit status)")
      ("baseline", po::value(&w.run.baseline),
       "run: afterwards, diff the runs against this session (a saved name, a directory or archive:FILE), symbol by "
       "symbol with the tests of hvprof-report --diff, and print the significant changes (also in --json)")
      ("fail-on-regression", po::value(&w.run.fail_points)->implicit_value(0.0),
       "run, with --baseline: exit 5 when a symbol's share grew significantly by at least POINTS percentage points "
       "(default: any significant growth); the rows that did are printed")
      ("top", po::value(&w.run.top)->default_value(20), "symbols in the summaries")
      ("push", po::value(&w.run.push_url),
       "at the end, send each run's stacks to the Grafana Pyroscope server at this base URL (e.g. "
       "http://127.0.0.1:4040), one pprof series per domain; credentials in the URL or in HVPROF_PUSH_USER and "
       "HVPROF_PUSH_PASSWORD. A failed push is a warning (the summary's \"push\" says why); the sessions stay")
      ("push-app", po::value(&w.run.push_app)->default_value("hvprof"), "--push: Pyroscope's application name")
      ("push-tenant", po::value(&w.run.push_tenant), "--push: the tenant (X-Scope-OrgID)");
  switch (page) {
    case Page::kWhole: all.add(actions).add(options).add(general).add(run_described); break;
    case Page::kRun: all.add(options).add(general).add(run_described); break;
    case Page::kAction: {
      po::options_description head(fmt::format(kActionUsage, action));
      for (const auto& option : actions.options()) {
        if ("--" + option->long_name() == action) head.add(option);
      }
      all.add(head);
      if (action == HvprofActionOption(HvprofAction::kStartDaemon) || action == HvprofActionOption(HvprofAction::kReload)) {
        all.add(options);
      }
      all.add(general);
      break;
    }
  }
}

void DescribeArchive(ArchiveRequest& request, po::options_description& described) {
  described.add_options()
      ("help,h", "show this help")
      ("session-dir", po::value(&request.session_root)->default_value(request.session_root),
       "the session root given to hvprof")
      ("output,o", po::value(&request.output), "the tar file to write (replaced only once it is whole; - for "
                                               "standard output)")
      ("partial", "archive without the images that are missing or not the ones profiled (their samples are then "
                  "reported as (no symbols)), saying which")
      ("no-debuginfod", "do not ask the debuginfod servers of DEBUGINFOD_URLS for missing images and debug info");
}

// -g's depth: the deepest chain the engine walks (setup::CheckNumber's bound for --callgraph).
constexpr int64_t kDeepestCallgraph = hvpmu::ring::kMaxBacktraceDepth;

constexpr HvprofAction kActions[] = {HvprofAction::kStartDaemon, HvprofAction::kReload,   HvprofAction::kStart,
                                     HvprofAction::kStop,        HvprofAction::kDump,     HvprofAction::kShutdown,
                                     HvprofAction::kReset,       HvprofAction::kSave,     HvprofAction::kStatus,
                                     HvprofAction::kListEvents,  HvprofAction::kRunSim,   HvprofAction::kPublish};

Error Refuse(std::string message) { return Error(ErrorKind::kInvalidArgument, std::move(message)); }

Result<HvprofRequest> ParseArchive(const std::vector<std::string>& args) {
  HvprofRequest request;
  request.kind = HvprofKind::kArchive;
  ArchiveRequest& archive = request.archive;
  archive.session_root = store::kDefaultSessionRoot;
  po::options_description described(kArchiveUsage);
  DescribeArchive(archive, described);
  po::options_description hidden;
  hidden.add_options()("session", po::value(&archive.session));
  po::positional_options_description positional;
  positional.add("session", 1);
  po::options_description all;
  all.add(described).add(hidden);
  po::variables_map values;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), values);
    po::notify(values);
  } catch (const po::error& error) {
    return Error(ErrorKind::kInvalidArgument, DescribeCommandLineError(error, all, "Try 'hvprof archive --help'."));
  }
  if (values.count("help") != 0) {
    request.kind = HvprofKind::kArchiveHelp;
    return request;
  }
  if (archive.output.empty()) {
    return Refuse("name the archive to write with -o FILE.tar\nTry 'hvprof archive --help'.");
  }
  archive.options.partial = values.count("partial") != 0;
  archive.options.debuginfod = values.count("no-debuginfod") == 0;
  return request;
}

// The comma-separated lists of domains and images.
Result<void> SplitDomainLists(const Words& w, setup::SetupOptions& setup) {
  for (auto [text, option, target] : {std::tuple{&w.active, "active-domains", &setup.active_domains},
                                      std::tuple{&w.passive, "passive-domains", &setup.passive_domains},
                                      std::tuple{&w.passive_images, "passive-images", &setup.passive_images}}) {
    if (text->empty()) continue;
    HVPROF_TRY(items, setup::SplitList(*text, option));
    *target = std::move(items);
  }
  return Ok();
}

// A size option (k, M, G, T) of at least `least_mib` MiB; `advice` says what to give instead.
Result<uint64_t> SizeOption(std::string_view option, const std::string& typed, uint64_t least_mib,
                            std::string_view advice) {
  HVPROF_TRY(bytes, buildid_cache::ParseSize(typed));
  if (bytes < (least_mib << 20)) {
    return Refuse(fmt::format("--{}={} keeps less than {} MiB, {}", option, typed, least_mib, advice));
  }
  return bytes;
}

// --continuous and its budget.
Result<void> ReadContinuous(const po::variables_map& values, Words& w) {
  setup::SetupOptions& setup = w.setup;
  if (values.count("continuous") == 0) {
    for (const char* option : {"keep-size", "keep-age"}) {
      if (values.count(option) != 0) return Refuse(fmt::format("--{} is the budget of --continuous's windows", option));
    }
    return Ok();
  }
  auto window = ParseDurationNs(w.continuous);
  if (!window) return Refuse(fmt::format("--continuous: {}", window.error().message()));
  HVPROF_TRYV(setup::CheckWindow(window.value(), setup.platform));
  setup.window_ns = window.value();
  if (setup.domain != 0) {
    return Refuse("--continuous profiles the host from dom0; a guest's own agent does not run continuously yet");
  }
  if (!w.active.empty()) {
    return Refuse("--continuous starts profiling at once, which waits for no guest's agent: profile the guests "
                  "as --passive-domains");
  }
  setup.keep_bytes = setup::kDefaultKeepBytes;
  if (!w.keep_size.empty()) {
    HVPROF_TRY(bytes, SizeOption("keep-size", w.keep_size, setup::kMinKeepBytes >> 20, "too little for the windows: give more (e.g. 2G)"));
    setup.keep_bytes = bytes;
  }
  setup.keep_age_ns = setup::kDefaultKeepAgeNs;
  if (!w.keep_age.empty()) {
    auto age = ParseDurationNs(w.keep_age);
    if (!age) return Refuse(fmt::format("--keep-age: {}", age.error().message()));
    setup.keep_age_ns = age.value();
  }
  // The budget's rules, as hvprofd checks a reloaded setup.
  return setup::CheckBudget(setup);
}

// The setup every kind shares: the platform, the numbers in their ranges, the session root.
Result<void> ReadSetup(const po::variables_map& values, Words& w, bool run, const HvprofEnvironment& environment) {
  setup::SetupOptions& setup = w.setup;
  // Which platform, for the actions that set one up, and for the events its runs use (offline,
  // --cpu-type names the table); the others do not need it.
  const bool listing = values.count("list-events") != 0 && values.count("cpu-type") == 0;
  if ((run || listing || values.count("start-daemon") != 0 || values.count("reload") != 0) && values.count("help") == 0 &&
      values.count("platform") == 0) {
    const PlatformChoice chosen =
        ChoosePlatform(setup.hv_run_dir, static_cast<uint16_t>(setup.domain), environment.xen_host);
    setup.platform = chosen.platform;
    if (environment.say) environment.say("--platform=" + chosen.platform + ": " + chosen.why);
  }
  if (values.count("scenario") != 0 && setup.platform != "sim") return Refuse("--scenario is for --platform=sim");
  // -g: perf record's habit, the deepest chains hvprof walks.
  if (values.count("-g") != 0) {
    if (values.count("callgraph") != 0) return Refuse("-g records chains as deep as they go; give it or --callgraph=N, not both");
    w.numbers["callgraph"] = kDeepestCallgraph;
  }
  for (auto [option, field] : {std::pair{"buffer-size", &setup.buffer_size}, std::pair{"callgraph", &setup.callgraph},
                               std::pair{"poll-interval", &setup.poll_interval_ms}, std::pair{"rate", &setup.rate}}) {
    HVPROF_TRY(checked, setup::CheckNumber(option, w.numbers[option], setup.platform));
    *field = checked;
  }
  // On the sim every domain's commands run on one host: keep each guest's sessions apart.
  if (setup.domain != 0 && values["session-dir"].defaulted()) {
    setup.session_root = std::string(store::kDefaultSessionRoot) + "/domain-" + std::to_string(setup.domain);
  }
  if (!setup.build_id_cache.empty() && setup.build_id_cache != buildid_cache::kNone &&
      setup.build_id_cache[0] != '/') {
    return Refuse(fmt::format("--build-id-cache={}: give an absolute path, or none", setup.build_id_cache));
  }
  if (!w.build_id_cache_size.empty()) {
    HVPROF_TRY(bytes, SizeOption("build-id-cache-size", w.build_id_cache_size, 1,
                                 "too little for any image: give more (e.g. 2G), or --build-id-cache=none for no cache"));
    setup.build_id_cache_bytes = bytes;
  }
  HVPROF_TRYV(ReadContinuous(values, w));
  setup.no_vmlinux = values.count("no-vmlinux") != 0;
  setup.verbose = values.count("verbose") != 0;
  setup.sched = values.count("sched") != 0;
  return Ok();
}

// hvprof run [options] -- CMD...: the whole sequence for one workload.
Result<void> ReadRun(const po::variables_map& values, Words& w, const std::vector<std::string>& command,
                     const HvprofEnvironment& environment, HvprofRequest& request) {
  if (w.setup.domain != 0) {
    return Refuse("runs in dom0 (it drives the whole host); in a guest use --start-daemon, --start, --stop and "
                  "--publish");
  }
  for (HvprofAction action : kActions) {
    const std::string_view option = HvprofActionOption(action);
    if (values.count(std::string(option.substr(2))) != 0) {
      return MakeError(ErrorKind::kInvalidArgument, "{} is an action of its own; `hvprof run` does them all", option);
    }
  }
  HVPROF_TRYV(SplitDomainLists(w, w.setup));
  RunOptions& run = w.run;
  if (!w.duration.empty()) {
    auto parsed = ParseDurationNs(w.duration);
    if (!parsed) return MakeError(ErrorKind::kInvalidArgument, "--duration: {}", parsed.error().message());
    run.duration_ns = parsed.value();
  }
  if (values.count("continuous") != 0) {
    return Refuse("--continuous goes with --start-daemon: `hvprof run` profiles one workload and ends");
  }
  if (run.repeat == 0) return Refuse("--repeat must be at least 1");
  if (values.count("fail-on-regression") != 0 && run.baseline.empty()) {
    return Refuse("--fail-on-regression compares against --baseline=SESSION: name one");
  }
  run.setup = w.setup;
  run.scenario = w.scenario;
  run.command = command;
  run.hvprofd_path = environment.program_dir + "/hvprofd";
  run.hv_path = environment.program_dir + "/hvprof-hv";
  request.kind = HvprofKind::kRun;
  request.run = run;
  return Ok();
}

// One action, and only the options that go with it.
Result<void> ReadAction(const po::variables_map& values, Words& w, HvprofRequest& request) {
  for (const char* run_only : {"baseline", "fail-on-regression", "push", "push-tenant", "push-app"}) {
    if (values.count(run_only) != 0 && !values[run_only].defaulted()) {
      return MakeError(ErrorKind::kInvalidArgument, "--{} goes with `hvprof run`{}", run_only,
                       std::string_view(run_only).starts_with("push")
                           ? "; continuous mode's windows are pushed by hvprof-push (docs/continuous.md)"
                           : "");
    }
  }
  std::vector<HvprofAction> chosen;
  for (HvprofAction action : kActions) {
    if (values.count(std::string(HvprofActionOption(action).substr(2))) != 0) chosen.push_back(action);
  }
  if (chosen.empty()) return Refuse("no action given\nTry 'hvprof --help'.");
  if (chosen.size() > 1) {
    return MakeError(ErrorKind::kInvalidArgument, "one action per call; you gave {} and {}\nTry 'hvprof --help'.",
                     HvprofActionOption(chosen[0]), HvprofActionOption(chosen[1]));
  }
  request.action = chosen[0];
  for (const char* setup_only : {"xen", "vmlinux", "no-vmlinux", "active-domains", "passive-domains",
                                 "passive-images", "event", "buffer-size", "callgraph", "-g", "poll-interval", "rate",
                                 "jit", "sched", "verbose", "scenario", "build-id-cache", "build-id-cache-size",
                                 "continuous", "keep-size", "keep-age"}) {
    if (values.count(setup_only) != 0 && request.action != HvprofAction::kStartDaemon &&
        request.action != HvprofAction::kReload) {
      return MakeError(ErrorKind::kInvalidArgument, "{}{} is a setup option; it only goes with --start-daemon (or --reload)",
                       setup_only[0] == '-' ? "" : "--", setup_only);
    }
  }
  HVPROF_TRYV(SplitDomainLists(w, w.setup));
  if (request.action == HvprofAction::kRunSim) {
    auto sim_time = ParseDurationNs(w.run_sim);
    if (!sim_time) return MakeError(ErrorKind::kInvalidArgument, "--run-sim: {}", sim_time.error().message());
    request.run_sim_ns = sim_time.value();
  }
  request.kind = HvprofKind::kAction;
  return Ok();
}

// hvprof run's workload, as perf record takes it: from the first word that is not an option
// (Boost reads the options, and their values, before it), every word is the command's. Words
// after `--` are positional to Boost already.
std::vector<po::option> WorkloadFromHere(std::vector<std::string>& tokens) {
  if (tokens.empty() || (tokens[0].size() > 1 && tokens[0][0] == '-')) return {};
  std::vector<po::option> workload;
  for (std::string& token : tokens) {
    po::option word;
    word.string_key = "command";
    word.value.push_back(token);
    word.original_tokens.push_back(std::move(token));
    workload.push_back(std::move(word));
  }
  tokens.clear();
  return workload;
}

// A first word that is not an option is a command only if it is one hvprof has.
Error NotACommand(const std::string& word) {
  std::vector<std::string> candidates{"run", "record", "archive"};
  for (HvprofAction action : kActions) candidates.emplace_back(HvprofActionOption(action));
  const std::string near = Nearest(word, candidates);
  const std::string shown = EscapeForTerminal(word);
  if (near.starts_with("--")) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a command: hvprof's actions are options, as opcontrol's; did you mean `hvprof {}`?\n"
                     "Try 'hvprof {} --help'.",
                     shown, near, near);
  }
  if (!near.empty()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "'{}' is not a command of hvprof; did you mean `hvprof {}`?\nTry 'hvprof {} --help'.", shown, near,
                     near);
  }
  return MakeError(ErrorKind::kInvalidArgument,
                   "'{}' is not a command of hvprof: it has run (or record), archive, and actions given as options "
                   "(--start-daemon, --start, ...)\nTry 'hvprof --help'.",
                   shown);
}

}  // namespace

std::string_view HvprofActionOption(HvprofAction action) {
  switch (action) {
    case HvprofAction::kStartDaemon: return "--start-daemon";
    case HvprofAction::kReload: return "--reload";
    case HvprofAction::kStart: return "--start";
    case HvprofAction::kStop: return "--stop";
    case HvprofAction::kDump: return "--dump";
    case HvprofAction::kShutdown: return "--shutdown";
    case HvprofAction::kReset: return "--reset";
    case HvprofAction::kSave: return "--save";
    case HvprofAction::kStatus: return "--status";
    case HvprofAction::kListEvents: return "--list-events";
    case HvprofAction::kRunSim: return "--run-sim";
    case HvprofAction::kPublish: return "--publish";
  }
  return "--status";
}

std::string HvprofUsage() {
  Words w;
  po::options_description all;
  Describe(w, all);
  std::ostringstream out;
  out << all;
  return out.str();
}

std::string HvprofRunUsage() {
  Words w;
  po::options_description all;
  Describe(w, all, Page::kRun);
  std::ostringstream out;
  out << all;
  return out.str();
}

std::string HvprofActionUsage(HvprofAction action) {
  Words w;
  po::options_description all;
  Describe(w, all, Page::kAction, HvprofActionOption(action));
  std::ostringstream out;
  out << all;
  return out.str();
}

std::string HvprofArchiveUsage() {
  ArchiveRequest request;
  request.session_root = store::kDefaultSessionRoot;
  po::options_description described(kArchiveUsage);
  DescribeArchive(request, described);
  std::ostringstream out;
  out << described;
  return out.str();
}

Result<HvprofRequest> ParseHvprofRequest(const std::vector<std::string>& arguments,
                                         const HvprofEnvironment& environment) {
  if (!arguments.empty() && arguments[0] == "archive") {
    return ParseArchive(std::vector<std::string>(arguments.begin() + 1, arguments.end()));
  }
  HvprofRequest request;
  if (arguments.empty()) {
    request.kind = HvprofKind::kUsage;
    return request;
  }
  // hvprof run [options] [--] CMD...: the options are read here, CMD is kept as it is.
  const bool run = arguments[0] == "run" || arguments[0] == "record";
  if (run) request.run_word = arguments[0];
  if (!run && !arguments[0].starts_with("-")) return NotACommand(arguments[0]);
  std::vector<std::string> args(arguments.begin() + (run ? 1 : 0), arguments.end());
  Words w;
  po::options_description all;
  Describe(w, all);
  std::vector<std::string> command;
  po::options_description with_command;
  with_command.add(all);
  if (run) with_command.add_options()("command", po::value(&command)->multitoken());
  po::positional_options_description positional;
  if (run) positional.add("command", -1);
  po::variables_map values;
  try {
    po::command_line_parser parser(args);
    parser.options(with_command).positional(positional);
    if (run) parser.extra_style_parser(WorkloadFromHere);
    po::store(parser.run(), values);
    po::notify(values);
  } catch (const po::error& error) {
    return Error(ErrorKind::kInvalidArgument,
                 DescribeCommandLineError(error, all, run ? "Try 'hvprof run --help'." : "Try 'hvprof --help'."));
  }
  // `--fail-on-regression 1 CMD`: its points go with '=', so the 1 would be run as the workload.
  if (run && values.count("fail-on-regression") != 0 && !command.empty() &&
      !command[0].empty() && command[0].find_first_not_of("0123456789.") == std::string::npos) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "--fail-on-regression takes its points as --fail-on-regression={}: '{}' would be run as the "
                     "command\nTry 'hvprof run --help'.",
                     command[0], command[0]);
  }
  HVPROF_TRYV(ReadSetup(values, w, run, environment));
  if (values.count("version") != 0) {
    request.kind = HvprofKind::kVersion;
    return request;
  }
  if (values.count("help") != 0) {
    request.kind = run ? HvprofKind::kRunHelp : HvprofKind::kHelp;
    // hvprof --ACTION --help: that action's page.
    for (HvprofAction action : kActions) {
      if (!run && values.count(std::string(HvprofActionOption(action).substr(2))) != 0) {
        request.kind = HvprofKind::kActionHelp;
        request.action = action;
        break;
      }
    }
    return request;
  }
  // Commands find their agent by domain; in a Xen guest that must be said.
  if (w.setup.platform == "xen" && values.count("domain") == 0 && environment.xen_guest) {
    return Refuse("this is a Xen guest: give its domain id with --domain=ID on every command (`xenstore-read domid` "
                  "here, or `xl domid NAME` in dom0, prints it)");
  }
  if (run) {
    HVPROF_TRYV(ReadRun(values, w, command, environment, request));
  } else {
    HVPROF_TRYV(ReadAction(values, w, request));
  }
  request.setup = w.setup;
  request.run.hvprofd_path = environment.program_dir + "/hvprofd";
  request.run.hv_path = environment.program_dir + "/hvprof-hv";
  request.scenario = w.scenario;
  request.domain_map = w.run.domain_map;
  request.save_name = w.save_name;
  request.cpu_type = w.cpu_type;
  return request;
}

}  // namespace hvprof::control
