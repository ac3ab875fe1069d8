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

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();  // no process index
constexpr uint64_t kPerMillion = 1000000;
constexpr uint64_t kMaxSampledSize = 64 * 1024;  // for kallsyms' inferred sizes
constexpr uint64_t kStackRegion = kMappingsEnd;  // user stacks, above every mapping
constexpr uint64_t kHypervisorStackRegion = 0xFFFF830000000000ULL;
constexpr uint32_t kCreditPeriodSlices = 30;

// Privilege level of the interrupted guest frame for each kind of domain and mode.
uint8_t CplOf(DomainType type, Mode mode) {
  switch (mode) {
    case Mode::kHypervisor: return 0;
    case Mode::kUser: return 3;
    case Mode::kKernel:
      return type == DomainType::kPv64 ? 3 : type == DomainType::kPv32 ? 1 : 0;
  }
  return 3;
}

uint64_t PerMillion(double value) { return static_cast<uint64_t>(std::llround(value * 1e6)); }

// Events of each quantity per million cycles of a function with these rates.
void ToRatePerMillion(const Rates& rates, uint64_t* out) {
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
std::string ExpandPath(const std::string& pattern) {
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

bool IsNoiseSymbol(std::string_view name) {
  for (std::string_view prefix : {"__pfx_", "__cfi_", "__x86_indirect_thunk", "__x86_return_thunk",
                                  "__SCT__", "__pi_", "_sinittext", "_stext", "_etext"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

}  // namespace

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

// ---- construction

SimMachine::SimMachine(const Scenario& scenario) : scenario_(scenario), rng_(scenario.run_seed.value_or(scenario.seed)) {}
SimMachine::~SimMachine() = default;

Result<std::unique_ptr<SimMachine>> SimMachine::Create(const Scenario& scenario,
                                                       symbolizer::Symbolizer& symbolizer) {
  std::unique_ptr<SimMachine> machine(new SimMachine(scenario));
  HVPROF_TRYV(machine->Build(symbolizer));
  return machine;
}

uint32_t SimMachine::InternImage(const std::string& name) {
  auto it = std::find(image_names_.begin(), image_names_.end(), name);
  if (it != image_names_.end()) return static_cast<uint32_t>(it - image_names_.begin());
  image_names_.push_back(name);
  return static_cast<uint32_t>(image_names_.size() - 1);
}

uint32_t SimMachine::InternFunction(const std::string& name, std::vector<std::string> callers) {
  function_names_.push_back(name);
  function_callers_.push_back(std::move(callers));
  return static_cast<uint32_t>(function_names_.size() - 1);
}

uint32_t SimMachine::AddTruthRows(DomainId domain, uint16_t vcpus, Mode mode, uint32_t image,
                                  uint32_t function, uint64_t start, uint64_t image_address) {
  const auto first = static_cast<uint32_t>(truth_.size());
  for (uint16_t v = 0; v < vcpus; ++v) {
    truth_.emplace_back();
    truth_keys_.push_back({domain, v, mode, image, function, start, image_address});
  }
  return first;
}

namespace {

// Opens one symbol source and lists its text functions. Fails if it gives no usable addresses.
Result<std::vector<symbolizer::FunctionSymbol>> ListSource(symbolizer::Symbolizer& symbolizer,
                                                           const SymbolSource& source,
                                                           const std::string& path) {
  symbolizer::ImageSpec spec;
  spec.path = path;
  spec.format = source.kind == SymbolSourceKind::kKallsyms    ? symbolizer::ImageFormat::kKallsyms
                : source.kind == SymbolSourceKind::kSystemMap ? symbolizer::ImageFormat::kSystemMap
                                                              : symbolizer::ImageFormat::kElf;
  spec.bias = source.kaslr_offset;
  HVPROF_TRY(functions, symbolizer.ListFunctions(spec, {}));
  size_t nonzero = 0;
  for (const auto& function : functions) nonzero += function.start != 0;
  if (nonzero == 0) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "{} shows no addresses (kernel.kptr_restrict hides them from this user)",
                     path);
  }
  return std::move(functions);
}

}  // namespace

Result<void> SimMachine::Build(symbolizer::Symbolizer& symbolizer) {
  const MachineSpec& machine = scenario_.machine;
  slice_cycles_ = uint64_t{machine.slice_us} * machine.mhz;
  for (uint32_t c = 0; c < machine.cpus; ++c) {
    cpus_.push_back(std::make_unique<Cpu>(c, machine.pmu));
  }
  platform_ = std::make_unique<SimPlatform>(*this);

  // The hypervisor: its functions serve every domain's hypervisor mode and the idle loop.
  symbolizer::ImageSpec xen;
  xen.path = scenario_.hypervisor.image;
  auto xen_functions = symbolizer.ListFunctions(xen, {});
  if (!xen_functions) {
    return xen_functions.error().WithContext("hypervisor.image");
  }
  FunctionIndex hypervisor;
  hypervisor.Build(std::move(xen_functions).value());
  const uint32_t xen_image = InternImage(scenario_.hypervisor.image);

  BuildContext context{symbolizer, hypervisor, xen_image, {}, {}};

  idle_ = std::make_unique<Domain>();
  idle_->id = kDomainIdle;
  idle_->name = "idle";
  idle_->vcpus = static_cast<uint16_t>(machine.cpus);
  {
    ModeTable& table = idle_->modes[static_cast<int>(Mode::kHypervisor)];
    std::vector<double> weights;
    std::map<uint64_t, size_t> named;  // start -> functions[i]
    for (size_t i = 0; i < scenario_.hypervisor.idle_functions.size(); ++i) {
      const FunctionSpec& spec = scenario_.hypervisor.idle_functions[i];
      const auto* symbol = hypervisor.Find(spec.name);
      if (symbol == nullptr) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "hypervisor.idle.functions[{}]: no function '{}' in {}", i, spec.name,
                         scenario_.hypervisor.image);
      }
      if (auto [it, added] = named.emplace(symbol->start, i); !added) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "hypervisor.idle.functions[{}]: '{}' at {:#x} is already listed as functions[{}] "
                         "('{}'): list each function once",
                         i, spec.name, symbol->start, it->second,
                         scenario_.hypervisor.idle_functions[it->second].name);
      }
      Function function;
      function.start = symbol->start;
      function.size = symbol->size;
      ToRatePerMillion(spec.rates.value_or(Rates{}), function.rate);
      function.truth = AddTruthRows(kDomainIdle, static_cast<uint16_t>(machine.cpus),
                                    Mode::kHypervisor, xen_image, InternFunction(symbol->name),
                                    symbol->start, symbol->start);
      table.functions.push_back(std::move(function));
      weights.push_back(spec.weight);
    }
    table.picker.Build(weights);
  }

  for (const DomainSpec& spec : scenario_.domains) {
    auto domain = std::make_unique<Domain>();
    domain->first_vcpu = static_cast<uint32_t>(vcpus_.size());
    HVPROF_TRYV(BuildDomain(context, spec, domain.get()));
    for (uint16_t v = 0; v < spec.vcpus; ++v) {
      Vcpu vcpu;
      vcpu.domain = static_cast<uint32_t>(domains_.size());
      vcpu.id = v;
      vcpus_.push_back(vcpu);
    }
    domains_.push_back(std::move(domain));
  }
  vcpu_truth_.assign(vcpus_.size(), SchedTruth{});
  idle_truth_.assign(cpus_.size(), 0);
  return hvprof::Ok();
}

}  // namespace hvprof::sim

