// Fuzzes the sim scenario parser and validator (docs/sim-scenarios.md) and the machine built from
// what it accepts: any text gives a scenario or an error naming the field, never a crash; and
// what the validator accepts holds what it promises (ids unique, counts in range, shares within
// 100, a user function's process listed in its domain), and the machine built from it (or its
// error) agrees with it: as many CPUs, and each domain with its vCPUs and type.
#include <cstdlib>
#include <set>
#include <string_view>

#include "hvprof/sim/machine.h"
#include "hvprof/sim/scenario.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace {

// An invariant broken: abort, which libFuzzer reports with the input.
void Require(bool holds) {
  if (!holds) std::abort();
}

void CheckScenario(const hvprof::sim::Scenario& scenario) {
  using hvprof::sample_mode::kCount;
  Require(scenario.machine.cpus >= 1);
  Require(!scenario.domains.empty());
  std::set<uint16_t> ids;
  for (const hvprof::sim::DomainSpec& domain : scenario.domains) {
    Require(ids.insert(domain.id).second);
    Require(domain.vcpus >= 1);
    Require(domain.load >= 0.0 && domain.load <= 1.0);
    double shares = 0;
    std::set<uint32_t> pids;
    for (const auto& process : domain.processes) Require(pids.insert(process.pid).second);
    for (int mode = 0; mode < kCount; ++mode) {
      const hvprof::sim::ModeWorkload& workload = domain.modes[mode];
      Require(workload.share >= 0.0);
      shares += workload.share;
      if (static_cast<hvprof::Mode>(mode) != hvprof::Mode::kUser) continue;
      for (const auto& function : workload.functions) Require(pids.count(function.process) == 1);
    }
    Require(shares <= 100.0 + 1e-9);
  }
}

void CheckMachine(const hvprof::sim::Scenario& scenario) {
  hvprof::symbolizer::Symbolizer symbolizer;
  auto machine = hvprof::sim::SimMachine::Create(scenario, symbolizer);
  if (!machine) {
    Require(!machine.error().message().empty());
    return;
  }
  hvprof::sim::SimPlatform& platform = machine.value()->platform();
  Require(platform.NumCpus() == scenario.machine.cpus);
  for (const hvprof::sim::DomainSpec& domain : scenario.domains) {
    hvpmu::DomainInfo info{};
    Require(platform.GetDomainInfo(domain.id, &info));
    Require(info.num_vcpus == domain.vcpus);
    Require(info.is_hardware_domain == (domain.id == 0));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto scenario = hvprof::sim::ParseScenario(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!scenario) {
    Require(!scenario.error().message().empty());
    return 0;
  }
  CheckScenario(scenario.value());
  CheckMachine(scenario.value());
  return 0;
}
