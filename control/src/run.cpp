#include "hvprof/control/run.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/control/hypervisor.h"
#include "hvprof/hv/protocol.h"
#include "hvprof/push/profile.h"
#include "hvprof/report/compare.h"
#include "hvprof/report/writers/csv.h"
#include "hvprof/report/writers/diff.h"
#include "hvprof/report/writers/json.h"
#include "hvprof/report/writers/text.h"
#include "hvprof/report/load.h"
#include "hvprof/report/views/table.h"

namespace hvprof::control {

namespace {

volatile sig_atomic_t g_interrupted = 0;  // the signal that interrupted the run, or 0
pid_t g_child = 0;

void OnInterrupt(int signal) {
  g_interrupted = signal;
  if (g_child > 0) ::kill(g_child, signal);  // the workload decides what Ctrl-C means to it
}

// posix_spawnattr_t, destroyed with its scope.
struct SpawnAttributes {
  posix_spawnattr_t attr;
  SpawnAttributes() { ::posix_spawnattr_init(&attr); }
  ~SpawnAttributes() { ::posix_spawnattr_destroy(&attr); }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
};

// Starts `command`, waits for it, and returns its exit status (128+N if killed by signal N; 127,
// with a message, if it cannot be run). Spawned, not forked: a fork copies hvprof's page tables,
// a few milliseconds of kernel time in hvprof's own share of the profile it is taking.
Result<int> RunCommand(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  // Ctrl-C and SIGTERM wait while the child is made: one that comes before it runs, or before
  // hvprof knows its pid, reaches the workload all the same (the child's own copy once it
  // unblocks them with their defaults, hvprof's forwarded once g_child is set).
  sigset_t interrupts, old_mask;
  sigemptyset(&interrupts);
  sigaddset(&interrupts, SIGINT);
  sigaddset(&interrupts, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &interrupts, &old_mask);
  SpawnAttributes spawn;
  ::posix_spawnattr_setsigdefault(&spawn.attr, &interrupts);
  ::posix_spawnattr_setsigmask(&spawn.attr, &old_mask);
  ::posix_spawnattr_setflags(&spawn.attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t child = 0;
  const int error = ::posix_spawnp(&child, argv[0], nullptr, &spawn.attr, argv.data(), environ);
  if (error != 0) {
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    std::fprintf(stderr, "hvprof run: cannot run %s: %s\n", argv[0], std::strerror(error));
    return 127;  // as a shell says it
  }
  g_child = child;
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoError(errno, "waitpid");
  }
  g_child = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

std::string Timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", &local);
  return text;
}

struct RunResult {
  std::string session;
  double wall_seconds = 0;
  int exit_status = 0;
  Json summary;  // samples and losses per domain and mode, top symbols
  std::map<std::string, double> shares;  // "image symbol" -> share of the first event
  std::string push_error;                // --push failed: why
};

// The run's summary and report; with `push`, its stacks are sent from the same reading.
Result<RunResult> Summarize(const std::string& session, uint32_t top, std::string* report_text,
                            const push::ProfilePush* push) {
  report::LoadOptions load;
  load.stacks = load.stack_threads = load.inlines = push != nullptr;
  HVPROF_TRY(profile, report::LoadProfile(session, load));
  report::ReportOptions options;
  options.view = report::View::kSymbol;
  HVPROF_TRY(table, report::BuildTable(profile, options));
  RunResult result;
  result.session = session;
  Json domains = Json::array();
  for (const report::DomainSummary& d : table.domains) {
    domains.push_back({{"id", d.domain}, {"name", d.name}, {"role", d.role},
                       {"user", d.samples[sample_mode::kUser]}, {"kernel", d.samples[sample_mode::kKernel]},
                       {"hypervisor", d.samples[sample_mode::kHypervisor]}});
  }
  Json losses = Json::object();
  for (const store::LossField& field : store::kLossFields) losses[field.name] = profile.metadata().losses.*field.member;
  Json symbols = Json::array();
  const uint64_t total = table.columns[0].total;
  for (const report::Row& row : table.rows) {
    const double share = total ? static_cast<double>(row.samples[0]) / static_cast<double>(total) : 0.0;
    const std::string image = profile.images()[row.image].name;
    const std::string symbol = profile.symbols()[row.symbol].name;
    result.shares[image + " " + symbol] = share;
    if (symbols.size() < top) {
      symbols.push_back({{"image", image}, {"symbol", symbol}, {"samples", row.samples[0]}, {"share", share}});
    }
  }
  result.summary = {{"session", session},
                    {"event", table.columns[0].event},
                    {"samples", profile.total_samples()},
                    {"domains", domains},
                    {"losses", losses},
                    {"top_symbols", symbols}};
  if (report_text != nullptr) {
    options.threshold = 0.5;  // the printed report shows what matters; the summary keeps all
    report::Table shown = table;
    shown.hidden_rows += report::DropRowsBelow(total, options.threshold, shown.rows);
    *report_text = report::FormatText(profile, shown, options);
  }
  if (push != nullptr) {
    report::StackFilter filter;
    HVPROF_TRY(events, report::SelectStackEvents(profile, {}, false, false));
    filter.events = std::move(events);
    auto pushed = push::PushProfile(profile, filter, *push);
    if (pushed) {
      result.summary["push"] = {{"series", pushed.value().series}, {"bytes", pushed.value().bytes}};
    } else {
      result.summary["push"] = {{"error", pushed.error().message()}};
      result.push_error = pushed.error().message();
    }
  }
  return result;
}

// sim and linux run under hvprof-hv: the one serving the run directory, or one started for the
// run (a simulated machine then runs only while the run asks, as fast as it can), whose run
// directory `effective` then names. One is started too when the serving one's dom0 profiler is
// driven by another hvprofd (a service's): the run then profiles beside it, and says so.
Result<std::unique_ptr<ScopedHypervisor>> HypervisorForRun(const RunOptions& options, const store::SessionPaths& paths,
                                                           RunOptions& effective, const RunNotice& say) {
  std::unique_ptr<ScopedHypervisor> own_hypervisor;
  if (NeedsHostedHypervisor(options.setup.platform)) {
    const std::string& run_dir = options.setup.hv_run_dir;
    const bool serving = ServingPlatform(run_dir) == options.setup.platform;
    const std::string driver = serving ? ProfilerDriver(run_dir) : std::string();
    if (!driver.empty() && say) {
      say(fmt::format("the hvprof-hv serving {} profiles for another hvprofd (session directory {}); this run "
                      "starts an hvprof-hv of its own beside it{}",
                      RunDirOrDefault(run_dir), EscapeForTerminal(driver),
                      options.setup.platform == "sim" ? " (a simulated machine of its own, of --scenario)" : ""));
    }
    if (!serving || !driver.empty()) {
      HVPROF_TRYV(MakeDirectories(paths.root));
      HypervisorSpec spec{.hv_path = options.hv_path,
                          .platform = options.setup.platform,
                          .scenario = options.scenario,
                          .domain_map = options.domain_map,
                          .advance_on_demand = true,
                          .log_path = paths.root + "/hvprof-hv.log"};
      HVPROF_TRY(started, ScopedHypervisor::Start(spec));
      own_hypervisor = std::move(started);
      effective.setup.hv_run_dir = own_hypervisor->run_dir();
      // Nobody runs an agent inside a machine of the run's own: profile its guests from dom0.
      if (options.setup.platform == "sim" && options.setup.active_domains.empty() &&
          options.setup.passive_domains.empty()) {
        effective.setup.passive_domains = {std::string(setup::kAllDomains)};
      }
    } else if (!options.domain_map.empty() || !options.scenario.empty()) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "{} is given to hvprof-hv when it starts; the one already serving {} has its own",
                       options.domain_map.empty() ? "--scenario" : "--domain-map", RunDirOrDefault(run_dir));
    }
  }