namespace hvprof::sim {

Result<void> SimMachine::BuildDomain(BuildContext& context, const DomainSpec& spec,
                                     Domain* domain) {
  domain->id = spec.id;
  domain->name = spec.name;
  domain->type = spec.type;
  domain->vcpus = spec.vcpus;
  domain->weight = spec.weight;
  domain->load = spec.load;
  const std::string where = fmt::format("domain {} ({})", spec.id, spec.name);

  // The kernel's symbols: the primary source, else the first fallback that works.
  std::vector<std::string> tried;
  const std::vector<SymbolSource>* fallbacks = &spec.kernel.fallbacks;
  for (size_t i = 0; i <= fallbacks->size(); ++i) {
    const SymbolSource& source = i == 0 ? spec.kernel.primary : (*fallbacks)[i - 1];
    const std::string path = ExpandPath(source.path);
    if (path.empty()) {
      tried.push_back(fmt::format("{}: no file matches", source.path));
      continue;
    }
    if (context.kernels.count(path) == 0) {
      auto functions = ListSource(context.symbolizer, source, path);
      if (!functions) {
        tried.push_back(functions.error().message());
        continue;
      }
      context.kernels[path].Build(std::move(functions).value());
    }
    domain->kernel_source = path;
    if (i > 0) {
      notes_.push_back(fmt::format("{}: kernel symbols from {} (fallback: {})", where, path,
                                   fmt::join(tried, "; ")));
    } else {
      notes_.push_back(fmt::format("{}: kernel symbols from {}", where, path));
    }
    break;
  }
  if (domain->kernel_source.empty()) {
    return MakeError(ErrorKind::kNotFound,
                     "{}: no usable kernel symbols: {}. Give a System.map in kernel.fallbacks "
                     "(scripts/fetch-kernel-map.sh downloads Debian's)",
                     where, fmt::join(tried, "; "));
  }

  for (size_t p = 0; p < spec.processes.size(); ++p) {
    const ProcessSpec& process_spec = spec.processes[p];
    Process process;
    process.pid = process_spec.pid;
    process.comm = process_spec.comm;
    process.address_space = 0x100000000ULL + (uint64_t{spec.id} << 28) + (uint64_t{process.pid} << 12);
    if (process_spec.churn) {
      const ChurnSpec& churn = *process_spec.churn;
      process.period_ns = std::max<uint64_t>(1, static_cast<uint64_t>(1e9 / churn.per_second));
      process.lifetime_ns = static_cast<uint64_t>(churn.lifetime_ms * 1e6);
      process.pids = churn.pids;
      process.offset_seed = scenario_.seed ^ (uint64_t{spec.id} << 32) ^ process.pid;
    }
    // A churned run's mappings move by up to kChurnOffsetRange: the highest must still fit.
    const uint64_t shift = process_spec.churn ? kChurnOffsetRange : 0;
    for (size_t m = 0; m < process_spec.mappings.size(); ++m) {
      const Mapping& mapping = process_spec.mappings[m];
      symbolizer::ImageSpec image;
      image.path = mapping.path;
      auto info = context.symbolizer.Describe(image);
      if (!info) {
        return info.error().WithContext(
            fmt::format("domains[{}].processes[{}].mappings[{}]", spec.name, p, m));
      }
      Process::Image entry;
      entry.path = mapping.path;
      entry.start = mapping.start;
      // The mapping starts at the page of the first loadable segment.
      entry.bias = mapping.start - (info.value().low_address & ~uint64_t{0xFFF});
      entry.end = entry.bias + info.value().high_address;
      entry.build_id = info.value().build_id;
      // One address space: an image must not run into another one, nor into the stacks, the
      // kernel or the hypervisor above the mappings, or a sampled address would not tell what ran.
      const std::string field = fmt::format("{} processes[{}].mappings[{}]", where, p, m);
      if (entry.end < entry.start || entry.end > kMappingsEnd - shift) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "{}: {} mapped at {:#x} would end beyond {:#x}, the end of the mappings' range{}: "
                         "map it lower",
                         field, entry.path, entry.start, kMappingsEnd - shift,
                         shift != 0 ? " less the 1 GiB a churned run's mappings may move" : "");
      }
      for (size_t other = 0; other < process.images.size(); ++other) {
        const Process::Image& earlier = process.images[other];
        if (entry.start < earlier.end && earlier.start < entry.end) {
          return MakeError(ErrorKind::kInvalidArgument,
                           "{}: {} at {:#x}-{:#x} overlaps mappings[{}], {} at {:#x}-{:#x}: give each mapping "
                           "its own address range",
                           field, entry.path, entry.start, entry.end, other, earlier.path, earlier.start,
                           earlier.end);
        }
      }
      process.images.push_back(entry);
    }
    domain->processes.push_back(std::move(process));
  }

  for (Mode mode : {Mode::kUser, Mode::kKernel, Mode::kHypervisor}) {
    HVPROF_TRYV(AddFunctions(context, spec, mode, domain));
  }
  std::vector<double> shares;
  for (Mode mode : {Mode::kUser, Mode::kKernel, Mode::kHypervisor}) {
    const double share = spec.modes[static_cast<int>(mode)].share;
    if (share <= 0.0) continue;
    shares.push_back(share);
    domain->picker_modes.push_back(mode);
  }
  domain->mode_picker.Build(shares);
  return hvprof::Ok();
}

// Where a mode's functions come from: the hypervisor, the domain's kernel, or an image a process
// maps (with the process, and the bias of the image's addresses there; 0 for the hypervisor and
// kernels, whose addresses are their images').
struct SimMachine::FunctionSource {
  const FunctionIndex* index = nullptr;
  uint32_t image_id = 0;
  uint32_t process = kNone;
  uint64_t bias = 0;
};

