// hvprof-hv: the hosted hypervisor. Runs the profiling engine on a simulated machine or on this
// Linux host and serves each domain's profiling operations over that domain's socket. Thin
// main over hvpmu_hv.

#include <unistd.h>

#include <iostream>

#include <boost/program_options.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/process.h"
#include "hvprof/base/units.h"
#include "hvprof/base/version.h"
#include "hvprof/hv/daemon.h"
#include "hvprof/sim/scenario.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(Usage: hvprof-hv --platform=sim [--scenario=FILE|NAME] [options]
       hvprof-hv --platform=linux [--domain-map=MAP] [options]

Runs hvprof's hypervisor-side profiling engine and serves the profiling operations to each
domain over that domain's own Unix socket (RUN_DIR/domain-N.sock). Start it first; then run
`hvprof --start-daemon` as dom0. It runs in the foreground until SIGTERM or Ctrl-C.

  sim    a simulated machine running real images (docs/sim-scenarios.md), with exact
         ground truth; `hvprof run --platform=sim` starts one for you
  linux  this host, sampled through perf_event_open (root, or kernel.perf_event_paranoid
         <= 0). The host kernel is the "hypervisor"; host processes are dom0 unless
         --domain-map gives a process tree or a cgroup a domain of its own; KVM guests are
         domains of their own. `hvprof run --platform=linux -- CMD` starts one for you.

Examples:
  hvprof-hv --platform=sim &                       # the scenario named default
  hvprof-hv --platform=sim --scenario=my-host.json &
  hvprof --start-daemon --active-domains=1,2 --passive-domains=3

  hvprof-hv --platform=linux --domain-map=pid:4242=1,cgroup:/machine.slice/vm.scope=2 &
  hvprof --start-daemon --passive-domains=1,2

Options)";

}  // namespace

