#include "hvprof/hv/command_line.h"

#include <cstdlib>
#include <sstream>
#include <string_view>

#include <boost/program_options.hpp>

#include "hvprof/base/units.h"

namespace hvprof::hv {

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(Usage: hvprof-hv --platform=sim [--scenario=FILE|NAME] [options]
  or:  hvprof-hv --platform=linux [--domain-map=MAP] [options]

Runs hvprof's hypervisor-side profiling engine and serves the profiling operations to each
domain over that domain's own Unix socket (RUN_DIR/domain-N.sock). Start it first; then run
`hvprof --start-daemon` as dom0. It runs in the foreground until SIGTERM or Ctrl-C.

Platforms:
  sim    a simulated machine running real images (docs/sim-scenarios.md), with exact
         ground truth; `hvprof run --platform=sim` starts one for you
  linux  this host, sampled through perf_event_open (root, or kernel.perf_event_paranoid
         <= 0). Host processes are dom0 (their kernel is the host kernel) unless
         --domain-map gives a process tree or a cgroup a domain of its own; KVM guests are
         domains of their own, and the host kernel in their vCPU threads their hypervisor.
         `hvprof run --platform=linux -- CMD` starts one for you.

Examples:
  hvprof-hv --platform=sim &
      the scenario named default
  hvprof-hv --platform=sim --scenario=my-host.json &
      a host of your own; then, as dom0: hvprof --start-daemon --passive-domains=all
  hvprof-hv --platform=linux --domain-map=pid:4242=1,cgroup:/machine.slice/vm.scope=2 &
      this host, a process tree and a VM's cgroup as domains 1 and 2; then, as dom0:
      hvprof --start-daemon --passive-domains=1,2

Options)";

// The options' words as given, before they are checked.
struct Words {
  DaemonOptions options;
  std::string speed;
  std::string duration;
  std::string log_level = "info";
  uint64_t seed = 0;
};

void Describe(Words& w, po::options_description& described) {
  described.add_options()
      ("help,h", "show this help")
      ("version", "print hvprof's version")
      ("platform", po::value(&w.options.platform)->default_value("sim"),
       "the machine to run on: sim (a simulated machine described by --scenario) or linux (this host)")
      ("domain-map", po::value(&w.options.domain_map),
       "linux: domains for host processes and VMs: pid:PID=ID (that process and its descendants), "
       "cgroup:/PATH=ID, kvm:VMM_PID=ID, comma-separated")
      ("software-events", "linux: sample with the cpu-clock timer even where a hardware PMU exists")
      ("sample-source", po::value(&w.options.sample_source)->default_value("auto"),
       "sim: what samples, as Xen's hvprof= boot option chooses: auto (the scenario's PMU if it has one, "
       "else the engine's timer: event TIMER, a period in ns), pmu, or timer")
      ("scenario", po::value(&w.options.scenario_path),
       "the simulated machine: a JSON scenario file (docs/sim-scenarios.md), or the NAME of one of hvprof's own "
       "(NAME.json in $HVPROF_SCENARIO_PATH, then in share/hvprof/scenarios beside this program's bin/); "
       "default: default")
      ("run-dir", po::value(&w.options.run_dir),
       "where the domain sockets go (default: /run/hvprof for root, else "
       "$XDG_RUNTIME_DIR/hvprof or /tmp/hvprof-UID)")
      ("speed", po::value(&w.speed),
       "realtime (the default: simulated time follows the wall clock), a factor such as 10 "
       "(ten times faster), or max (as fast as possible, advancing only while dom0 asks)")
      ("duration", po::value(&w.duration),
       "halt the machine after this much simulated time (e.g. 10s); default: never")
      ("seed", po::value(&w.seed), "the run's random seed (scheduling, bursts, when counters overflow); the workload, "
                                  "with the functions the scenario picks at random, stays the scenario's: two seeds "
                                  "are two runs of one workload (a null pair for hvprof-report --diff)")
      ("ground-truth", po::value(&w.options.ground_truth_path),
       "write the exact event counts of the run to this JSON file on exit")
      ("log-level", po::value(&w.log_level)->default_value("info"), "debug, info, warning or error");
}

// Bad usage, said as every refusal of hvprof-hv's is: what is wrong, then where help is.
Error Refuse(std::string_view message) {
  return Error(ErrorKind::kInvalidArgument, fmt::format("{}\nTry 'hvprof-hv --help'.", message));
}

// The options that belong to one platform, and --sample-source's word.
Result<void> CheckPlatformOptions(const po::variables_map& values, const DaemonOptions& options) {
  if (options.platform == "linux") {
    for (const char* sim_only : {"scenario", "speed", "duration", "seed", "ground-truth"}) {
      if (values.count(sim_only) != 0) return Refuse(fmt::format("--{} is for --platform=sim", sim_only));
    }
    if (!values["sample-source"].defaulted()) {
      return Refuse("--sample-source is for --platform=sim (on linux, --software-events samples with a timer)");
    }
  } else if (options.platform != "sim") {
    return Refuse(fmt::format("--platform must be sim or linux, not '{}'", options.platform));
  } else if (values.count("domain-map") != 0 || options.force_software) {
    return Refuse("--domain-map and --software-events are for --platform=linux");
  }
  if (options.sample_source != "auto" && options.sample_source != "pmu" && options.sample_source != "timer") {
    return Refuse("--sample-source must be auto, pmu or timer");
  }
  return Ok();
}

// --speed and --duration: how the simulated clock runs.
Result<void> ReadClock(const Words& w, DaemonOptions& options) {
  if (!w.speed.empty()) {
    if (w.speed == "max") {
      options.speed = sim::Speed::kMax;
    } else if (w.speed == "realtime") {
      options.speed = sim::Speed::kRealtime;
    } else {
      char* end = nullptr;
      const double factor = std::strtod(w.speed.c_str(), &end);
      if (end != w.speed.c_str() + w.speed.size() || !(factor > 0.0) || factor > 1000.0) {
        return Refuse("--speed must be realtime, max or a factor between 0.001 and 1000");
      }
      options.speed = sim::Speed::kRealtime;
      options.factor = factor;
    }
  }
  if (!w.duration.empty()) {
    auto parsed = ParseDurationNs(w.duration);
    if (!parsed) return Refuse("--duration: " + parsed.error().message());
    options.duration_ns = parsed.value();
  }
  return Ok();
}

}  // namespace

