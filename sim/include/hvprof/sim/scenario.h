// Scenario files for the simulated machine: what the machine is, which domains run on it, and
// what each vCPU executes. The format is documented in docs/sim-scenarios.md. Loading
// validates everything that can be checked without opening images; ResolveScenario (machine.h)
// then checks images and function names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvpmu/platform.h"
#include "hvprof/base/result.h"
#include "hvprof/facts/sample.h"

namespace hvprof::sim {

using hvpmu::DomainType;

// How big a scenario may be (docs/sim-scenarios.md, Limits). Loading refuses a file beyond
// them with a message naming the field and the range, rather than building a machine that
// exhausts memory or file descriptors (hvprof-hv opens a socket per domain).
inline constexpr size_t kMaxScenarioDomains = hvpmu::kMaxListedDomains;  // all can be profiled
inline constexpr size_t kMaxProcesses = 1024;          // per domain
inline constexpr size_t kMaxMappings = 256;            // per process
inline constexpr size_t kMaxFunctions = 10000;         // per mode of a domain: named plus `auto`
inline constexpr size_t kMaxCallers = 32;              // in a function's `stack`
inline constexpr size_t kMaxKernelFallbacks = 16;
// User mappings lie below this address. Above it are the simulated stacks (the frame-pointer
// chains of `stack`), then, above user space, the kernels' and the hypervisor's addresses.
inline constexpr uint64_t kMappingsEnd = 0x00007FFF00000000;

// kNone: a CPU whose CPUID offers no performance counters (a VM without a vPMU, QEMU's software
// CPU); the engine then samples with its timer (hypervisor-pmu/timer_source.h).
enum class PmuModelKind { kIntelArchV4, kAmdZen, kAmdZen4, kNone };
std::string_view PmuModelName(PmuModelKind kind);

// Event rates of a function, per thousand instructions except IPC.
struct Rates {
  double ipc = 1.0;
  double branches_per_kilo = 150.0;
  double branch_misses_per_kilo = 2.0;
  double cache_refs_per_kilo = 20.0;
  double cache_misses_per_kilo = 1.0;
};

struct FunctionSpec {
  std::string name;
  double weight = 1.0;
  std::optional<Rates> rates;       // falls back to the mode's rates
  std::vector<std::string> stack;   // callers, innermost first (frame-pointer backtraces)
  uint32_t process = 0;             // user mode: pid of the process it runs in
  std::string image;                // user mode: the mapped image (its path)
};

// Pick `count` functions of an image at random (deterministically from the seed), with
// Zipf-distributed weights and random rates, when naming them all would tie the scenario to
// one build of the image.
struct AutoPick {
  uint32_t count = 0;
  double zipf = 1.0;
  uint32_t process = 0;  // user mode
  std::string image;     // user mode
};

// Modes are hvprof::Mode (hvprof/facts/sample.h); a table per mode is indexed by its byte.

struct ModeWorkload {
  double share = 0.0;  // percent of the vCPU's busy time
  Rates rates;
  std::vector<FunctionSpec> functions;
  std::optional<AutoPick> auto_pick;
};

enum class SymbolSourceKind { kKallsyms, kSystemMap, kElf };

struct SymbolSource {
  SymbolSourceKind kind = SymbolSourceKind::kKallsyms;
  std::string path;           // may hold a glob (fallbacks) or start with ~/
  uint64_t kaslr_offset = 0;  // System.map / ELF: runtime = link + offset
};

struct KernelSpec {
  SymbolSource primary;
  std::vector<SymbolSource> fallbacks;  // tried in order when the primary is unusable
};

struct Mapping {
  std::string path;
  uint64_t start = 0;  // address of the mapping of the image's first loadable segment
};

// A program run over and over (a build server's compilers, a CI runner's steps): a new run every
// 1/per_second s of simulated time from the machine's start, each alive lifetime_ms, under pids
// pid, pid+1, ... pid+pids-1 in turn (then pid again: pids are reused), each run mapping the
// process's mappings at addresses shifted by its own page-aligned offset below 1 GiB (address
// space randomisation), so that only the run's own mappings say what a sampled address ran.
struct ChurnSpec {
  double per_second = 0;
  double lifetime_ms = 0;
  uint32_t pids = 0;
};
inline constexpr uint64_t kChurnOffsetRange = uint64_t{1} << 30;
// Runs of one churned program alive at once (per_second x lifetime_ms / 1000), at most: the
// platform tells them all to an agent that starts late.
inline constexpr uint32_t kMaxChurnAlive = 4096;

struct ProcessSpec {
  uint32_t pid = 0;
  std::string comm;
  std::vector<Mapping> mappings;
  std::optional<ChurnSpec> churn;
};

struct DomainSpec {
  uint16_t id = 0;
  std::string name;
  DomainType type = DomainType::kPv64;
  uint16_t vcpus = 1;
  uint32_t weight = 256;  // credit scheduler weight
  double load = 1.0;      // chance that a vCPU is runnable in a slice
  std::optional<uint32_t> socket_uid;  // uid allowed on this domain's socket
  KernelSpec kernel;
  std::vector<ProcessSpec> processes;
  ModeWorkload modes[sample_mode::kCount];
};

struct MachineSpec {
  uint32_t cpus = 2;
  PmuModelKind pmu = PmuModelKind::kIntelArchV4;
  uint32_t mhz = 2600;
  uint32_t slice_us = 1000;
  uint32_t burst_cycles = 20000;  // mean length of a run of one function
};

struct HypervisorSpec {
  std::string image;
  double idle_halted = 0.9;  // share of idle time the CPU is halted (counts no cycles)
  std::vector<FunctionSpec> idle_functions;
};

enum class Speed { kRealtime, kMax };

struct RunSpec {
  Speed speed = Speed::kRealtime;
  double factor = 1.0;       // realtime: simulated seconds per wall second
  uint64_t duration_ns = 0;  // 0: until stopped
};

struct Scenario {
  std::string origin;  // file it came from, for messages
  std::string name;
  std::string description;
  uint64_t seed = 1;
  // The run's own randomness (scheduling, bursts, counts), when not the scenario's seed
  // (`hvprof-hv --seed`): the workload (automatic function picks) stays the scenario's, so two
  // run seeds are two runs of one workload.
  std::optional<uint64_t> run_seed;
  MachineSpec machine;
  RunSpec run;
  HypervisorSpec hypervisor;
  std::vector<DomainSpec> domains;

  const DomainSpec* FindDomain(uint16_t id) const;
};

// Parses and validates scenario JSON. Every error names the field ("domains[1].vcpus") and what
// is wrong with it.
hvprof::Result<Scenario> ParseScenario(std::string_view json, std::string_view origin);
hvprof::Result<Scenario> LoadScenario(const std::string& path);

// The file a --scenario value names: a path (it has a '/' or ends in .json) as it is, or a
// scenario's NAME, found as NAME.json in the first of `directories` that has it. The error lists
// the directories searched and the names they hold.
hvprof::Result<std::string> FindScenario(const std::string& name_or_path, const std::vector<std::string>& directories);
// Where named scenarios are looked for: each directory of $HVPROF_SCENARIO_PATH (colon-separated),
// then share/hvprof/scenarios beside the directory of the executable (`executable_dir`/..), where
// both the build tree and an installation keep the scenarios in examples/.
std::vector<std::string> ScenarioDirectories(const std::string& executable_dir);
// The scenario hvprof-hv and `hvprof run` simulate when none is named.
inline constexpr const char* kDefaultScenario = "default";

}  // namespace hvprof::sim