Result<SimMachine::FunctionSource> SimMachine::SourceFor(BuildContext& context, Mode mode, Domain* domain,
                                                         uint32_t pid, const std::string& image,
                                                         const std::string& field) {
  if (mode == Mode::kHypervisor) return FunctionSource{&context.hypervisor, context.hypervisor_image, kNone, 0};
  if (mode == Mode::kKernel) {
    return FunctionSource{&context.kernels.at(domain->kernel_source), InternImage(domain->kernel_source), kNone, 0};
  }
  for (uint32_t p = 0; p < domain->processes.size(); ++p) {
    const Process& process = domain->processes[p];
    if (process.pid != pid) continue;
    for (const Process::Image& mapped : process.images) {
      if (mapped.path != image) continue;
      auto key = std::make_pair(mapped.path, mapped.bias);
      if (context.user_images.count(key) == 0) {
        symbolizer::ImageSpec spec_image;
        spec_image.path = mapped.path;
        spec_image.bias = mapped.bias;
        auto functions = context.symbolizer.ListFunctions(spec_image, {});
        if (!functions) return functions.error().WithContext(field);
        if (functions.value().empty()) {
          return MakeError(ErrorKind::kNotFound, "{}: {} has no function symbols", field, mapped.path);
        }
        context.user_images[key].Build(std::move(functions).value());
      }
      return FunctionSource{&context.user_images.at(key), InternImage(mapped.path), p, mapped.bias};
    }
  }
  return MakeError(ErrorKind::kInvalidArgument, "{}: image {} not mapped in process {}", field, image, pid);
}

namespace {

struct Picked {
  const symbolizer::FunctionSymbol* symbol;
  Rates rates;
  double weight;
};

// The functions a workload's `auto` picks: up to `count` of the image's (16 bytes or more, not
// noise, not an alias), weighted by Zipf's law, with made-up rates. Functions must not overlap
// (aliases at one address, or a kallsyms size that runs into the next symbol) one another or
// those listed already (`taken`), or a sampled address could not tell which one ran.
std::vector<Picked> PickFunctions(const FunctionIndex& index, uint32_t count, double zipf, Rng& pick_rng,
                                  std::vector<std::pair<uint64_t, uint64_t>> taken) {
  std::vector<size_t> candidates;
  for (size_t i = 0; i < index.all.size(); ++i) {
    const auto& symbol = index.all[i];
    if (symbol.start != 0 && symbol.size >= 16 && !IsNoiseSymbol(symbol.name) && index.Find(symbol.name) == &symbol) {
      candidates.push_back(i);
    }
  }
  auto overlaps = [&](uint64_t start, uint64_t end) {
    for (const auto& [low, high] : taken) {
      if (start < high && low < end) return true;
    }
    return false;
  };
  auto log_uniform = [&](double low, double high) {
    return std::exp(std::log(low) + pick_rng.NextDouble() * (std::log(high) - std::log(low)));
  };
  std::vector<Picked> picked;
  for (size_t k = 0; k < candidates.size() && picked.size() < count; ++k) {
    const size_t chosen = k + pick_rng.NextBelow(candidates.size() - k);
    std::swap(candidates[k], candidates[chosen]);
    const auto& symbol = index.all[candidates[k]];
    if (overlaps(symbol.start, symbol.start + symbol.size)) continue;
    taken.emplace_back(symbol.start, symbol.start + symbol.size);
    Rates rates;
    rates.ipc = log_uniform(0.3, 3.0);
    rates.branches_per_kilo = 80.0 + pick_rng.NextDouble() * 170.0;
    rates.branch_misses_per_kilo = std::min(rates.branches_per_kilo, log_uniform(0.2, 20.0));
    rates.cache_misses_per_kilo = log_uniform(0.05, 30.0);
    rates.cache_refs_per_kilo = rates.cache_misses_per_kilo * (3.0 + pick_rng.NextDouble() * 17.0);
    picked.push_back({&symbol, rates, 1.0 / std::pow(picked.size() + 1.0, zipf)});
  }
  return picked;
}

}  // namespace

Result<void> SimMachine::AddFunctions(BuildContext& context, const DomainSpec& spec, Mode mode,
                                      Domain* domain) {
  const ModeWorkload& workload = spec.modes[static_cast<int>(mode)];
  if (workload.share <= 0.0) return hvprof::Ok();
  ModeTable& table = domain->modes[static_cast<int>(mode)];
  std::vector<double> weights;
  const std::string field = fmt::format("domain {} ({}) workload.{}", spec.id, spec.name,
                                        sample_mode::Name(mode));
  auto add = [&](const symbolizer::FunctionSymbol& symbol, const Rates& rates, double weight,
                 const FunctionSource& source, const std::vector<uint64_t>& stack, std::vector<std::string> callers) {
    Function function;
    function.start = symbol.start;
    function.size = symbol.size;
    ToRatePerMillion(rates, function.rate);
    function.process = source.process;
    function.stack = stack;
    const std::string name = symbol.module.empty() ? symbol.name
                                                   : symbol.name + " [" + symbol.module + "]";
    function.truth = AddTruthRows(spec.id, spec.vcpus, mode, source.image_id,
                                  InternFunction(name, std::move(callers)), symbol.start, symbol.start - source.bias);
    table.functions.push_back(std::move(function));
    weights.push_back(weight);
  };

  // A function named twice (or by two of its names) would share its addresses with itself, and
  // a sampled address could not tell which entry ran.
  std::map<std::pair<uint32_t, uint64_t>, size_t> named;  // (process, start) -> functions[i]
  for (size_t i = 0; i < workload.functions.size(); ++i) {
    const FunctionSpec& function_spec = workload.functions[i];
    HVPROF_TRY(source, SourceFor(context, mode, domain, function_spec.process, function_spec.image, field));
    const auto* symbol = source.index->Find(function_spec.name);
    if (symbol == nullptr) {
      return MakeError(ErrorKind::kNotFound, "{}.functions[{}]: no function '{}' in {}", field, i,
                       function_spec.name, image_names_[source.image_id]);
    }
    if (auto [it, added] = named.emplace(std::pair{source.process, symbol->start}, i); !added) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "{}.functions[{}]: '{}' at {:#x} is already listed as functions[{}] ('{}'): list "
                       "each function once",
                       field, i, function_spec.name, symbol->start, it->second,
                       workload.functions[it->second].name);
    }
    std::vector<uint64_t> stack;
    for (const std::string& caller_name : function_spec.stack) {
      const auto* caller = source.index->Find(caller_name);
      if (caller == nullptr) {
        return MakeError(ErrorKind::kNotFound, "{}.functions[{}].stack: no function '{}' in {}",
                         field, i, caller_name, image_names_[source.image_id]);
      }
      // A return address a little way into the caller.
      stack.push_back(caller->start + std::min<uint64_t>(caller->size - 1, 5));
    }
    add(*symbol, function_spec.rates.value_or(workload.rates), function_spec.weight, source, stack,
        function_spec.stack);
  }

  if (workload.auto_pick) {
    const AutoPick& pick = *workload.auto_pick;
    HVPROF_TRY(source, SourceFor(context, mode, domain, pick.process, pick.image, field));
    // Its own stream, so that adding a domain does not change what another domain picks.
    Rng pick_rng(scenario_.seed ^ (uint64_t{spec.id} << 32) ^
                 (uint64_t{static_cast<uint32_t>(mode)} << 48) ^ 0xA5A5A5A5ULL);
    std::vector<std::pair<uint64_t, uint64_t>> taken;
    for (const Function& existing : table.functions) taken.emplace_back(existing.start, existing.start + existing.size);
    const std::vector<Picked> picked = PickFunctions(*source.index, pick.count, pick.zipf, pick_rng, std::move(taken));
    for (const Picked& chosen : picked) add(*chosen.symbol, chosen.rates, chosen.weight, source, {}, {});
    if (picked.size() < pick.count) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "{}.auto: asks for {} functions, {} has only {} that do not overlap", field,
                       pick.count, image_names_[source.image_id], picked.size());
    }
  }
  table.picker.Build(weights);
  return hvprof::Ok();
}

