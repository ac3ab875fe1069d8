// hvprof: the opcontrol-like command that drives profiling. Thin main over hvprof_control.

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <iostream>
#include <tuple>

#include <boost/program_options.hpp>

#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/base/units.h"
#include "hvprof/base/version.h"
#include "hvprof/control/archive_command.h"
#include "hvprof/control/commands.h"
#include "hvprof/control/hypervisor.h"
#include "hvprof/control/run.h"
#include "hvprof/setup/setup.h"
#include "hvprof/xen/xen_link.h"

namespace po = boost::program_options;
using hvprof::control::Outcome;

namespace {

constexpr const char* kUsage = R"(Usage: hvprof ACTION [options]
       hvprof run [setup options] [--duration=T] [--repeat=N] [--json=FILE]
                  [--baseline=SESSION [--fail-on-regression[=POINTS]]] -- [CMD ...]
       hvprof archive [--session-dir=DIR] [SESSION] -o FILE.tar   (hvprof archive --help)

System-wide profiling of a virtualized host: the hypervisor, dom0 and every guest.
One action per call; every action is safe to repeat. The Xenoprof workflow:

  in dom0:   hvprof --start-daemon --active-domains=1,2 --passive-domains=3
  in each active guest: hvprof --start-daemon && hvprof --start
             (on the sim, a guest's commands say which domain they run in: --domain=1;
              on Xen, add --platform=xen to --start-daemon everywhere, and --domain=ID in guests)
  in dom0:   hvprof --start
             ... the workload runs ...
  in dom0:   hvprof --stop          (samples are written; profiling can start again)
             hvprof --shutdown      (releases the hypervisor's profiler)
             hvprof-report -l       (the report, by symbol)
  in a guest: hvprof --publish      (its symbolized profile, for dom0's `hvprof-report --all-domains`)

`hvprof run` does all of that for one workload, saves the session and prints the report;
its exit status is CMD's. `hvprof run --platform=sim` simulates the machine of --scenario for
--duration (its guests profiled from dom0). On this host (as root):
`hvprof run --platform=linux --session-dir=DIR -- CMD ARGS...`.
As a gate in benchmark scripts: `hvprof run --repeat=5 --baseline=before --fail-on-regression=1
-- CMD` diffs the runs against the saved session `before` (hvprof-report --diff) and exits 5
when a symbol's share grew significantly by 1 point or more, or 6 when `before` or a run has no
samples, so nothing was compared (CMD's own failure wins). `hvprof --save` refuses to save a
session without samples.

The sim and linux platforms run under hvprof-hv (hvprof-hv --help): dom0's --start-daemon and
`hvprof run` start one when none serves --run-dir, and --shutdown (or the run's end) ends it.

Exit status: 0 done; 1 failed (the message says why and what to do); 2 bad usage; 3 done, but
samples were lost on the way (a full disk, a peer that died; --stop, --dump and --shutdown
print a warning saying which). --shutdown always finishes: an hvprofd that does not answer
within 5 s is ended (SIGTERM, then SIGKILL) and the next --start-daemon recovers.
If hvprof-hv goes away, hvprofd writes the session, marks it incomplete and exits by itself.
The session directory must be changeable only by root and you (it is refused otherwise).

Actions)";

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

int ArchiveMain(int argc, char** argv) {
  hvprof::control::ArchiveRequest request;
  request.session_root = hvprof::store::kDefaultSessionRoot;
  po::options_description described(kArchiveUsage);
  described.add_options()
      ("help,h", "show this help")
      ("session-dir", po::value(&request.session_root)->default_value(request.session_root),
       "the session root given to hvprof")
      ("output,o", po::value(&request.output), "the tar file to write (replaced only once it is whole; - for "
                                               "standard output)")
      ("partial", "archive without the images that are missing or not the ones profiled (their samples are then "
                  "reported as (no symbols)), saying which")
      ("no-debuginfod", "do not ask the debuginfod servers of DEBUGINFOD_URLS for missing images and debug info");
  po::options_description hidden;
  hidden.add_options()("session", po::value(&request.session));
  po::positional_options_description positional;
  positional.add("session", 1);
  po::options_description all;
  all.add(described).add(hidden);
  po::variables_map values;
  po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), values);
  po::notify(values);
  if (values.count("help") != 0) {
    std::cout << described << "\n";
    return 0;
  }
  if (request.output.empty()) {
    std::cerr << "hvprof archive: name the archive to write with -o FILE.tar\nTry 'hvprof archive --help'.\n";
    return 2;
  }
  request.options.partial = values.count("partial") != 0;
  request.options.debuginfod = values.count("no-debuginfod") == 0;
  auto outcome = hvprof::control::Archive(request);
  if (!outcome) {
    // One line per image at fault, each escaped (the paths come from the session).
    std::string_view message = outcome.error().message();
    std::cerr << "hvprof archive: ";
    for (size_t end = message.find('\n');; end = message.find('\n')) {
      std::cerr << hvprof::EscapeForTerminal(message.substr(0, end)) << "\n";
      if (end == std::string_view::npos) break;
      message.remove_prefix(end + 1);
    }
    return 1;
  }
  for (const std::string& note : outcome.value().warnings) {
    std::cerr << "hvprof archive: note: " << hvprof::EscapeForTerminal(note) << "\n";
  }
  std::cerr << hvprof::EscapeForTerminal(outcome.value().message) << "\n";
  return 0;
}


}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "archive") {
    try {
      return ArchiveMain(argc - 1, argv + 1);
    } catch (const po::error& error) {
      std::cerr << "hvprof archive: " << error.what() << "\nTry 'hvprof archive --help'.\n";
      return 2;
    } catch (const std::exception& error) {
      std::cerr << "hvprof archive: internal error: " << error.what() << "\n";
      return 1;
    }
  }
  const bool run = argc > 1 && std::string(argv[1]) == "run";
  std::vector<std::string> command;
  std::vector<char*> arguments(argv, argv + argc);
  if (run) {
    // hvprof run [options] -- CMD...: the options are parsed below, CMD is kept as it is.
    arguments.erase(arguments.begin() + 1);
    for (size_t i = 1; i < arguments.size(); ++i) {
      if (std::string(arguments[i]) == "--") {
        for (size_t j = i + 1; j < arguments.size(); ++j) command.emplace_back(arguments[j]);
        arguments.resize(i);
        break;
      }
    }
    argc = static_cast<int>(arguments.size());
    argv = arguments.data();
  }
  try {
    hvprof::setup::SetupOptions setup;
    std::string save_name;
    std::string run_sim;
    std::string cpu_type;
    std::string scenario;
    std::string active, passive, passive_images;
    // Read wide, so that a negative or huge value is refused with its range, not wrapped.
    std::map<std::string, int64_t> numbers{{"buffer-size", 0}, {"callgraph", 0}, {"poll-interval", 0}, {"rate", 0}};
    po::options_description actions(kUsage);
    actions.add_options()
        ("start-daemon", "check the setup options below, start hvprofd and set up the "
                         "hypervisor's profiler (counters stay off). Again with the same options: nothing to do "
                         "(exit 0); with others: refused until --shutdown. Other events than the current "
                         "session's are refused unless it recorded nothing (--save or --reset it first)")
        ("start,s", "start profiling (in dom0: once every active guest has started)")
        ("stop,t", "stop profiling and write the samples; the daemon stays up")
        ("dump,d", "write the samples collected so far (fails when no hvprofd runs: there is nothing to write)")
        ("shutdown", "stop, write the samples, release the profiler and end the daemon, then the hvprof-hv its "
                     "--start-daemon started, if any, even if another session root's daemon uses it too "
                     "(opcontrol's -h is help here)")
        ("reset", "empty the current session (samples/current)")
        ("save", po::value(&save_name), "keep the current session as samples/NAME and carry on in a fresh one; a session without samples is not "
                                            "saved (`hvprof run` saves each of its runs itself)")
        ("status", "the daemon, the hypervisor's profiler, every domain's role and rings, losses; with --sched, the scheduling records stored and lost")
        ("list-events,l", "the events of this machine's CPU and their unit masks")
        ("publish", "in an active guest: hand this domain's symbolized profile to dom0 for its whole-host report "
                    "(hvprof-report --all-domains)")
        ("run-sim", po::value(&run_sim), "simulated machines: advance the clock by DURATION (e.g. 2s) while draining")
        ("help,h", "show this help")
        ("version", "print hvprof's version");
    po::options_description options("Setup options (with --start-daemon)");
    options.add_options()
        ("platform", po::value(&setup.platform),
         "sim (a simulated machine), linux (this host through perf_event_open) or xen (Xen 4.17's xenoprof, from a "
         "PV dom0 or PV guest as root; docs/xen.md). sim and linux run under hvprof-hv: dom0's --start-daemon and "
         "`hvprof run` start one when none serves --run-dir (--start-daemon's ends at --shutdown, run's with the "
         "run). Default: the platform of the hvprof-hv serving --run-dir, else xen on a Xen host, else linux; "
         "the choice is printed")
        ("scenario", po::value(&scenario), "sim: the simulated machine of the hvprof-hv started for it, a scenario "
                     "file or the name of one of hvprof's own (hvprof-hv --help; default: default)")
        ("xen", po::value(&setup.xen_image), "the hypervisor image (xen-syms) to symbolize hypervisor samples with; default: what the platform reports")
        ("vmlinux", po::value(&setup.vmlinux), "dom0's kernel image (vmlinux, System.map); default: what the platform reports, else /proc/kallsyms")
        ("no-vmlinux", "do not symbolize dom0's kernel samples")
        ("active-domains", po::value(&active), "domains (ids or names, comma-separated) that run their own agent; dom0 always does")
        ("passive-domains", po::value(&passive), "domains profiled from dom0 without an agent inside (e.g. HVM guests); all: every domain but dom0 and the active ones")
        ("passive-images", po::value(&passive_images), "kernel images of the passive domains, in the same order")
        ("event,e", po::value(&setup.events), "NAME:COUNT[:UNITMASK[:KERNEL[:USER]]], NAME alone (its count from -F), or 'default'; repeat for more counters")
        ("buffer-size", po::value(&numbers["buffer-size"]), "samples per ring (a power of two from 64 to 1048576, default 16384; on xen any size Xen allows)")
        ("callgraph,c", po::value(&numbers["callgraph"]), "record call chains this deep (frame pointers; 0-64)")
        ("poll-interval", po::value(&numbers["poll-interval"]), "drain every N ms, 1-60000 (default: sized from the buffer and the sample rate)")
        ("rate,F", po::value(&numbers["rate"]), "sample N times a second per CPU, as perf record -F: sets the count of "
                   "the default event and of events given without one (-e CPU_CLOCK, -e CPU_CLK_UNHALTED at the "
                   "nominal clock); default on linux 4000, elsewhere the event's count")
        ("jit", po::value(&setup.jit), "name JIT-compiled code (Node, Java, Python -X perf) from the perf maps and "
                "jitdumps of sampled processes, which hvprofd copies into the session as they grow and when the "
                "process ends: auto (the default: on for linux and xen, off for the sim's made-up processes), on, off")
        ("sched", "also record scheduling: each vCPU's runstate changes (running, runnable, blocked, offline), "
                  "wake-ups and migrations, per pCPU, beside the samples (hvprof-report --sched, --timeline). "
                  "sim: from its scheduler; linux: from the sched_switch, sched_waking, sched_wakeup_new and "
                  "sched_migrate_task tracepoints (root, tracefs), a KVM guest's vCPU threads as its vCPUs and "
                  "other threads as tasks; xen: from Xen's trace buffers, as xentrace reads them (hvprof sets "
                  "Xen's global trace mask; no xentrace may run meanwhile)")
        ("verbose,V", "log more in hvprofd.log");
    po::options_description general("General options");
    general.add_options()
        ("domain", po::value(&setup.domain), "the domain this command runs in: 0 (the default) is dom0; on the sim, "
                   "a guest's commands give its id (e.g. --domain=1)")
        ("session-dir", po::value(&setup.session_root)->default_value(hvprof::store::kDefaultSessionRoot),
         "where sessions, the lock and the log live (a guest on the sim defaults to its own: "
         "/var/lib/hvprof/domain-ID)")
        ("run-dir", po::value(&setup.hv_run_dir), "where hvprof-hv's domain sockets are (default: its default); "
                    "on xen, where dom0's agent keeps its lock (default /run/hvprof)")
        ("session-group", po::value(&setup.session_group),
         "with --start-daemon: let GROUP read the sessions (directories 2750, files 0640); without it they are "
         "their owner's alone (0700, 0600), since they say which processes ran, what they mapped and their stacks")
        ("cpu-type", po::value(&cpu_type), "with --list-events: list this CPU type's events offline");
    hvprof::control::RunOptions run_options;
    std::string duration;
    po::options_description run_described("Options of `hvprof run`");
    run_described.add_options()
        ("duration", po::value(&duration), "how long to run a simulated machine, or to profile a real one "
                                           "when no command is given (default 1s)")
        ("domain-map", po::value(&run_options.domain_map), "linux: domains for process trees, cgroups and VMs "
                                                           "(hvprof-hv --help), for the hvprof-hv that `hvprof run` "
                                                           "or --start-daemon starts")
        ("repeat", po::value(&run_options.repeat)->default_value(1), "profile the workload N times and report the spread of each symbol's share")
        ("json", po::value(&run_options.json_path), "write a JSON summary here (samples, losses, top symbols, wall time, exit status)")
        ("baseline", po::value(&run_options.baseline),
         "run: afterwards, diff the runs against this session (a saved name, a directory or archive:FILE), symbol by "
         "symbol with the tests of hvprof-report --diff, and print the significant changes (also in --json)")
        ("fail-on-regression", po::value(&run_options.fail_points)->implicit_value(0.0),
         "run, with --baseline: exit 5 when a symbol's share grew significantly by at least POINTS percentage points "
         "(default: any significant growth); the rows that did are printed")
        ("top", po::value(&run_options.top)->default_value(20), "symbols in the summaries")
        ("push", po::value(&run_options.push_url),
         "at the end, send each run's stacks to the Grafana Pyroscope server at this base URL (e.g. "
         "http://127.0.0.1:4040), one pprof series per domain; credentials in the URL or in HVPROF_PUSH_USER and "
         "HVPROF_PUSH_PASSWORD. A failed push is a warning (the summary's \"push\" says why); the sessions stay")
        ("push-app", po::value(&run_options.push_app)->default_value("hvprof"), "--push: Pyroscope's application name")
        ("push-tenant", po::value(&run_options.push_tenant), "--push: the tenant (X-Scope-OrgID)");
    po::options_description all;
    all.add(actions).add(options).add(general).add(run_described);
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, all), values);
    po::notify(values);
    // Which platform, for the actions that set one up; the others do not need it.
    if ((run || values.count("start-daemon") != 0) && values.count("help") == 0 && values.count("platform") == 0) {
      const auto chosen = hvprof::control::ChoosePlatform(setup.hv_run_dir, static_cast<uint16_t>(setup.domain),
                                                          hvprof::xen::DetectXen().is_xen);
      setup.platform = chosen.platform;
      std::cerr << (run ? "hvprof run" : "hvprof") << ": --platform=" << chosen.platform << ": "
                << hvprof::EscapeForTerminal(chosen.why) << "\n";
    }
    if (values.count("scenario") != 0 && setup.platform != "sim") {
      std::cerr << "hvprof: --scenario is for --platform=sim\n";
      return 2;
    }
    for (auto [option, field] : {std::pair{"buffer-size", &setup.buffer_size}, std::pair{"callgraph", &setup.callgraph},
                                 std::pair{"poll-interval", &setup.poll_interval_ms}, std::pair{"rate", &setup.rate}}) {
      auto checked = hvprof::setup::CheckNumber(option, numbers[option], setup.platform);
      if (!checked) {
        std::cerr << "hvprof: " << checked.error().message() << "\n";
        return 2;
      }
      *field = checked.value();
    }
    // On the sim every domain's commands run on one host: keep each guest's sessions apart.
    if (setup.domain != 0 && values["session-dir"].defaulted()) {
      setup.session_root = std::string(hvprof::store::kDefaultSessionRoot) + "/domain-" + std::to_string(setup.domain);
    }
    if (values.count("version") != 0) {
      std::cout << "hvprof (hvprof) " << hvprof::kVersion << "\n";
      return 0;
    }
    if (values.count("help") != 0 || (argc == 1 && !run)) {
      std::cout << all << "\n";
      return argc == 1 ? 2 : 0;
    }
    if (setup.platform == "xen" && values.count("domain") == 0) {
      // Commands find their agent by domain; in a Xen guest that must be said.
      const hvprof::xen::XenHost host = hvprof::xen::DetectXen();
      if (host.is_xen && !host.control_domain) {
        std::cerr << "hvprof: this is a Xen guest: give its domain id with --domain=ID on every command "
                     "(`xenstore-read domid` here, or `xl domid NAME` in dom0, prints it)\n";
        return 2;
      }
    }
    if (run) {
      if (setup.domain != 0) {
        std::cerr << "hvprof run: runs in dom0 (it drives the whole host); in a guest use --start-daemon, --start, "
                     "--stop and --publish\n";
        return 2;
      }
      for (const char* action : {"start-daemon", "start", "stop", "dump", "shutdown", "reset", "save",
                                 "status", "list-events", "run-sim", "publish"}) {
        if (values.count(action) != 0) {
          std::cerr << "hvprof run: --" << action << " is an action of its own; `hvprof run` does them all\n";
          return 2;
        }
      }
      setup.no_vmlinux = values.count("no-vmlinux") != 0;
      setup.verbose = values.count("verbose") != 0;
      setup.sched = values.count("sched") != 0;
      for (auto [text, option, target] : {std::tuple{&active, "active-domains", &setup.active_domains},
                                          std::tuple{&passive, "passive-domains", &setup.passive_domains},
                                          std::tuple{&passive_images, "passive-images", &setup.passive_images}}) {
        if (text->empty()) continue;
        auto items = hvprof::setup::SplitList(*text, option);
        if (!items) {
          std::cerr << "hvprof run: " << items.error().message() << "\n";
          return 2;
        }
        *target = items.value();
      }
      if (!duration.empty()) {
        auto parsed = hvprof::ParseDurationNs(duration);
        if (!parsed) {
          std::cerr << "hvprof run: --duration: " << parsed.error().message() << "\n";
          return 2;
        }
        run_options.duration_ns = parsed.value();
      }
      if (run_options.repeat == 0) {
        std::cerr << "hvprof run: --repeat must be at least 1\n";
        return 2;
      }
      if (values.count("fail-on-regression") != 0 && run_options.baseline.empty()) {
        std::cerr << "hvprof run: --fail-on-regression compares against --baseline=SESSION: name one\n";
        return 2;
      }
      run_options.setup = setup;
      run_options.scenario = scenario;
      run_options.command = command;
      run_options.hvprofd_path = hvprof::ExecutableDirectory() + "/hvprofd";
      run_options.hv_path = hvprof::ExecutableDirectory() + "/hvprof-hv";
      auto outcome = hvprof::control::RunProfile(run_options);
      if (!outcome) {
        std::cerr << "hvprof run: " << outcome.error().message() << "\n";
        return 1;
      }
      std::cout << outcome.value().message << "\n" << std::flush;
      for (const std::string& warning : outcome.value().warnings) {
        std::cerr << "hvprof run: warning: " << hvprof::EscapeForTerminal(warning) << "\n";
      }
      return outcome.value().exit_code;
    }
    for (const char* run_only : {"baseline", "fail-on-regression"}) {
      if (values.count(run_only) != 0) {
        std::cerr << "hvprof: --" << run_only << " goes with `hvprof run`\n";
        return 2;
      }
    }
    std::vector<std::string> chosen;
    for (const char* action : {"start-daemon", "start", "stop", "dump", "shutdown", "reset", "save",
                               "status", "list-events", "run-sim", "publish"}) {
      if (values.count(action) != 0) chosen.push_back(std::string("--") + action);
    }
    if (chosen.size() != 1) {
      std::cerr << "hvprof: " << (chosen.empty() ? "no action given" : "one action per call; you gave " +
                                                                          chosen[0] + " and " + chosen[1])
                << "\nTry 'hvprof --help'.\n";
      return 2;
    }
    const std::string action = chosen[0];
    for (const char* setup_only : {"xen", "vmlinux", "no-vmlinux", "active-domains", "passive-domains",
                                   "passive-images", "event", "buffer-size", "callgraph", "poll-interval",
                                   "rate", "jit", "sched", "verbose", "scenario"}) {
      if (values.count(setup_only) != 0 && action != "--start-daemon") {
        std::cerr << "hvprof: --" << setup_only << " is a setup option; it only goes with --start-daemon\n";
        return 2;
      }
    }
    setup.no_vmlinux = values.count("no-vmlinux") != 0;
    setup.verbose = values.count("verbose") != 0;
    setup.sched = values.count("sched") != 0;
    auto split = [](const std::string& text, const char* option, std::vector<std::string>* out) {
      if (text.empty()) return hvprof::Ok();
      auto items = hvprof::setup::SplitList(text, option);
      if (!items) return hvprof::Result<void>(items.error());
      *out = items.value();
      return hvprof::Ok();
    };
    hvprof::Result<Outcome> outcome = Outcome{};
    if (auto ok = split(active, "active-domains", &setup.active_domains); !ok) outcome = ok.error();
    else if (auto ok2 = split(passive, "passive-domains", &setup.passive_domains); !ok2) outcome = ok2.error();
    else if (auto ok3 = split(passive_images, "passive-images", &setup.passive_images); !ok3) outcome = ok3.error();
    else {
      const hvprof::store::SessionPaths paths{setup.session_root};
      if (action == "--start-daemon") {
        hvprof::control::HypervisorSpec own;
        own.hv_path = hvprof::ExecutableDirectory() + "/hvprof-hv";
        own.platform = setup.platform;
        own.scenario = scenario;
        own.domain_map = run_options.domain_map;
        own.log_path = paths.root + "/hvprof-hv.log";
        outcome = hvprof::control::StartDaemon(setup, hvprof::ExecutableDirectory() + "/hvprofd", &own);
      }
      else if (action == "--start") outcome = hvprof::control::Start(paths);
      else if (action == "--stop") outcome = hvprof::control::Stop(paths);
      else if (action == "--dump") outcome = hvprof::control::Dump(paths);
      else if (action == "--shutdown") outcome = hvprof::control::Shutdown(paths);
      else if (action == "--reset") outcome = hvprof::control::Reset(paths);
      else if (action == "--save") outcome = hvprof::control::Save(paths, save_name);
      else if (action == "--status") outcome = hvprof::control::Status(paths);
      else if (action == "--publish") outcome = hvprof::control::Publish(paths);
      else if (action == "--list-events") outcome = hvprof::control::ListEvents(cpu_type, setup.hv_run_dir);
      else if (action == "--run-sim") {
        auto sim_time = hvprof::ParseDurationNs(run_sim);
        outcome = sim_time ? hvprof::control::RunSim(paths, sim_time.value())
                           : hvprof::Result<Outcome>(sim_time.error());
      }
    }
    if (!outcome) {
      std::cerr << "hvprof: " << outcome.error().message() << "\n";
      return 1;
    }
    if (!outcome.value().message.empty()) std::cout << outcome.value().message << "\n";
    return outcome.value().exit_code;
  } catch (const po::error& error) {
    std::cerr << "hvprof: " << error.what() << "\nTry 'hvprof --help'.\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "hvprof: internal error: " << error.what() << "\n";
    return 1;
  }
}