  return own_hypervisor;
}

// Across repeats: mean and spread of each symbol's share, the largest mean first, as text and
// into `across` (JSON).
std::string SpreadAcrossRuns(const std::vector<RunResult>& runs, uint32_t top, Json& across) {
  std::string spread_text;
  struct Spread {
    std::string key;
    double mean = 0, deviation = 0, low = 1, high = 0;
  };
  std::map<std::string, Spread> by_key;
  for (const RunResult& run : runs) {
    for (const auto& [key, share] : run.shares) by_key[key].key = key;
  }
  std::vector<Spread> spreads;
  const double n = static_cast<double>(runs.size());
  for (auto& [key, spread] : by_key) {
    double sum = 0, sum_sq = 0;
    for (const RunResult& run : runs) {
      const auto it = run.shares.find(key);
      const double share = it == run.shares.end() ? 0.0 : it->second;  // absent from a run: 0 there
      sum += share;
      sum_sq += share * share;
      spread.low = std::min(spread.low, share);
      spread.high = std::max(spread.high, share);
    }
    spread.mean = sum / n;
    spread.deviation = std::sqrt(std::max(0.0, sum_sq / n - spread.mean * spread.mean) * n / (n - 1));
    spreads.push_back(std::move(spread));
  }
  std::stable_sort(spreads.begin(), spreads.end(), [](const Spread& a, const Spread& b) { return a.mean > b.mean; });
  if (spreads.size() > top) spreads.resize(top);
  spread_text = fmt::format("\nAcross {} runs, share of {}, by mean:\n  {:>8} {:>8} {:>8} {:>8}  symbol\n", runs.size(),
                            EscapeForTerminal(runs.back().summary.value("event", "samples")), "mean", "stddev", "min",
                            "max");
  for (const Spread& spread : spreads) {
    across.push_back({{"symbol", spread.key}, {"mean", spread.mean}, {"stddev", spread.deviation},
                      {"min", spread.low}, {"max", spread.high}});
    spread_text += fmt::format("  {:7.3f}% {:8.3f} {:7.3f}% {:7.3f}%  {}\n", 100 * spread.mean, 100 * spread.deviation,
                               100 * spread.low, 100 * spread.high, EscapeForTerminal(spread.key));
  }
  return spread_text;
}

