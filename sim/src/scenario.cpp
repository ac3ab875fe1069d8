#include "hvprof/sim/scenario.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/json_fields.h"

namespace hvprof::sim {

using hvpmu::DomainType;
using hvpmu::kMaxCpus;
using hvpmu::kMaxDomainId;
using hvpmu::kMaxVcpus;

using hvprof::Error;
using hvprof::ErrorKind;
using hvprof::MakeError;
using hvprof::Result;
using Json = nlohmann::json;

std::string_view PmuModelName(PmuModelKind kind) {
  switch (kind) {
    case PmuModelKind::kIntelArchV4: return "intel-arch-v4";
    case PmuModelKind::kAmdZen: return "amd-zen";
    case PmuModelKind::kAmdZen4: return "amd-zen4";
    case PmuModelKind::kNone: return "none";
  }
  return "?";
}

const DomainSpec* Scenario::FindDomain(uint16_t id) const {
  for (const DomainSpec& domain : domains) {
    if (domain.id == id) return &domain;
  }
  return nullptr;
}

namespace {

using json::Node;

Result<Rates> ParseRates(const Node& node, Rates rates) {
  if (!node.value().is_object()) return node.Fail("must be an object");
  struct Field {
    const char* name;
    double* target;
    double high;
  } fields[] = {{"ipc", &rates.ipc, 8.0},
                {"branches_per_kilo", &rates.branches_per_kilo, 1000.0},
                {"branch_misses_per_kilo", &rates.branch_misses_per_kilo, 1000.0},
                {"cache_refs_per_kilo", &rates.cache_refs_per_kilo, 1000.0},
                {"cache_misses_per_kilo", &rates.cache_misses_per_kilo, 1000.0}};
  for (const Field& field : fields) {
    if (!node.Has(field.name)) continue;
    HVPROF_TRY(value, node.Checked(field.name).Number(0.0, field.high));
    *field.target = value;
  }
  if (rates.ipc <= 0.0) return node.Fail("ipc must be above 0");
  if (rates.branch_misses_per_kilo > rates.branches_per_kilo) {
    return node.Fail("branch_misses_per_kilo ({}) exceeds branches_per_kilo ({})",
                     rates.branch_misses_per_kilo, rates.branches_per_kilo);
  }
  if (rates.cache_misses_per_kilo > rates.cache_refs_per_kilo) {
    return node.Fail("cache_misses_per_kilo ({}) exceeds cache_refs_per_kilo ({})",
                     rates.cache_misses_per_kilo, rates.cache_refs_per_kilo);
  }
  return rates;
}


// A user-mode function's process and image ("process": PID, "image": PATH).
Result<void> ParseUserPlace(const Node& node, uint32_t* process, std::string* image) {
  HVPROF_TRY(process_node, node.Member("process"));
  HVPROF_TRY(pid, process_node.Unsigned(1, 0x7FFFFFFF));
  *process = static_cast<uint32_t>(pid);
  HVPROF_TRY(image_node, node.Member("image"));
  HVPROF_TRY(path, image_node.String());
  *image = path;
  return hvprof::Ok();
}

Result<FunctionSpec> ParseFunction(const Node& node, Mode mode, const Rates& defaults) {
  FunctionSpec function;
  HVPROF_TRY(name, node.Member("name"));
  HVPROF_TRY(name_text, name.String());
  if (name_text.empty()) return name.Fail("must not be empty");
  function.name = name_text;
  if (node.Has("weight")) {
    HVPROF_TRY(weight, node.Checked("weight").Number(0.0, 1e9));
    if (weight <= 0.0) return node.Checked("weight").Fail("must be above 0");
    function.weight = weight;
  }
  if (node.Has("rates")) {
    HVPROF_TRY(rates, ParseRates(node.Checked("rates"), defaults));
    function.rates = rates;
  } else {
    // Rates may also be written inline, beside the name.
    bool inline_rates = false;
    for (const char* key : {"ipc", "branches_per_kilo", "branch_misses_per_kilo",
                            "cache_refs_per_kilo", "cache_misses_per_kilo"}) {
      inline_rates |= node.Has(key);
    }
    if (inline_rates) {
      HVPROF_TRY(rates, ParseRates(node, defaults));
      function.rates = rates;
    }
  }
  if (node.Has("stack")) {
    Node stack = node.Checked("stack");
    if (!stack.value().is_array()) return stack.Fail("must be a list of function names");
    HVPROF_TRY(callers, stack.Elements(kMaxCallers));
    for (const Node& caller : callers) {
      HVPROF_TRY(caller_name, caller.String());
      function.stack.push_back(caller_name);
    }
  }
  if (mode == Mode::kUser) HVPROF_TRYV(ParseUserPlace(node, &function.process, &function.image));
  return function;
}

Result<AutoPick> ParseAuto(const Node& node, Mode mode) {
  AutoPick pick;
  HVPROF_TRY(count, node.Member("count"));
  HVPROF_TRY(count_value, count.Unsigned(1, kMaxFunctions));
  pick.count = static_cast<uint32_t>(count_value);
  if (node.Has("zipf")) {
    HVPROF_TRY(zipf, node.Checked("zipf").Number(0.0, 4.0));
    pick.zipf = zipf;
  }
  if (mode == Mode::kUser) HVPROF_TRYV(ParseUserPlace(node, &pick.process, &pick.image));
  return pick;
}

Result<ModeWorkload> ParseModeWorkload(const Node& node, Mode mode) {
  ModeWorkload workload;
  if (!node.value().is_object()) return node.Fail("must be an object");
  HVPROF_TRY(share, node.Member("share"));
  HVPROF_TRY(share_value, share.Number(0.0, 100.0));
  workload.share = share_value;
  if (node.Has("rates")) {
    HVPROF_TRY(rates, ParseRates(node.Checked("rates"), Rates{}));
    workload.rates = rates;
  }
  if (node.Has("functions")) {
    Node functions = node.Checked("functions");
    if (!functions.value().is_array()) return functions.Fail("must be a list");
    HVPROF_TRY(entries, functions.Elements(kMaxFunctions));
    for (const Node& entry : entries) {
      HVPROF_TRY(function, ParseFunction(entry, mode, workload.rates));
      workload.functions.push_back(std::move(function));
    }
  }
  if (node.Has("auto")) {
    HVPROF_TRY(pick, ParseAuto(node.Checked("auto"), mode));
    workload.auto_pick = pick;
    if (workload.functions.size() + pick.count > kMaxFunctions) {
      return node.Fail("names {} functions and picks {} more; at most {} functions run in one mode",
                       workload.functions.size(), pick.count, kMaxFunctions);
    }
  }
  if (workload.share > 0.0 && workload.functions.empty() && !workload.auto_pick) {
    return node.Fail("has a share of {}% but no functions and no 'auto' pick", workload.share);
  }
  return workload;
}

Result<SymbolSource> ParseSymbolSource(const Node& node) {
  if (!node.value().is_object()) return node.Fail("must be an object");
  SymbolSource source;
  int kinds = 0;
  for (auto [key, kind] : {std::pair{"kallsyms", SymbolSourceKind::kKallsyms},
                           std::pair{"system_map", SymbolSourceKind::kSystemMap},
                           std::pair{"elf", SymbolSourceKind::kElf}}) {
    if (!node.Has(key)) continue;
    ++kinds;
    source.kind = kind;
    HVPROF_TRY(path, node.Checked(key).String());
    source.path = path;
  }
  if (kinds != 1) return node.Fail("needs exactly one of 'kallsyms', 'system_map' or 'elf'");
  if (node.Has("kaslr_offset")) {
    if (source.kind == SymbolSourceKind::kKallsyms) {
      return node.Checked("kaslr_offset").Fail("kallsyms already shows runtime addresses");
    }
    HVPROF_TRY(offset, node.Checked("kaslr_offset").Address());
    source.kaslr_offset = offset;
  }
  return source;
}

Result<KernelSpec> ParseKernel(const Node& node) {
  KernelSpec kernel;
  HVPROF_TRY(primary, ParseSymbolSource(node));
  kernel.primary = primary;
  if (node.Has("fallbacks")) {
    Node fallbacks = node.Checked("fallbacks");
    if (!fallbacks.value().is_array()) return fallbacks.Fail("must be a list");
    HVPROF_TRY(entries, fallbacks.Elements(kMaxKernelFallbacks));
    for (const Node& entry : entries) {
      HVPROF_TRY(source, ParseSymbolSource(entry));
      kernel.fallbacks.push_back(source);
    }
  }
  return kernel;
}

Result<ProcessSpec> ParseProcess(const Node& node) {
  ProcessSpec process;
  HVPROF_TRY(pid, node.Member("pid"));
  HVPROF_TRY(pid_value, pid.Unsigned(1, 0x7FFFFFFF));
  process.pid = static_cast<uint32_t>(pid_value);
  HVPROF_TRY(comm, node.Member("comm"));
  HVPROF_TRY(comm_text, comm.String());
  process.comm = comm_text;
  HVPROF_TRY(mappings, node.Member("mappings"));
  if (!mappings.value().is_array() || mappings.value().empty()) return mappings.Fail("must be a non-empty list");
  HVPROF_TRY(entries, mappings.Elements(kMaxMappings));
  std::map<uint64_t, size_t> starts;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Node& entry = entries[i];
    Mapping mapping;
    HVPROF_TRY(path, entry.Member("path"));
    HVPROF_TRY(path_text, path.String());
    mapping.path = path_text;
    HVPROF_TRY(start, entry.Member("start"));
    HVPROF_TRY(start_value, start.Address());
    if (start_value % 4096 != 0) return start.Fail("must be page aligned");
    if (start_value >= kMappingsEnd) {
      return start.Fail("{:#x} is outside the mappings' range: they lie below {:#x}, under the simulated "
                        "stacks and the kernels' and hypervisor's addresses",
                        start_value, kMappingsEnd);
    }
    // Two mappings at one address overlap whatever their images; the machine checks their
    // whole ranges once it has read the images (SimMachine::Create).
    if (auto [it, added] = starts.emplace(start_value, i); !added) {
      return entry.Fail("{} at {:#x} overlaps mappings[{}] ({}), which starts there too: give each mapping "
                        "its own address range",
                        mapping.path, start_value, it->second, process.mappings[it->second].path);
    }
    mapping.start = start_value;
    process.mappings.push_back(mapping);
  }
  if (node.Has("churn")) {
    const Node churn = node.Checked("churn");
    ChurnSpec spec;
    HVPROF_TRY(per_second, churn.Member("per_second"));
    HVPROF_TRY(rate, per_second.Number(0.0, 100000.0));
    HVPROF_TRY(lifetime, churn.Member("lifetime_ms"));
    HVPROF_TRY(lifetime_value, lifetime.Number(0.0, 3600000.0));
    HVPROF_TRY(pids, churn.Member("pids"));
    HVPROF_TRY(pids_value, pids.Unsigned(1, 1u << 22));
    if (rate <= 0.0) return per_second.Fail("must be above 0");
    spec.per_second = rate;
    spec.lifetime_ms = lifetime_value;
    spec.pids = static_cast<uint32_t>(pids_value);
    // At every instant one run is alive (the next starts before the last ends), and a pid is
    // free again (its run ended) when its turn comes back.
    const double alive = rate * lifetime_value / 1000.0;
    if (alive < 1.0) {
      return lifetime.Fail("{} ms at {} runs a second leaves moments with no run alive: make lifetime_ms at "
                           "least {} (1000 / per_second)",
                           lifetime_value, rate, 1000.0 / rate);
    }
    if (alive > static_cast<double>(kMaxChurnAlive)) {
      return lifetime.Fail("{} ms at {} runs a second keeps {} runs alive at once; at most {} are: shorten "
                           "lifetime_ms or lower per_second",
                           lifetime_value, rate, alive, kMaxChurnAlive);
    }
    if (static_cast<double>(spec.pids) < std::ceil(alive) + 1) {
      return pids.Fail("{} pids are too few for {} runs alive at once: give at least {}", spec.pids, alive,
                       std::ceil(alive) + 1);
    }
    if (uint64_t{process.pid} + spec.pids - 1 > 0x7FFFFFFF) {
      return pids.Fail("pid {} and {} more pass 2147483647, the highest pid", process.pid, spec.pids - 1);
    }
    process.churn = spec;
  }
  return process;
}

Result<DomainSpec> ParseDomain(const Node& node) {
  DomainSpec domain;
  HVPROF_TRY(id, node.Member("id"));
  HVPROF_TRY(id_value, id.Unsigned(0, kMaxDomainId));
  domain.id = static_cast<uint16_t>(id_value);
  HVPROF_TRY(name, node.Member("name"));
  HVPROF_TRY(name_text, name.String());
  if (name_text.empty() || name_text.find_first_of(" \t/,") != std::string::npos) {
    return name.Fail("'{}' must be non-empty with no spaces, slashes or commas", name_text);
  }
  domain.name = name_text;
  HVPROF_TRY(type, node.Member("type"));
  HVPROF_TRY(type_text, type.String());
  if (type_text == "pv") domain.type = DomainType::kPv64;
  else if (type_text == "pv32") domain.type = DomainType::kPv32;
  else if (type_text == "hvm") domain.type = DomainType::kHvm;
  else return type.Fail("unknown domain type '{}'; use pv, pv32 or hvm", type_text);
  HVPROF_TRY(vcpus, node.Member("vcpus"));
  HVPROF_TRY(vcpus_value, vcpus.Unsigned(1, kMaxVcpus));
  domain.vcpus = static_cast<uint16_t>(vcpus_value);
  if (node.Has("weight")) {
    HVPROF_TRY(weight, node.Checked("weight").Unsigned(1, 65535));
    domain.weight = static_cast<uint32_t>(weight);
  }
  if (node.Has("load")) {
    HVPROF_TRY(load, node.Checked("load").Number(0.0, 1.0));
    if (load <= 0.0) return node.Checked("load").Fail("must be above 0");
    domain.load = load;
  }
  if (node.Has("socket_uid")) {
    HVPROF_TRY(uid, node.Checked("socket_uid").Unsigned(0, 0xFFFFFFFE));
    domain.socket_uid = static_cast<uint32_t>(uid);
  }
  HVPROF_TRY(kernel, node.Member("kernel"));
  HVPROF_TRY(kernel_spec, ParseKernel(kernel));
  domain.kernel = kernel_spec;

  if (node.Has("processes")) {
    Node processes = node.Checked("processes");
    if (!processes.value().is_array()) return processes.Fail("must be a list");
    HVPROF_TRY(entries, processes.Elements(kMaxProcesses));
    // Each process's pids (a churned program's range): no two processes share one.
    std::map<uint32_t, std::pair<uint32_t, size_t>> pids;  // first pid -> (last pid, index)
    for (size_t i = 0; i < entries.size(); ++i) {
      HVPROF_TRY(process, ParseProcess(entries[i]));
      const uint32_t last = process.pid + (process.churn ? process.churn->pids - 1 : 0);
      auto next = pids.lower_bound(process.pid);
      const bool clash_next = next != pids.end() && next->first <= last;
      const bool clash_prev = next != pids.begin() && std::prev(next)->second.first >= process.pid;
      if (clash_next || clash_prev) {
        const auto& other = clash_next ? *next : *std::prev(next);
        auto range = [](uint32_t first, uint32_t to) {
          return first == to ? fmt::format("pid {}", first) : fmt::format("pids {}-{}", first, to);
        };
        return entries[i].Fail("{} clashes with processes[{}] ({}): give each process its own pids",
                               range(process.pid, last), other.second.second, range(other.first, other.second.first));
      }
      pids.emplace(process.pid, std::pair{last, i});
      domain.processes.push_back(std::move(process));
    }
  }

  HVPROF_TRY(workload, node.Member("workload"));
  double total = 0.0;
  for (Mode mode : {Mode::kUser, Mode::kKernel, Mode::kHypervisor}) {
    const std::string key(sample_mode::Name(mode));
    if (!workload.Has(key)) continue;
    HVPROF_TRY(mode_workload, ParseModeWorkload(workload.Checked(key), mode));
    total += mode_workload.share;
    domain.modes[static_cast<int>(mode)] = std::move(mode_workload);
  }
  if (std::fabs(total - 100.0) > 1e-6) {
    return workload.Fail("mode shares add up to {}, not 100", total);
  }
  // User functions must name a process of this domain, and an image mapped in it.
  ModeWorkload& user = domain.modes[static_cast<int>(Mode::kUser)];
  auto check_user = [&](uint32_t pid, const std::string& image, const std::string& where) -> Result<void> {
    for (const ProcessSpec& process : domain.processes) {
      if (process.pid != pid) continue;
      for (const Mapping& mapping : process.mappings) {
        if (mapping.path == image) return hvprof::Ok();
      }
      return Error(ErrorKind::kInvalidArgument,
                   fmt::format("{}: image {} is not mapped in process {} ({})", where, image, pid,
                               process.comm));
    }
    return Error(ErrorKind::kInvalidArgument,
                 fmt::format("{}: process {} is not in this domain's process list", where, pid));
  };
  for (size_t i = 0; i < user.functions.size(); ++i) {
    HVPROF_TRYV(check_user(user.functions[i].process, user.functions[i].image,
                           fmt::format("{}.workload.user.functions[{}]", node.path(), i)));
  }
  if (user.auto_pick) {
    HVPROF_TRYV(check_user(user.auto_pick->process, user.auto_pick->image,
                           fmt::format("{}.workload.user.auto", node.path())));
  }
  return domain;
}

Result<Scenario> Parse(const Json& root, std::string_view origin) {
  const Node top = Node::Root(root, "", ErrorKind::kInvalidArgument);
  Scenario scenario;
  scenario.origin = origin;
  if (!root.is_object()) return top.Fail("the file must hold a JSON object");
  HVPROF_TRY(version, top.Member("hvprof_scenario"));
  HVPROF_TRY(version_value, version.Unsigned(1, 1000));
  if (version_value != 1) return version.Fail("version {} is not supported; this hvprof reads version 1", version_value);
  HVPROF_TRY(name, top.Member("name"));
  HVPROF_TRY(name_text, name.String());
  scenario.name = name_text;
  if (top.Has("description")) {
    HVPROF_TRY(description, top.Checked("description").String());
    scenario.description = description;
  }
  if (top.Has("seed")) {
    HVPROF_TRY(seed, top.Checked("seed").Unsigned(0, UINT64_MAX));
    scenario.seed = seed;
  }

  HVPROF_TRY(machine, top.Member("machine"));
  HVPROF_TRY(cpus, machine.Member("cpus"));
  HVPROF_TRY(cpus_value, cpus.Unsigned(1, kMaxCpus));
  scenario.machine.cpus = static_cast<uint32_t>(cpus_value);
  HVPROF_TRY(pmu, machine.Member("pmu"));
  HVPROF_TRY(pmu_text, pmu.String());
  if (pmu_text == "intel-arch-v4") scenario.machine.pmu = PmuModelKind::kIntelArchV4;
  else if (pmu_text == "amd-zen") scenario.machine.pmu = PmuModelKind::kAmdZen;
  else if (pmu_text == "amd-zen4") scenario.machine.pmu = PmuModelKind::kAmdZen4;
  else if (pmu_text == "none") scenario.machine.pmu = PmuModelKind::kNone;
  else return pmu.Fail("unknown PMU model '{}'; use intel-arch-v4, amd-zen, amd-zen4 or none", pmu_text);
  if (machine.Has("mhz")) {
    HVPROF_TRY(mhz, machine.Checked("mhz").Unsigned(100, 10000));
    scenario.machine.mhz = static_cast<uint32_t>(mhz);
  }
  if (machine.Has("slice_us")) {
    HVPROF_TRY(slice, machine.Checked("slice_us").Unsigned(100, 100000));
    scenario.machine.slice_us = static_cast<uint32_t>(slice);
  }
  if (machine.Has("burst_cycles")) {
    HVPROF_TRY(burst, machine.Checked("burst_cycles").Unsigned(1000, 1000000000));
    scenario.machine.burst_cycles = static_cast<uint32_t>(burst);
  }

  if (top.Has("run")) {
    Node run = top.Checked("run");
    if (run.Has("speed")) {
      Node speed = run.Checked("speed");
      if (speed.value().is_string() && speed.value().get<std::string>() == "max") {
        scenario.run.speed = Speed::kMax;
      } else if (speed.value().is_string() && speed.value().get<std::string>() == "realtime") {
        scenario.run.speed = Speed::kRealtime;
      } else {
        HVPROF_TRY(factor, speed.Number(0.001, 1000.0));
        scenario.run.speed = Speed::kRealtime;
        scenario.run.factor = factor;
      }
    }
    if (run.Has("duration_ms")) {
      HVPROF_TRY(duration, run.Checked("duration_ms").Unsigned(0, 86400000));
      scenario.run.duration_ns = duration * 1000000;
    }
  }

  HVPROF_TRY(hypervisor, top.Member("hypervisor"));
  HVPROF_TRY(image, hypervisor.Member("image"));
  HVPROF_TRY(image_path, image.String());
  scenario.hypervisor.image = image_path;
  HVPROF_TRY(idle, hypervisor.Member("idle"));
  if (idle.Has("halted")) {
    HVPROF_TRY(halted, idle.Checked("halted").Number(0.0, 1.0));
    scenario.hypervisor.idle_halted = halted;
  }
  HVPROF_TRY(idle_functions, idle.Member("functions"));
  if (!idle_functions.value().is_array() || idle_functions.value().empty()) {
    return idle_functions.Fail("must list at least one hypervisor function for the idle loop");
  }
  HVPROF_TRY(idle_entries, idle_functions.Elements(kMaxFunctions));
  for (const Node& entry : idle_entries) {
    HVPROF_TRY(function, ParseFunction(entry, Mode::kHypervisor, Rates{}));
    scenario.hypervisor.idle_functions.push_back(function);
  }

  HVPROF_TRY(domains, top.Member("domains"));
  if (!domains.value().is_array() || domains.value().empty()) return domains.Fail("must be a non-empty list");
  HVPROF_TRY(domain_entries, domains.Elements(kMaxScenarioDomains));
  std::map<uint16_t, size_t> ids;
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < domain_entries.size(); ++i) {
    HVPROF_TRY(domain, ParseDomain(domain_entries[i]));
    if (auto [it, added] = ids.emplace(domain.id, i); !added) {
      return domain_entries[i].Fail("duplicate domain id {} (also domains[{}])", domain.id, it->second);
    }
    if (auto [it, added] = names.emplace(domain.name, i); !added) {
      return domain_entries[i].Fail("duplicate domain name '{}' (also domains[{}])", domain.name, it->second);
    }
    scenario.domains.push_back(std::move(domain));
  }
  if (ids.count(0) == 0) return domains.Fail("needs domain 0 (dom0, the hardware domain)");
  return scenario;
}

}  // namespace