int main(int argc, char** argv) {
  hvprof::SetLogPrefix("hvprof-hv", true);
  // A region and an eventfd per ring: thousands on a host with many domains.
  hvprof::RaiseDescriptorLimit();
  try {
    hvprof::hv::DaemonOptions options;
    std::string speed;
    std::string duration;
    std::string log_level = "info";
    uint64_t seed = 0;
    po::options_description described(kUsage);
    described.add_options()
        ("help,h", "show this help")
        ("version", "print hvprof's version")
        ("platform", po::value(&options.platform)->default_value("sim"),
         "the machine to run on: sim (a simulated machine described by --scenario) or linux (this host)")
        ("domain-map", po::value(&options.domain_map),
         "linux: domains for host processes and VMs: pid:PID=ID (that process and its descendants), "
         "cgroup:/PATH=ID, kvm:VMM_PID=ID, comma-separated")
        ("software-events", "linux: sample with the cpu-clock timer even where a hardware PMU exists")
        ("sample-source", po::value(&options.sample_source)->default_value("auto"),
         "sim: what samples, as Xen's hvprof= boot option chooses: auto (the scenario's PMU if it has one, "
         "else the engine's timer: event TIMER, a period in ns), pmu, or timer")
        ("scenario", po::value(&options.scenario_path),
         "the simulated machine: a JSON scenario file (docs/sim-scenarios.md), or the NAME of one of hvprof's own "
         "(NAME.json in $HVPROF_SCENARIO_PATH, then in share/hvprof/scenarios beside this program's bin/); "
         "default: default")
        ("run-dir", po::value(&options.run_dir),
         "where the domain sockets go (default: /run/hvprof for root, else "
         "$XDG_RUNTIME_DIR/hvprof or /tmp/hvprof-UID)")
        ("speed", po::value(&speed),
         "realtime (the default: simulated time follows the wall clock), a factor such as 10 "
         "(ten times faster), or max (as fast as possible, advancing only while dom0 asks)")
        ("duration", po::value(&duration),
         "halt the machine after this much simulated time (e.g. 10s); default: never")
        ("seed", po::value(&seed), "the run's random seed (scheduling, bursts, when counters overflow); the workload, "
                                    "with the functions the scenario picks at random, stays the scenario's: two seeds "
                                    "are two runs of one workload (a null pair for hvprof-report --diff)")
        ("ground-truth", po::value(&options.ground_truth_path),
         "write the exact event counts of the run to this JSON file on exit")
        ("log-level", po::value(&log_level)->default_value("info"), "debug, info, warning or error");
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, described), values);
    po::notify(values);
    if (values.count("help") != 0) {
      std::cout << described << "\n";
      return 0;
    }
    if (values.count("version") != 0) {
      std::cout << "hvprof-hv (hvprof) " << hvprof::kVersion << "\n";
      return 0;
    }
    if (log_level == "debug") hvprof::SetLogLevel(hvprof::LogLevel::kDebug);
    else if (log_level == "warning") hvprof::SetLogLevel(hvprof::LogLevel::kWarning);
    else if (log_level == "error") hvprof::SetLogLevel(hvprof::LogLevel::kError);
    else if (log_level != "info") throw po::error("--log-level must be debug, info, warning or error");
    if (values.count("seed") != 0) options.seed = seed;
    options.force_software = values.count("software-events") != 0;
    if (options.platform == "linux") {
      for (const char* sim_only : {"scenario", "speed", "duration", "seed", "ground-truth"}) {
        if (values.count(sim_only) != 0) throw po::error(std::string("--") + sim_only + " is for --platform=sim");
      }
      if (!values["sample-source"].defaulted()) {
        throw po::error("--sample-source is for --platform=sim (on linux, --software-events samples with a timer)");
      }
    } else if (values.count("domain-map") != 0 || options.force_software) {
      throw po::error("--domain-map and --software-events are for --platform=linux");
    }
    if (options.sample_source != "auto" && options.sample_source != "pmu" && options.sample_source != "timer") {
      throw po::error("--sample-source must be auto, pmu or timer");
    }
    if (options.platform == "sim") {
      auto found = hvprof::sim::FindScenario(
          options.scenario_path.empty() ? hvprof::sim::kDefaultScenario : options.scenario_path,
          hvprof::sim::ScenarioDirectories(hvprof::ExecutableDirectory()));
      if (!found) {
        hvprof::Log(hvprof::LogLevel::kError, "{}", found.error().message());
        return 1;
      }
      options.scenario_path = found.value();
      hvprof::Log(hvprof::LogLevel::kInfo, "scenario {}", options.scenario_path);
    }
    if (!speed.empty()) {
      if (speed == "max") {
        options.speed = hvprof::sim::Speed::kMax;
      } else if (speed == "realtime") {
        options.speed = hvprof::sim::Speed::kRealtime;
      } else {
        char* end = nullptr;
        const double factor = std::strtod(speed.c_str(), &end);
        if (end != speed.c_str() + speed.size() || !(factor > 0.0) || factor > 1000.0) {
          throw po::error("--speed must be realtime, max or a factor between 0.001 and 1000");
        }
        options.speed = hvprof::sim::Speed::kRealtime;
        options.factor = factor;
      }
    }
    if (!duration.empty()) {
      auto parsed = hvprof::ParseDurationNs(duration);
      if (!parsed) throw po::error("--duration: " + parsed.error().message());
      options.duration_ns = parsed.value();
    }

    auto daemon = hvprof::hv::Daemon::Create(options);
    if (!daemon) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", daemon.error().message());
      return 1;
    }
    hvprof::hv::Daemon::HandleSignals(daemon.value().get());
    if (auto ran = daemon.value()->Run(); !ran) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", ran.error().message());
      return 1;
    }
    return 0;
  } catch (const po::error& error) {
    std::cerr << "hvprof-hv: " << error.what() << "\nTry 'hvprof-hv --help'.\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "hvprof-hv: internal error: " << error.what() << "\n";
    return 1;
  }
}