// What became of --push: a warning per run whose push failed, else what the last one sent.
std::string PushOutcome(const std::vector<RunResult>& runs, std::vector<std::string>& warnings) {
  std::string push_text;
  for (const RunResult& run : runs) {
    if (!run.push_error.empty()) {
      warnings.push_back(fmt::format("--push: {} (the session {} is saved as it was)", run.push_error, run.session));
    } else if (run.summary.contains("push")) {
      push_text = fmt::format("\npushed {} series ({} bytes of pprof) to Pyroscope",
                              run.summary["push"]["series"].get<size_t>(), run.summary["push"]["bytes"].get<uint64_t>());
    }
  }
  return push_text;
}

// --baseline: the runs against it, symbol by symbol, as text and into `baseline_json`; a
// regression over --fail-on-regression, or a side with no samples, sets the exit code when the
// command's own is 0.
std::string CompareWithBaseline(const RunOptions& options, const store::SessionPaths& paths,
                                const std::vector<RunResult>& runs, std::vector<std::string>& warnings, int& exit_code,
                                Json& baseline_json) {
  std::string baseline_text;
  report::DiffRequest request;
  request.base = {options.baseline};
  for (const RunResult& run : runs) request.next.push_back(run.session);
  request.session_root = paths.root;
  request.table.view = report::View::kSymbol;
  auto compared = report::DiffSessions(request);
  if (!compared) {
    warnings.push_back(fmt::format("--baseline: {}; the runs are saved, compare them later with hvprof-report --diff",
                                   compared.error().message()));
    // A baseline (or a run) without samples compares nothing: never "no change".
    if (compared.error().kind() == ErrorKind::kEmpty && exit_code == 0) {
      exit_code = kEmptyBaselineExit;
    } else if (options.fail_points >= 0 && exit_code == 0) {
      exit_code = 1;
    }
  } else {
    report::Diff shown = compared.value().diff;
    std::erase_if(shown.rows, [](const report::DiffRow& row) { return !row.c.significant; });
    baseline_text = fmt::format("\nAgainst the baseline {}: {}", EscapeForTerminal(options.baseline),
                                shown.rows.empty() ? std::string("no significant change\n")
                                                   : "\n" + report::FormatDiffText(shown, false));
    baseline_json = Json::parse(report::FormatDiffJson(compared.value().diff, options.fail_points));
    if (options.fail_points >= 0) {
      const auto regressions = report::Regressions(compared.value().diff, options.fail_points);
      for (const report::DiffRow* row : regressions) {
        warnings.push_back(fmt::format("regression against the baseline: {:+.2f} points ({:.2f}% -> {:.2f}%, p adj "
                                       "{:.2g})  {}",
                                       100 * row->c.delta, 100 * row->c.base_share, 100 * row->c.new_share,
                                       row->c.p_adjusted, report::DiffRowName(*row)));
      }
      if (!regressions.empty() && exit_code == 0) exit_code = kRegressionExit;
    }
  }
  return baseline_text;
}

// --json: every run's summary, the spread across them and the baseline's diff.
Result<void> WriteRunJson(const RunOptions& options, const std::vector<RunResult>& runs, const Json& across,
                          const Json& baseline_json) {
  Json out{{"schema", "hvprof-run"}, {"version", 1}, {"command", options.command}};
  Json list = Json::array();
  for (const RunResult& run : runs) {
    Json entry = run.summary;
    entry["wall_seconds"] = run.wall_seconds;
    entry["exit_status"] = run.exit_status;
    list.push_back(entry);
  }
  out["runs"] = list;
  if (!across.empty()) out["across_runs"] = across;
  if (!baseline_json.is_null()) out["baseline"] = baseline_json;
  // Symbol names come from profiled code: bytes that are not UTF-8 become U+FFFD.
  HVPROF_TRYV(WriteOutput(options.json_path, out.dump(1, ' ', false, Json::error_handler_t::replace) + "\n"));
  return Ok();
}

}  // namespace

