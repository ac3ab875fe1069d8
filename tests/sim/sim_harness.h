// An in-process simulated host for tests: the machine, the engine on it, and a consumer that
// maps every ring it is given and drains them between runs, deterministically.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/agent/ring_reader.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "hvpmu/engine.h"
#include "hvpmu/pmu_drivers.h"
#include "hvpmu/timer_source.h"
#include "hvprof/sim/machine.h"
#include "hvprof/sim/scenario.h"

namespace hvprof::testing {

inline constexpr const char* kXenSyms = "/usr/lib/debug/boot/xen-syms-4.17-amd64";
inline constexpr const char* kXenMap = "/usr/lib/debug/boot/xen-syms-4.17-amd64.map";
inline constexpr const char* kLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
inline constexpr const char* kLibz = "/usr/lib/x86_64-linux-gnu/libz.so.1";

// A scenario that runs on any machine with hvprof's dependencies installed: xen-syms as the
// hypervisor, its .map as every guest kernel's System.map, and libc and libz as user code.
// dom0 (pv, 2 vCPUs), dom1 (pv, 2), dom2 (hvm, 2), dom3 (pv32, 1).
nlohmann::json TestScenario(const std::string& pmu = "intel-arch-v4", uint64_t seed = 7);

struct SampleSeen {
  hvpmu::DomainId owner;  // whose region the ring is in
  hvpmu::ring::SampleRecord record;
};

class SimHost {
 public:
  // `run_seed`: the run's randomness apart from the scenario's (hvprof-hv --seed).
  static std::unique_ptr<SimHost> Create(const nlohmann::json& scenario, std::optional<uint64_t> run_seed = {});

  hvpmu::ErrorCode Op(hvpmu::DomainId caller, uint32_t op, void* arg, uint32_t size) {
    return engine->DoOp(caller, op, arg, size);
  }

  struct CounterSpec {
    uint32_t index;
    uint16_t event;
    uint8_t unit_mask;
    uint64_t count;
    bool kernel = true;
    bool user = true;
  };
  // The whole Xenoprof sequence: dom0 primary and active, `active` guests activated by
  // themselves, `passive` guests listed passive, the counters set up, and start.
  // `sched`: dom0 also asks for scheduling rings, whose records go to `sched`.
  void StartProfiling(const std::vector<hvpmu::DomainId>& active,
                      const std::vector<hvpmu::DomainId>& passive,
                      const std::vector<CounterSpec>& counters, uint32_t capacity = 16384, bool with_sched = false);
  void StopProfiling();

  // Runs the machine for `ns`, draining every ring each `chunk_ns`.
  void Run(uint64_t ns, uint64_t chunk_ns = 5'000'000);
  void Drain();

  hvprof::sim::Scenario scenario;
  symbolizer::Symbolizer symbolizer;
  std::unique_ptr<hvprof::sim::SimMachine> machine;
  std::unique_ptr<hvpmu::PmuDrivers> drivers;
  std::unique_ptr<hvpmu::TimerSource> timer;  // when the CPU has no PMU
  std::unique_ptr<hvpmu::Engine> engine;
  std::vector<SampleSeen> samples;
  std::vector<hvpmu::ring::SchedRecord> sched;  // in drain order: per pCPU in time order
  uint64_t malformed = 0;

 private:
  struct MappedRing {
    hvpmu::DomainId owner;
    std::shared_ptr<ScopedMmap> mapping;
    agent::RingReader reader;
  };
  void MapRegion(hvpmu::DomainId consumer, hvpmu::DomainId owner, const hvpmu::BufferV2& buffer);
  std::vector<MappedRing> rings_;
};

}  // namespace hvprof::testing