// ---- running

uint64_t SimMachine::NsOf(uint64_t cycles) const {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(cycles) * 1000 / scenario_.machine.mhz);
}

uint64_t SimMachine::now_ns() const { return NsOf(now_); }

SimMachine::Domain* SimMachine::FindDomain(DomainId id) {
  for (auto& domain : domains_) {
    if (domain->id == id) return domain.get();
  }
  return nullptr;
}

const SimMachine::Domain* SimMachine::FindDomain(DomainId id) const {
  for (const auto& domain : domains_) {
    if (domain->id == id) return domain.get();
  }
  return nullptr;
}

const std::string& SimMachine::kernel_source(DomainId domain) const {
  static const std::string kEmpty;
  const Domain* found = FindDomain(domain);
  return found == nullptr ? kEmpty : found->kernel_source;
}

void SimMachine::RunFor(uint64_t ns) {
  const uint64_t target =
      now_ + static_cast<uint64_t>(static_cast<unsigned __int128>(ns) * scenario_.machine.mhz / 1000);
  // The engine started recording scheduling since the last step: say where everybody is.
  const bool recording = engine_ != nullptr && engine_->sched_recording();
  if (recording && !was_recording_sched_) EmitSnapshot();
  was_recording_sched_ = recording;
  while (now_ < target) {
    if (now_ == slice_end_) {
      Schedule();
      slice_end_ = now_ + slice_cycles_;
      ++slices_;
    }
    const uint64_t segment_end = std::min(slice_end_, target);
    for (auto& cpu : cpus_) RunCpu(cpu->index, segment_end);
    now_ = segment_end;
  }
}

void SimMachine::Schedule() {
  AccountSchedTruth();
  previous_vcpu_.resize(cpus_.size());
  for (size_t c = 0; c < cpus_.size(); ++c) previous_vcpu_[c] = cpus_[c]->vcpu;
  // Credit refill every accounting period, shared between domains by weight.
  if (slices_ % kCreditPeriodSlices == 0) {
    uint64_t total_weight = 0;
    for (const auto& domain : domains_) total_weight += domain->weight;
    const double period = static_cast<double>(slice_cycles_) * kCreditPeriodSlices * cpus_.size();
    for (Vcpu& vcpu : vcpus_) {
      const Domain& domain = *domains_[vcpu.domain];
      const auto share = static_cast<int64_t>(period * domain.weight / total_weight / domain.vcpus);
      vcpu.credit = std::min<int64_t>(vcpu.credit + share, share);
    }
  }
  runnable_.clear();
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    Vcpu& vcpu = vcpus_[v];
    vcpu.runnable = rng_.NextDouble() < domains_[vcpu.domain]->load;
    vcpu.running = false;
    if (vcpu.runnable) runnable_.push_back(static_cast<int>(v));
  }
  // CPU i runs the i-th runnable vCPU by credit, the lower index first among equals: the
  // highest credits, found without a scan of every vCPU per CPU (a host with hundreds of CPUs
  // and thousands of vCPUs reschedules every slice).
  const size_t placed = std::min(runnable_.size(), cpus_.size());
  std::partial_sort(runnable_.begin(), runnable_.begin() + static_cast<std::ptrdiff_t>(placed), runnable_.end(),
                    [this](int a, int b) {
                      const int64_t ca = vcpus_[a].credit;
                      const int64_t cb = vcpus_[b].credit;
                      return ca != cb ? ca > cb : a < b;
                    });
  for (size_t c = 0; c < cpus_.size(); ++c) {
    auto& cpu = cpus_[c];
    const int best = c < placed ? runnable_[c] : -1;
    if (best != cpu->vcpu) cpu->burst_left = 0;  // a different vCPU starts afresh
    cpu->vcpu = best;
    if (best >= 0) {
      vcpus_[best].running = true;
      vcpus_[best].credit -= static_cast<int64_t>(slice_cycles_);
    }
  }

  // What changed, as a real scheduler would trace it: on each pCPU, whoever leaves first, then
  // wake-ups, waits and arrivals. The idle vCPU of a pCPU runs while no other does.
  using hvpmu::ring::Runstate;
  using hvpmu::ring::SchedType;
  const auto ncpus = static_cast<uint32_t>(cpus_.size());
  auto state_of = [](const Vcpu& vcpu) {
    return vcpu.running ? Runstate::kRunning : vcpu.runnable ? Runstate::kRunnable : Runstate::kBlocked;
  };
  auto home = [&](const Vcpu& vcpu, size_t index) {
    return vcpu.last_cpu >= 0 ? static_cast<uint32_t>(vcpu.last_cpu) : static_cast<uint32_t>(index % ncpus);
  };
  for (size_t v = 0; v < vcpus_.size(); ++v) {  // leaving a pCPU
    Vcpu& vcpu = vcpus_[v];
    if (vcpu.state != Runstate::kRunning) continue;
    const bool stays = vcpu.running && cpus_[static_cast<uint32_t>(vcpu.last_cpu)]->vcpu == static_cast<int>(v);
    if (stays) continue;
    // It stops running (blocked or runnable), or runs on another pCPU from now: runnable between.
    const Runstate next = vcpu.running ? Runstate::kRunnable : state_of(vcpu);
    EmitSched(static_cast<uint32_t>(vcpu.last_cpu), SchedType::kRunstate, domains_[vcpu.domain]->id, vcpu.id,
              Runstate::kRunning, next);
    vcpu.state = next;
  }
  for (uint32_t c = 0; c < ncpus; ++c) {  // the idle vCPU leaves a pCPU that got work
    if (previous_vcpu_[c] < 0 && cpus_[c]->vcpu >= 0) {
      EmitSched(c, SchedType::kRunstate, hvpmu::kDomainIdle, static_cast<uint16_t>(c), Runstate::kRunning,
                Runstate::kRunnable);
    }
  }
  for (size_t v = 0; v < vcpus_.size(); ++v) {  // wake-ups, waits, arrivals
    Vcpu& vcpu = vcpus_[v];
    const Runstate next = state_of(vcpu);
    if (next == vcpu.state) continue;
    const DomainId domain = domains_[vcpu.domain]->id;
    uint32_t cpu = home(vcpu, v);
    if (next == Runstate::kRunning) {
      for (uint32_t c = 0; c < ncpus; ++c) {
        if (cpus_[c]->vcpu == static_cast<int>(v)) cpu = c;
      }
    }
    if (vcpu.state == Runstate::kBlocked) {
      ++vcpu_truth_[v].wakeups;
      EmitSched(cpu, SchedType::kWakeup, domain, vcpu.id, Runstate::kBlocked, Runstate::kRunnable, 0xFFFF,
                static_cast<uint16_t>(cpu));
    }
    if (next == Runstate::kRunning && vcpu.last_cpu >= 0 && static_cast<uint32_t>(vcpu.last_cpu) != cpu) {
      ++vcpu_truth_[v].migrations;
      EmitSched(cpu, SchedType::kMigrate, domain, vcpu.id, vcpu.state, vcpu.state,
                static_cast<uint16_t>(vcpu.last_cpu), static_cast<uint16_t>(cpu));
    }
    EmitSched(cpu, SchedType::kRunstate, domain, vcpu.id, vcpu.state, next);
    vcpu.state = next;
    if (next == Runstate::kRunning) vcpu.last_cpu = static_cast<int>(cpu);
  }
  if (sched_sink_) {  // who goes on running where (Xen's continue-running), for the sink only
    for (uint32_t c = 0; c < ncpus; ++c) {
      if (previous_vcpu_[c] != cpus_[c]->vcpu) continue;
      const int v = cpus_[c]->vcpu;
      hvpmu::ring::SchedRecord record{};
      record.type = static_cast<uint8_t>(SchedType::kRunstate);
      record.old_state = record.new_state = static_cast<uint8_t>(Runstate::kRunning);
      record.time_ns = now_ns();
      record.domain = v < 0 ? hvpmu::kDomainIdle : domains_[vcpus_[v].domain]->id;
      record.vcpu = v < 0 ? static_cast<uint16_t>(c) : vcpus_[v].id;
      record.pid = record.tid = record.other_pid = record.other_tid = hvpmu::ring::kNoPid;
      record.from_pcpu = record.to_pcpu = 0xFFFF;
      sched_sink_(c, now_, record);
    }
  }
  for (uint32_t c = 0; c < ncpus; ++c) {  // the idle vCPU takes over a pCPU left without work
    if (previous_vcpu_[c] >= 0 && cpus_[c]->vcpu < 0) {
      EmitSched(c, SchedType::kRunstate, hvpmu::kDomainIdle, static_cast<uint16_t>(c), Runstate::kRunnable,
                Runstate::kRunning);
    }
  }
}