Result<Outcome> RunProfile(const RunOptions& options, const RunNotice& say) {
  const store::SessionPaths paths{options.setup.session_root};
  if (FindAgent(paths).running) {
    // Joining a running hvprofd's session would cut it where the run starts and ends: the run
    // takes a session directory of its own instead, and profiles beside that hvprofd.
    return MakeError(ErrorKind::kBadState,
                     "hvprofd is already running for {} (a service, or --start-daemon); `hvprof run` needs a session "
                     "directory to itself: give it another (e.g. --session-dir=/tmp/hvprof: on linux and the sim the "
                     "run then profiles beside that hvprofd, which keeps running), or end it first with `hvprof "
                     "--shutdown --session-dir={}`",
                     paths.root, paths.root);
  }
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {}, old_term {};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);

  RunOptions effective = options;
  // The hvprof-hv started for the run, if any, lives until the run ends.
  const auto own_hypervisor = HypervisorForRun(options, paths, effective, say);
  if (!own_hypervisor) return own_hypervisor.error();

  // --push: every run's stacks, each run a profile of its own time.
  std::optional<push::ProfilePush> push;
  if (!options.push_url.empty()) {
    ::signal(SIGPIPE, SIG_IGN);  // an https server closing early must not end the run
    push = push::PushFromCommandLine(options.push_url, options.push_tenant, options.push_app);
  }
  std::vector<RunResult> runs;
  std::string report_text;
  Result<void> failure = Ok();
  const std::string stamp = Timestamp();
  for (uint32_t k = 0; k < options.repeat && failure && !g_interrupted; ++k) {
    const auto started = std::chrono::steady_clock::now();
    auto daemon = StartDaemon(effective.setup, options.hvprofd_path);
    if (!daemon) {
      failure = daemon.error();
      break;
    }
    int exit_status = 0;
    // From here on hvprofd runs: whatever happens, it is shut down below.
    auto body = [&]() -> Result<void> {
      HVPROF_TRYV(Start(paths));
      if (options.setup.platform == "sim") {
        HVPROF_TRYV(RunSim(paths, options.duration_ns));
      }
      if (!options.command.empty() && g_interrupted) {
        exit_status = 128 + g_interrupted;  // interrupted before it started: it never runs
      } else if (!options.command.empty()) {
        HVPROF_TRY(status, RunCommand(options.command));
        exit_status = status;
      } else if (options.setup.platform != "sim") {
        // A real machine without a workload: profile whatever runs, for --duration.
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options.duration_ns);
        while (!g_interrupted && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      HVPROF_TRYV(Stop(paths));
      return Ok();
    };
    failure = body();
    std::string name = options.repeat == 1 ? fmt::format("{}-{}", options.save_prefix, stamp)
                                           : fmt::format("{}-{}-{}", options.save_prefix, stamp, k + 1);
    for (int suffix = 2; std::filesystem::exists(paths.Saved(name)); ++suffix) {
      name = fmt::format("{}-{}-{}", options.save_prefix, stamp, options.repeat == 1 ? suffix : (k + 1) * 100 + suffix);
    }
    auto saved = Save(paths, name, /*allow_empty=*/true);
    auto shutdown = Shutdown(paths, false);  // the hvprof-hv, if ours, ends with the run
    if (failure && !saved) failure = saved.error();
    if (failure && !shutdown) failure = shutdown.error();
    if (!failure) break;
    HVPROF_TRY(result, Summarize(paths.Saved(name), options.top, k + 1 == options.repeat ? &report_text : nullptr,
                                 push ? &*push : nullptr));
    result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    result.exit_status = exit_status;
    runs.push_back(std::move(result));
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (!failure) return failure.error();
  if (runs.empty()) return MakeError(ErrorKind::kBadState, "interrupted before the first run finished");

  Json across = Json::array();
  const std::string spread_text = runs.size() > 1 ? SpreadAcrossRuns(runs, options.top, across) : std::string();
  std::vector<std::string> warnings;
  const std::string push_text = PushOutcome(runs, warnings);
  int exit_code = runs.back().exit_status;
  Json baseline_json;
  const std::string baseline_text =
      options.baseline.empty() ? std::string()
                               : CompareWithBaseline(options, paths, runs, warnings, exit_code, baseline_json);
  if (!options.json_path.empty()) HVPROF_TRYV(WriteRunJson(options, runs, across, baseline_json));
  return Outcome{report_text + spread_text + baseline_text +
                     fmt::format("session saved in {}", runs.back().session) + push_text,
                 exit_code, warnings};
}

}  // namespace hvprof::control
