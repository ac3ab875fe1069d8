// The simulated machine's parts, shared by the files that implement SimMachine (private to sim/):
//   machine.cpp          building the machine from its scenario (domains, images, functions);
//   machine_run.cpp      running it: the credit scheduler, bursts, execution, PMIs and ticks;
//   machine_reports.cpp  what it tells: the ground truth, each domain's images and processes;
//   sim_platform.cpp     SimPlatform, the machine as the engine's platform.
#pragma once

#include "hvprof/sim/machine.h"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "hvpmu/events.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::sim {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::DomainType;
using hvpmu::InterruptedContext;
using hvpmu::kDomainIdle;
using hvpmu::kDomainXen;
namespace ring = hvpmu::ring;

using hvprof::Error;
using hvprof::ErrorKind;
using hvprof::MakeError;
using hvprof::Result;
namespace symbolizer = hvprof::symbolizer;

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();  // no process index
constexpr uint64_t kPerMillion = 1000000;
constexpr uint64_t kMaxSampledSize = 64 * 1024;  // for kallsyms' inferred sizes
constexpr uint64_t kStackRegion = kMappingsEnd;  // user stacks, above every mapping
constexpr uint64_t kHypervisorStackRegion = 0xFFFF830000000000ULL;
constexpr uint32_t kCreditPeriodSlices = 30;

// Privilege level of the interrupted guest frame for each kind of domain and mode.
inline uint8_t CplOf(DomainType type, Mode mode) {
  switch (mode) {
    case Mode::kHypervisor: return 0;
    case Mode::kUser: return 3;
    case Mode::kKernel:
      return type == DomainType::kPv64 ? 3 : type == DomainType::kPv32 ? 1 : 0;
  }
  return 3;
}

inline uint64_t PerMillion(double value) { return static_cast<uint64_t>(std::llround(value * 1e6)); }

// Events of each quantity per million cycles of a function with these rates.
inline void ToRatePerMillion(const Rates& rates, uint64_t* out) {
  const double instructions = rates.ipc;
  out[kCycles] = kPerMillion;
  out[kRefCycles] = kPerMillion;
  out[kInstructions] = PerMillion(instructions);
  out[kBranches] = PerMillion(instructions * rates.branches_per_kilo / 1000.0);
  out[kBranchMisses] = PerMillion(instructions * rates.branch_misses_per_kilo / 1000.0);
  out[kCacheRefs] = PerMillion(instructions * rates.cache_refs_per_kilo / 1000.0);
  out[kCacheMisses] = PerMillion(instructions * rates.cache_misses_per_kilo / 1000.0);
  // Six dispatch slots per cycle; the busier the core, the fewer go empty.
  out[kDispatchStalls] = PerMillion(std::max(0.0, 6.0 - std::min(6.0, instructions * 2.0)));
}

// Expands "~/" and a glob; returns the last match in sort order (the newest version).
inline std::string ExpandPath(const std::string& pattern) {
  std::string path = pattern;
  if (path.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    path = std::string(home != nullptr ? home : "") + path.substr(1);
  }
  if (path.find_first_of("*?[") == std::string::npos) return path;
  glob_t matches{};
  std::string result;
  if (::glob(path.c_str(), 0, nullptr, &matches) == 0 && matches.gl_pathc > 0) {
    result = matches.gl_pathv[matches.gl_pathc - 1];
  }
  ::globfree(&matches);
  return result;
}