std::string HvUsage() {
  Words w;
  po::options_description described(kUsage);
  Describe(w, described);
  std::ostringstream out;
  out << described;
  return out.str();
}

Result<HvCommand> ParseHvCommand(const std::vector<std::string>& args) {
  Words w;
  po::options_description described(kUsage);
  Describe(w, described);
  po::variables_map values;
  try {
    po::store(po::command_line_parser(args).options(described).run(), values);
    po::notify(values);
  } catch (const po::error& error) {
    return Refuse(error.what());
  }
  HvCommand command;
  if (values.count("help") != 0) {
    command.kind = HvCommand::Kind::kHelp;
    return command;
  }
  if (values.count("version") != 0) {
    command.kind = HvCommand::Kind::kVersion;
    return command;
  }
  if (w.log_level == "debug") command.log_level = LogLevel::kDebug;
  else if (w.log_level == "warning") command.log_level = LogLevel::kWarning;
  else if (w.log_level == "error") command.log_level = LogLevel::kError;
  else if (w.log_level != "info") return Refuse("--log-level must be debug, info, warning or error");
  DaemonOptions& options = w.options;
  if (values.count("seed") != 0) options.seed = w.seed;
  options.force_software = values.count("software-events") != 0;
  HVPROF_TRYV(CheckPlatformOptions(values, options));
  HVPROF_TRYV(ReadClock(w, options));
  command.options = std::move(options);
  return command;
}

}  // namespace hvprof::hv