void SimMachine::AccountSchedTruth() {
  const uint64_t elapsed = now_ - sched_accounted_to_;
  sched_accounted_to_ = now_;
  if (elapsed == 0) return;
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    vcpu_truth_[v].cycles[static_cast<uint32_t>(vcpus_[v].state)] += elapsed;
  }
  for (size_t c = 0; c < cpus_.size(); ++c) {
    if (cpus_[c]->vcpu < 0) idle_truth_[c] += elapsed;
  }
}

void SimMachine::EmitSched(uint32_t cpu, hvpmu::ring::SchedType type, DomainId domain, uint16_t vcpu,
                           hvpmu::ring::Runstate from, hvpmu::ring::Runstate to, uint16_t from_cpu,
                           uint16_t to_cpu) {
  const bool recording = engine_ != nullptr && engine_->sched_recording();
  if (!recording && !sched_sink_) return;
  hvpmu::ring::SchedRecord record{};
  record.type = static_cast<uint8_t>(type);
  record.old_state = static_cast<uint8_t>(from);
  record.new_state = static_cast<uint8_t>(to);
  record.time_ns = now_ns();
  record.domain = domain;
  record.vcpu = vcpu;
  record.pid = record.tid = record.other_pid = record.other_tid = hvpmu::ring::kNoPid;
  record.from_pcpu = from_cpu;
  record.to_pcpu = to_cpu;
  if (recording) engine_->RecordSched(cpu, record);
  if (sched_sink_) sched_sink_(cpu, now_, record);
}

void SimMachine::EmitSnapshot() {
  // Where every vCPU is when recording starts: a runstate record that changes nothing, on the
  // pCPU it runs on (or last ran on), so that a reader knows the state of those that keep it.
  using hvpmu::ring::Runstate;
  using hvpmu::ring::SchedType;
  const auto ncpus = static_cast<uint32_t>(cpus_.size());
  for (uint32_t c = 0; c < ncpus; ++c) {
    const Runstate idle = cpus_[c]->vcpu < 0 ? Runstate::kRunning : Runstate::kRunnable;
    EmitSched(c, SchedType::kRunstate, hvpmu::kDomainIdle, static_cast<uint16_t>(c), idle, idle);
  }
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    const Vcpu& vcpu = vcpus_[v];
    const uint32_t cpu = vcpu.last_cpu >= 0 ? static_cast<uint32_t>(vcpu.last_cpu) : static_cast<uint32_t>(v % ncpus);
    EmitSched(cpu, SchedType::kRunstate, domains_[vcpu.domain]->id, vcpu.id, vcpu.state, vcpu.state);
  }
}

void SimMachine::StartBurst(Cpu& cpu) {
  if (cpu.vcpu < 0) {
    cpu.domain = idle_.get();
    cpu.mode = Mode::kHypervisor;
    cpu.cpl = 0;
    const ModeTable& table = idle_->modes[static_cast<int>(Mode::kHypervisor)];
    cpu.function = &table.functions[table.picker.Pick(rng_)];
    cpu.halted = rng_.NextDouble() < scenario_.hypervisor.idle_halted;
    cpu.truth_row = cpu.function->truth + cpu.index;
  } else {
    Vcpu& vcpu = vcpus_[cpu.vcpu];
    Domain& domain = *domains_[vcpu.domain];
    cpu.domain = &domain;
    cpu.mode = domain.picker_modes[domain.mode_picker.Pick(rng_)];
    cpu.cpl = CplOf(domain.type, cpu.mode);
    const ModeTable& table = domain.modes[static_cast<int>(cpu.mode)];
    cpu.function = &table.functions[table.picker.Pick(rng_)];
    cpu.halted = false;
    cpu.truth_row = cpu.function->truth + vcpu.id;
    if (cpu.function->process != kNone) vcpu.process = cpu.function->process;
  }
  cpu.burst_left = rng_.NextExponential(scenario_.machine.burst_cycles);
}

void SimMachine::RunCpu(uint32_t cpu_index, uint64_t until) {
  Cpu& cpu = *cpus_[cpu_index];
  while (cpu.time < until) {
    if (cpu.burst_left == 0) StartBurst(cpu);
    uint64_t step = std::min(cpu.burst_left, until - cpu.time);
    if (tick_cycles_ != 0) step = std::min(step, cpu.next_tick - cpu.time);
    cpu.burst_left -= step;
    const uint32_t row = cpu.truth_row;
    if (cpu.halted) {
      cpu.time += step;  // a halted CPU counts nothing
    } else {
      Execute(cpu, step);
    }
    if (tick_cycles_ == 0) continue;
    // The timer's truth: this function's time, and the tick that ends it if one is due now.
    truth_[row].timer_cycles += step;
    if (cpu.time == cpu.next_tick) {
      ++truth_[row].ticks;
      cpu.next_tick += tick_cycles_;
      DeliverTick(cpu);
    }
  }
}