inline bool IsNoiseSymbol(std::string_view name) {
  for (std::string_view prefix : {"__pfx_", "__cfi_", "__x86_indirect_thunk", "__x86_return_thunk",
                                  "__SCT__", "__pi_", "_sinittext", "_stext", "_etext"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

namespace internal {

// The functions of an image by name, for explicit picks; the largest wins for duplicates.
struct FunctionIndex {
  std::vector<symbolizer::FunctionSymbol> all;
  std::map<std::string, size_t, std::less<>> by_name;

  void Build(std::vector<symbolizer::FunctionSymbol> symbols) {
    all = std::move(symbols);
    for (size_t i = 0; i < all.size(); ++i) {
      auto& symbol = all[i];
      if (symbol.size == 0) symbol.size = 16;
      symbol.size = std::min(symbol.size, kMaxSampledSize);
      auto [it, added] = by_name.emplace(symbol.name, i);
      if (!added && all[it->second].size < symbol.size) it->second = i;
    }
  }
  const symbolizer::FunctionSymbol* Find(std::string_view name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &all[it->second];
  }
};

}  // namespace internal

using internal::FunctionIndex;

// ---- internal structures

struct SimMachine::Function {
  uint64_t start = 0;
  uint64_t size = 0;
  uint64_t rate[kQuantityCount] = {};
  uint32_t truth = 0;  // first of this function's truth rows (one per vCPU, or per CPU for idle)
  uint32_t process = kNone;
  std::vector<uint64_t> stack;
};

struct SimMachine::ModeTable {
  std::vector<Function> functions;
  AliasTable picker;
};

struct SimMachine::Process {
  uint32_t pid = 0;
  std::string comm;
  uint64_t address_space = 0;
  // A churned program (scenario.h, ChurnSpec): run k is born at k * period_ns, lives lifetime_ns,
  // runs under pid + k % pids with its mappings shifted by ChurnOffset(k). period_ns 0: one
  // process, alive the whole run.
  uint64_t period_ns = 0;
  uint64_t lifetime_ns = 0;
  uint32_t pids = 1;
  uint64_t offset_seed = 0;
  uint64_t ChurnOffset(uint64_t run) const {
    uint64_t z = offset_seed + run * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return ((z ^ (z >> 31)) % (kChurnOffsetRange / 4096)) * 4096;
  }
  uint32_t PidOf(uint64_t run) const { return pid + static_cast<uint32_t>(run % pids); }
  struct Image {
    std::string path;
    uint64_t start = 0;
    uint64_t end = 0;
    uint64_t bias = 0;
    std::string build_id;
  };
  std::vector<Image> images;
};

struct SimMachine::Domain {
  DomainId id = 0;
  std::string name;
  DomainType type = DomainType::kPv64;
  uint16_t vcpus = 0;
  uint32_t weight = 0;
  double load = 1.0;
  ModeTable modes[sample_mode::kCount];
  AliasTable mode_picker;
  std::vector<Mode> picker_modes;
  std::vector<Process> processes;
  std::string kernel_source;
  uint32_t first_vcpu = 0;
};

struct SimMachine::Vcpu {
  uint32_t domain = 0;  // index into domains_
  uint16_t id = 0;
  bool runnable = false;
  bool running = false;
  int last_cpu = -1;  // where it last ran
  hvpmu::ring::Runstate state = hvpmu::ring::Runstate::kBlocked;  // until the first schedule
  int64_t credit = 0;
  uint32_t process = kNone;  // the task it last ran in user mode
};

struct SimMachine::Cpu {
  explicit Cpu(uint32_t index_, PmuModelKind kind) : index(index_), pmu(kind) {}
  uint32_t index;
  PmuModel pmu;
  bool pmi_routed = false;
  bool pmi_masked = false;
  int vcpu = -1;  // global vCPU index, -1 for idle
  // The run of one function in progress.
  const Function* function = nullptr;
  Domain* domain = nullptr;
  Mode mode = Mode::kHypervisor;
  uint8_t cpl = 0;
  bool halted = false;
  uint64_t burst_left = 0;
  uint32_t truth_row = 0;
  uint64_t user_offset = 0;  // at a PMI: how far the interrupted run's mappings are shifted (churn)
  uint64_t carry[kQuantityCount] = {};
  uint64_t time = 0;  // cycles since boot on this CPU
  uint64_t next_tick = 0;  // cycles: when the sampling timer fires next, while it runs
  InterruptedContext context{};
};

// What building the domains needs at hand: the symbolizer, the hypervisor's functions, and
// the function lists of the images opened so far.
struct SimMachine::BuildContext {
  symbolizer::Symbolizer& symbolizer;
  const FunctionIndex& hypervisor;
  uint32_t hypervisor_image;
  std::map<std::string, FunctionIndex> kernels;      // by resolved source path
  std::map<std::pair<std::string, uint64_t>, FunctionIndex> user_images;  // (path, bias)
};


}  // namespace hvprof::sim
