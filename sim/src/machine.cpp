// Building the simulated machine from its scenario: domains, images and their functions.
#include "machine_parts.h"

namespace hvprof::sim {

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

}  // namespace hvprof::sim