void SimMachine::Execute(Cpu& cpu, uint64_t cycles) {
  const Function& function = *cpu.function;
  TruthRow& row = truth_[cpu.truth_row];
  while (cycles > 0) {
    const uint32_t counting = cpu.pmu.counting_mask(cpu.cpl);
    if (counting == 0) {
      cpu.time += cycles;
      return;
    }
    // Run up to the first counter overflow, or to the end of the run.
    uint64_t step = cycles;
    uint32_t quantities = 0;
    for (uint32_t bits = counting; bits != 0; bits &= bits - 1) {
      const uint32_t counter = static_cast<uint32_t>(__builtin_ctz(bits));
      const Quantity quantity = cpu.pmu.quantity(counter);
      quantities |= 1u << quantity;
      const uint64_t rate = function.rate[quantity];
      if (rate == 0) continue;
      const uint64_t until = cpu.pmu.UntilOverflow(counter);
      uint64_t at;
      if (until < (uint64_t{1} << 40)) {  // fits 64-bit arithmetic
        at = (until * kPerMillion - cpu.carry[quantity] + rate - 1) / rate;
      } else {
        const unsigned __int128 needed =
            static_cast<unsigned __int128>(until) * kPerMillion - cpu.carry[quantity];
        const unsigned __int128 wide = (needed + rate - 1) / rate;
        at = wide > step ? step : static_cast<uint64_t>(wide);
      }
      if (at < step) step = at;
    }
    uint64_t events[kQuantityCount];
    for (uint32_t bits = quantities; bits != 0; bits &= bits - 1) {
      const uint32_t quantity = static_cast<uint32_t>(__builtin_ctz(bits));
      // step is below 2^40 cycles and rates below 2^24 per million: no overflow in 64 bits.
      const uint64_t total = step * function.rate[quantity] + cpu.carry[quantity];
      events[quantity] = total / kPerMillion;
      cpu.carry[quantity] = total % kPerMillion;
    }
    bool pmi = false;
    for (uint32_t bits = counting; bits != 0; bits &= bits - 1) {
      const uint32_t counter = static_cast<uint32_t>(__builtin_ctz(bits));
      const uint64_t counted = events[cpu.pmu.quantity(counter)];
      row.events[counter] += counted;
      if (cpu.pmu.Add(counter, counted)) {
        ++row.overflows[counter];
        pmi |= cpu.pmu.raises_pmi(counter);
      }
    }
    cycles -= step;
    cpu.time += step;
    if (pmi) DeliverPmi(cpu);
  }
}

void SimMachine::DeliverPmi(Cpu& cpu) {
  if (!cpu.pmi_routed || cpu.pmi_masked || engine_ == nullptr) return;
  // Intel's LVT masks itself on delivery; the handler re-arms it.
  if (scenario_.machine.pmu == PmuModelKind::kIntelArchV4) cpu.pmi_masked = true;
  CaptureContext(cpu);
  nmi_cpu_ = static_cast<int>(cpu.index);
  ++pmis_;
  engine_->HandlePmi(cpu.index);
  nmi_cpu_ = -1;
}

void SimMachine::DeliverTick(Cpu& cpu) {
  if (engine_ == nullptr) return;
  // As a host's timer interrupt does: the engine's handler runs with the interrupted context at
  // hand, whatever the PMI routing (the timer needs none).
  CaptureContext(cpu);
  nmi_cpu_ = static_cast<int>(cpu.index);
  ++ticks_;
  engine_->HandlePmi(cpu.index);
  nmi_cpu_ = -1;
}

void SimMachine::CaptureContext(Cpu& cpu) {
  const Function& function = *cpu.function;
  InterruptedContext& context = cpu.context;
  context = InterruptedContext{};
  const bool idle = cpu.vcpu < 0;
  const Vcpu* vcpu = idle ? nullptr : &vcpus_[cpu.vcpu];
  context.domain = idle ? kDomainIdle : cpu.domain->id;
  context.vcpu = idle ? static_cast<uint16_t>(cpu.index) : vcpu->id;
  context.type = cpu.domain->type;
  context.in_hypervisor = cpu.mode == Mode::kHypervisor;
  context.cpl = cpu.cpl;
  context.pv_kernel_mode = cpu.mode == Mode::kKernel;
  context.hvm_long_mode = true;
  context.ip = function.start + rng_.NextBelow(function.size);
  cpu.user_offset = 0;
  context.frame_pointer = function.stack.empty()
                              ? 0
                              : (context.in_hypervisor ? kHypervisorStackRegion : kStackRegion) +
                                    (uint64_t{cpu.index} << 16);
  context.pid = context.tid = ring::kNoPid;
  if (!idle && vcpu->process != kNone) {
    const Process& process = cpu.domain->processes[vcpu->process];
    context.address_space = process.address_space;
    uint32_t pid = process.pid;
    if (process.period_ns != 0) {
      // One of the program's runs alive now, each as likely: born in (now - lifetime, now].
      const uint64_t now = NsOf(cpu.time);
      const uint64_t newest = now / process.period_ns;
      const uint64_t oldest =
          now < process.lifetime_ns ? 0 : (now - process.lifetime_ns) / process.period_ns + 1;
      const uint64_t run = oldest >= newest ? newest : oldest + rng_.NextBelow(newest - oldest + 1);
      pid = process.PidOf(run);
      context.address_space = 0x100000000ULL + (uint64_t{cpu.domain->id} << 28) + (uint64_t{pid} << 12);
      if (cpu.mode == Mode::kUser) {
        cpu.user_offset = process.ChurnOffset(run);
        context.ip += cpu.user_offset;
      }
    }
    if (cpu.mode != Mode::kHypervisor) context.pid = context.tid = pid;
  }
}

// ---- reports

void SimMachine::ResetGroundTruth() {
  for (TruthRow& row : truth_) row = TruthRow{};
  timer_sampled_ = tick_cycles_ != 0;
  for (SchedTruth& truth : vcpu_truth_) truth = SchedTruth{};
  for (uint64_t& idle : idle_truth_) idle = 0;
  sched_accounted_to_ = sched_truth_since_ = now_;
}