Result<Scenario> ParseScenario(std::string_view json, std::string_view origin) {
  Json root = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false,
                          /*ignore_comments=*/true);
  if (root.is_discarded()) {
    // Parse again with exceptions to get the position of the syntax error.
    try {
      Json again = Json::parse(json.begin(), json.end(), nullptr, true, true);
      (void)again;
    } catch (const Json::exception& error) {  // parse_error, or out_of_range for a huge number
      return MakeError(ErrorKind::kInvalidArgument, "{}: not valid JSON: {}", origin, error.what());
    }
    return MakeError(ErrorKind::kInvalidArgument, "{}: not valid JSON", origin);
  }
  try {
    auto scenario = Parse(root, origin);
    if (!scenario) return scenario.error().WithContext(origin);
    return scenario;
  } catch (const Json::exception& error) {
    return MakeError(ErrorKind::kInvalidArgument, "{}: {}", origin, error.what());
  }
}

Result<Scenario> LoadScenario(const std::string& path) {
  auto text = hvprof::ReadFileToString(path);
  if (!text) return text.error().WithContext("cannot load scenario");
  return ParseScenario(text.value(), path);
}

Result<std::string> FindScenario(const std::string& name_or_path, const std::vector<std::string>& directories) {
  namespace fs = std::filesystem;
  if (name_or_path.empty()) return MakeError(ErrorKind::kInvalidArgument, "--scenario: empty");
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json")) return name_or_path;
  std::error_code ec;
  for (const std::string& directory : directories) {
    const std::string candidate = directory + "/" + name_or_path + ".json";
    if (fs::is_regular_file(candidate, ec)) return candidate;
  }
  std::string searched;
  std::set<std::string> found;
  for (const std::string& directory : directories) {
    searched += (searched.empty() ? "" : ", ") + directory;
    for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".json") found.insert(it->path().stem().string());
    }
    ec.clear();
  }
  std::string names;
  for (const std::string& name : found) names += (names.empty() ? "" : ", ") + name;
  return MakeError(ErrorKind::kNotFound,
                   "no scenario named '{}' (looked in {}; {}); give a scenario file's path, or a directory of them in "
                   "HVPROF_SCENARIO_PATH",
                   name_or_path, searched.empty() ? "no directory" : searched,
                   names.empty() ? "none found there" : "there are: " + names);
}

std::vector<std::string> ScenarioDirectories(const std::string& executable_dir) {
  std::vector<std::string> directories;
  if (const char* path = std::getenv("HVPROF_SCENARIO_PATH"); path != nullptr) {
    std::string_view rest = path;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      if (colon != 0) directories.emplace_back(rest.substr(0, colon));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  directories.push_back(std::filesystem::path(executable_dir).parent_path().string() + "/share/hvprof/scenarios");
  return directories;
}

}  // namespace hvprof::sim