std::string SimMachine::GroundTruthJson() const {
  using Json = nlohmann::json;
  Json out;
  out["scenario"] = scenario_.name;
  out["seed"] = scenario_.seed;
  out["run_seed"] = scenario_.run_seed.value_or(scenario_.seed);
  out["sim_time_ns"] = now_ns();
  out["cpus"] = cpus_.size();
  out["pmu"] = std::string(PmuModelName(scenario_.machine.pmu));
  out["pmis"] = pmis_;
  out["ticks"] = ticks_;
  out["source"] = timer_sampled_ ? "timer" : "pmu";
  Json counters = Json::array();
  const PmuModel& pmu = cpus_[0]->pmu;
  // The timer's truth is one counter: ns of each function's time and the ticks due in it.
  const uint32_t truth_counters = timer_sampled_ ? 1 : pmu.num_counters();
  auto events_of = [&](const TruthRow& row, uint32_t i) { return timer_sampled_ ? NsOf(row.timer_cycles) : row.events[i]; };
  auto overflows_of = [&](const TruthRow& row, uint32_t i) { return timer_sampled_ ? row.ticks : row.overflows[i]; };
  if (timer_sampled_) {
    counters.push_back({{"index", 0},
                        {"enabled", tick_cycles_ != 0},
                        {"event", fmt::format("{:#x}", hvpmu::kTimerEventCode)},
                        {"unit_mask", "0x00"},
                        {"os", true},
                        {"usr", true},
                        {"fixed", false},
                        {"counts", "time_ns"}});
  }
  for (uint32_t i = 0; i < pmu.num_counters() && !timer_sampled_; ++i) {
    const PmuModel::CounterInfo info = pmu.Describe(i);
    counters.push_back({{"index", i},
                        {"enabled", info.enabled},
                        {"event", fmt::format("{:#x}", info.event)},
                        {"unit_mask", fmt::format("{:#04x}", info.unit_mask)},
                        {"os", info.os},
                        {"usr", info.usr},
                        {"fixed", info.fixed},
                        {"counts", QuantityName(pmu.quantity(i))}});
  }
  out["counters"] = counters;
  Json rows = Json::array();
  for (size_t r = 0; r < truth_.size(); ++r) {
    const TruthRow& row = truth_[r];
    bool any = false;
    for (uint32_t i = 0; i < truth_counters; ++i) any |= events_of(row, i) != 0;
    if (!any) continue;
    const TruthKey& key = truth_keys_[r];
    Json events = Json::array();
    Json overflows = Json::array();
    for (uint32_t i = 0; i < truth_counters; ++i) {
      events.push_back(events_of(row, i));
      overflows.push_back(overflows_of(row, i));
    }
    Json entry{{"domain", key.domain},
               {"vcpu", key.vcpu},
               {"mode", std::string(sample_mode::Name(key.mode))},
               {"image", image_names_[key.image]},
               {"function", function_names_[key.function]},
               {"start", fmt::format("{:#x}", key.start)},
               {"image_address", fmt::format("{:#x}", key.image_address)},
               {"events", events},
               {"overflows", overflows}};
    // The chain a frame-pointer walk finds from this function: its callers, innermost first.
    if (!function_callers_[key.function].empty()) entry["callers"] = function_callers_[key.function];
    rows.push_back(std::move(entry));
  }
  out["rows"] = rows;

  // Time in state, with the interval since the last schedule counted as it stands.
  auto ns = [this](uint64_t cycles) { return NsOf(cycles); };
  const uint64_t open = now_ - sched_accounted_to_;
  Json vcpus = Json::array();
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    uint64_t cycles[hvpmu::ring::kRunstateCount];
    for (uint32_t s = 0; s < hvpmu::ring::kRunstateCount; ++s) cycles[s] = vcpu_truth_[v].cycles[s];
    cycles[static_cast<uint32_t>(vcpus_[v].state)] += open;
    vcpus.push_back({{"domain", domains_[vcpus_[v].domain]->id},
                     {"vcpu", vcpus_[v].id},
                     {"running_ns", ns(cycles[0])},
                     {"runnable_ns", ns(cycles[1])},
                     {"blocked_ns", ns(cycles[2])},
                     {"offline_ns", ns(cycles[3])},
                     {"wakeups", vcpu_truth_[v].wakeups},
                     {"migrations", vcpu_truth_[v].migrations}});
  }
  Json cpus = Json::array();
  for (size_t c = 0; c < cpus_.size(); ++c) {
    const uint64_t idle = idle_truth_[c] + (cpus_[c]->vcpu < 0 ? open : 0);
    const uint64_t total = now_ - sched_truth_since_;
    cpus.push_back({{"cpu", c}, {"idle_ns", ns(idle)}, {"busy_ns", ns(total - idle)}});
  }
  out["sched"] = {{"since_ns", ns(sched_truth_since_)}, {"now_ns", now_ns()}, {"vcpus", vcpus}, {"cpus", cpus}};
  return out.dump(1);
}

context::DomainImages SimMachine::Images(DomainId domain_id) const {
  context::DomainImages images;
  if (domain_id == 0) images.hypervisor = scenario_.hypervisor.image;  // what dom0 would know
  if (const Domain* domain = FindDomain(domain_id)) images.kernel = domain->kernel_source;
  return images;
}

SimMachine::ContextBatch SimMachine::ContextEvents(DomainId domain_id, uint64_t from, size_t max_events) {
  ContextBatch batch;
  const Domain* domain = FindDomain(domain_id);
  if (domain == nullptr) return batch;
  const uint64_t now = now_ns();
  const size_t count = domain->processes.size();
  ContextCursor& cursor = context_cursors_[domain_id];
  auto mapping = [&](const Process::Image& image, uint32_t pid, uint64_t time, uint64_t offset) {
    context::ContextEvent event;
    event.kind = context::ContextKind::kMapping;
    event.domain = domain_id;
    event.pid = pid;
    event.time_ns = time;
    event.start = image.start + offset;
    event.end = image.end + offset;
    event.bias = image.bias + offset;
    event.path = image.path;
    event.build_id = image.build_id;
    batch.events.push_back(std::move(event));
  };
  auto born = [&](const Process& process, uint32_t pid, uint64_t time) {
    context::ContextEvent event;
    event.kind = context::ContextKind::kProcess;
    event.domain = domain_id;
    event.pid = pid;
    event.time_ns = time;
    event.comm = process.comm;
    batch.events.push_back(std::move(event));
  };
  // One run of a churned program: its birth, its mappings where this run has them, its exit.
  auto tell_run = [&](const Process& process, uint64_t run) {
    const uint32_t pid = process.PidOf(run);
    const uint64_t birth = run * process.period_ns;
    born(process, pid, birth);
    for (const Process::Image& image : process.images) mapping(image, pid, birth, process.ChurnOffset(run));
    context::ContextEvent exit;
    exit.kind = context::ContextKind::kExit;
    exit.domain = domain_id;
    exit.pid = pid;
    exit.time_ns = birth + process.lifetime_ns;
    batch.events.push_back(std::move(exit));
  };

  const bool retry = from != 0 && from == cursor.retry_sequence && cursor.retry_next_run.size() == count;
  if (from == 0 || (from != cursor.sequence && !retry) || cursor.next_run.size() != count) {
    // From the start: what is alive now.
    batch.first = from == 0 ? 0 : from + 1;
    cursor.next_run.assign(count, 0);
    for (size_t p = 0; p < count; ++p) {
      const Process& process = domain->processes[p];
      if (process.period_ns == 0) {
        born(process, process.pid, 0);
        for (const Process::Image& image : process.images) mapping(image, process.pid, 0, 0);
        continue;
      }
      const uint64_t newest = now / process.period_ns;
      const uint64_t oldest = now < process.lifetime_ns ? 0 : (now - process.lifetime_ns) / process.period_ns + 1;
      for (uint64_t run = oldest; run <= newest; ++run) tell_run(process, run);
      cursor.next_run[p] = newest + 1;
    }
    // Sequence 1 is this batch; asked for again (from 0), it is made again.
    cursor.sequence = 2;
    cursor.retry_sequence = 0;
    cursor.retry_next_run.clear();
    batch.next = cursor.sequence;
    return batch;
  }
  if (retry) {
    cursor.sequence = cursor.retry_sequence;
    cursor.next_run = cursor.retry_next_run;
  }
  batch.first = from;
  cursor.retry_sequence = cursor.sequence;
  cursor.retry_next_run = cursor.next_run;
  // The runs born since, oldest first (ties in the processes' order), while the batch has room.
  uint64_t told = 0;
  for (;;) {
    size_t pick = count;
    uint64_t pick_birth = UINT64_MAX;
    for (size_t p = 0; p < count; ++p) {
      const Process& process = domain->processes[p];
      if (process.period_ns == 0) continue;
      const uint64_t birth = cursor.next_run[p] * process.period_ns;
      if (birth <= now && birth < pick_birth) pick = p, pick_birth = birth;
    }
    if (pick == count) break;
    const Process& process = domain->processes[pick];
    if (told != 0 && batch.events.size() + process.images.size() + 2 > max_events) break;
    tell_run(process, cursor.next_run[pick]++);
    ++told;
  }
  cursor.sequence += told;
  batch.next = cursor.sequence;
  return batch;
}

// ---- the platform

uint32_t SimPlatform::NumCpus() { return static_cast<uint32_t>(machine_.cpus_.size()); }

CpuidResult SimPlatform::Cpuid(uint32_t, uint32_t leaf, uint32_t subleaf) {
  static const hosted::CpuModel kModels[] = {CpuModelFor(PmuModelKind::kIntelArchV4),
                                             CpuModelFor(PmuModelKind::kAmdZen),
                                             CpuModelFor(PmuModelKind::kAmdZen4),
                                             CpuModelFor(PmuModelKind::kNone)};
  return kModels[static_cast<int>(machine_.scenario_.machine.pmu)].Cpuid(leaf, subleaf);
}

bool SimPlatform::ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) {
  if (cpu >= machine_.cpus_.size()) return false;
  return machine_.cpus_[cpu]->pmu.ReadMsr(msr, value);
}

bool SimPlatform::WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) {
  if (cpu >= machine_.cpus_.size()) return false;
  return machine_.cpus_[cpu]->pmu.WriteMsr(msr, value);
}

void SimPlatform::SetPmiRouting(uint32_t cpu, bool deliver_as_nmi) {
  if (cpu >= machine_.cpus_.size()) return;
  machine_.cpus_[cpu]->pmi_routed = deliver_as_nmi;
  machine_.cpus_[cpu]->pmi_masked = false;
}

void SimPlatform::RearmPmi(uint32_t cpu) {
  if (cpu < machine_.cpus_.size()) machine_.cpus_[cpu]->pmi_masked = false;
}

uint64_t SimPlatform::NowNs() {
  const int cpu = machine_.nmi_cpu_;
  return machine_.NsOf(cpu >= 0 ? machine_.cpus_[cpu]->time : machine_.now_);
}

bool SimPlatform::StartSampleTimer(uint64_t period_ns) {
  const uint64_t cycles =
      static_cast<uint64_t>(static_cast<unsigned __int128>(period_ns) * machine_.scenario_.machine.mhz / 1000);
  machine_.tick_cycles_ = std::max<uint64_t>(cycles, 1);
  machine_.timer_sampled_ = true;
  for (auto& cpu : machine_.cpus_) cpu->next_tick = cpu->time + machine_.tick_cycles_;
  return true;
}

void SimPlatform::StopSampleTimer() { machine_.tick_cycles_ = 0; }

bool SimPlatform::GetDomainInfo(DomainId domain, DomainInfo* info) {
  const SimMachine::Domain* found = machine_.FindDomain(domain);
  if (found == nullptr) return false;
  info->num_vcpus = found->vcpus;
  info->type = found->type;
  info->is_hardware_domain = domain == 0;
  return true;
}

bool SimPlatform::GetInterruptedContext(uint32_t cpu, InterruptedContext* context) {
  if (cpu >= machine_.cpus_.size() || machine_.nmi_cpu_ != static_cast<int>(cpu)) return false;
  *context = machine_.cpus_[cpu]->context;
  return true;
}

bool SimPlatform::ReadGuestMemory(DomainId domain, uint16_t, uint64_t address, void* buffer,
                                  uint32_t bytes) {
  // The only memory the simulation has is the synthetic frame chain of the function the
  // current PMI interrupted: frame k at base + 16k holds {next frame, return address k}.
  const int cpu_index = machine_.nmi_cpu_;
  if (cpu_index < 0) return false;
  const SimMachine::Cpu& cpu = *machine_.cpus_[cpu_index];
  const InterruptedContext& context = cpu.context;
  const bool hypervisor = domain == kDomainXen;
  if (hypervisor != context.in_hypervisor || context.frame_pointer == 0) return false;
  if (!hypervisor && domain != context.domain) return false;
  const std::vector<uint64_t>& stack = cpu.function->stack;
  const uint64_t base = context.frame_pointer;
  if (address < base || (address - base) % 16 != 0 || bytes > 16) return false;
  const uint64_t frame = (address - base) / 16;
  if (frame >= stack.size()) return false;
  // A churned run's return addresses are its own: its mappings' shift added.
  const uint64_t words[2] = {frame + 1 < stack.size() ? base + 16 * (frame + 1) : 0,
                             stack[frame] + (hypervisor ? 0 : cpu.user_offset)};
  if (bytes == 16) {
    std::memcpy(buffer, words, 16);
  } else if (bytes == 8) {
    // A 32-bit walk reads two 4-byte words.
    const uint32_t narrow[2] = {static_cast<uint32_t>(words[0]), static_cast<uint32_t>(words[1])};
    std::memcpy(buffer, narrow, 8);
  } else {
    return false;
  }
  return true;
}

}  // namespace hvprof::sim

namespace hvprof::sim {

int64_t SimMachine::TruthRowAt(DomainId domain_id, uint16_t vcpu, Mode mode, uint64_t ip) const {
  const Domain* domain = domain_id == kDomainIdle ? idle_.get() : FindDomain(domain_id);
  if (domain == nullptr || vcpu >= domain->vcpus) return -1;
  const Function* best = nullptr;
  for (const Function& function : domain->modes[static_cast<int>(mode)].functions) {
    if (ip >= function.start && ip < function.start + function.size &&
        (best == nullptr || function.start > best->start)) {
      best = &function;
    }
  }
  return best == nullptr ? -1 : static_cast<int64_t>(best->truth) + vcpu;
}

}  // namespace hvprof::sim
