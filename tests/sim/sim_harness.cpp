#include "sim_harness.h"

#include <sys/mman.h>

#include <catch2/catch.hpp>

namespace hvprof::testing {

using namespace hvpmu;
namespace sim = hvprof::sim;

nlohmann::json TestScenario(const std::string& pmu, uint64_t seed) {
  using Json = nlohmann::json;
  auto kernel = Json{{"system_map", kXenMap}};
  auto domain = [&](int id, const char* name, const char* type, int vcpus, int pid,
                    const char* lib, double load) {
    return Json{
        {"id", id}, {"name", name}, {"type", type}, {"vcpus", vcpus}, {"load", load},
        {"kernel", kernel},
        {"processes", Json::array({Json{{"pid", pid}, {"comm", std::string(name) + "-app"},
                                        {"mappings", Json::array({Json{{"path", lib},
                                                                       {"start", "0x7f0000000000"}}})}}})},
        {"workload",
         {{"user", {{"share", 50}, {"auto", {{"count", 25}, {"zipf", 1.0}, {"process", pid}, {"image", lib}}}}},
          {"kernel", {{"share", 35}, {"auto", {{"count", 25}, {"zipf", 0.8}}}}},
          {"hypervisor",
           {{"share", 15},
            {"functions", Json::array({Json{{"name", "do_mmu_update"}, {"weight", 3}, {"ipc", 0.7}},
                                       Json{{"name", "pv_hypercall"}, {"weight", 2}, {"ipc", 1.5}},
                                       Json{{"name", "do_event_channel_op"}, {"weight", 1}}})}}}}}};
  };
  return Json{
      {"hvprof_scenario", 1},
      {"name", "test"},
      {"seed", seed},
      {"machine", {{"cpus", 4}, {"pmu", pmu}, {"mhz", 2000}, {"slice_us", 1000}, {"burst_cycles", 20000}}},
      {"run", {{"speed", "max"}}},
      {"hypervisor",
       {{"image", kXenSyms},
        {"idle", {{"halted", 0.5},
                  {"functions", Json::array({Json{{"name", "mwait_idle"}, {"weight", 3}},
                                             Json{{"name", "idle_loop"}, {"weight", 1}}})}}}}},
      {"domains", Json::array({domain(0, "dom0", "pv", 2, 100, kLibc, 0.6),
                               domain(1, "guest1", "pv", 2, 200, kLibz, 0.9),
                               domain(2, "guest2", "hvm", 2, 300, kLibc, 0.7),
                               domain(3, "guest3", "pv32", 1, 400, kLibc, 0.5)})}};
}

std::unique_ptr<SimHost> SimHost::Create(const nlohmann::json& json, std::optional<uint64_t> run_seed) {
  auto host = std::make_unique<SimHost>();
  auto scenario = sim::ParseScenario(json.dump(), "test scenario");
  if (!scenario) FAIL(scenario.error().message());
  host->scenario = std::move(scenario).value();
  host->scenario.run_seed = run_seed;
  auto machine = sim::SimMachine::Create(host->scenario, host->symbolizer);
  if (!machine) FAIL(machine.error().message());
  host->machine = std::move(machine).value();
  host->drivers = std::make_unique<PmuDrivers>(host->machine->platform());
  hvpmu::PmuDriver* driver = host->drivers->Detect();
  if (driver == nullptr) {  // a CPU without counters (pmu "none"): the engine's timer, as hvprof-hv
    host->timer = std::make_unique<hvpmu::TimerSource>(host->machine->platform());
    driver = host->timer.get();
  }
  host->engine = std::make_unique<Engine>(host->machine->platform(), driver);
  host->machine->AttachEngine(host->engine.get());
  return host;
}

void SimHost::MapRegion(DomainId consumer, DomainId owner, const BufferV2& buffer) {
  uint64_t bytes = 0;
  auto fd = machine->platform().RegionFd(buffer.region_handle, consumer, &bytes);
  REQUIRE(fd.has_value());
  auto mapping = ScopedMmap::MapShared(fd.value(), bytes, PROT_READ | PROT_WRITE);
  REQUIRE(mapping.has_value());
  auto shared = std::make_shared<ScopedMmap>(std::move(mapping).value());
  for (uint32_t i = 0; i < buffer.nbuf; ++i) {
    auto* base = static_cast<uint8_t*>(shared->data()) + i * buffer.ring_bytes;
    auto reader = agent::RingReader::Attach(base, buffer.ring_bytes, buffer.capacity);
    REQUIRE(reader.has_value());
    rings_.push_back({owner, shared, std::move(reader).value()});
  }
}

void SimHost::StartProfiling(const std::vector<DomainId>& active,
                             const std::vector<DomainId>& passive,
                             const std::vector<CounterSpec>& counters, uint32_t capacity, bool with_sched) {
  auto must = [](ErrorCode error) { REQUIRE(std::string(ErrorName(error)) == "Ok"); };
  auto buffer_arg = [&](DomainId domain) {
    BufferV2 buffer{};
    buffer.struct_size = sizeof buffer;
    buffer.abi_version = kAbiVersion;
    buffer.domain = domain;
    buffer.capacity = capacity;
    return buffer;
  };
  legacy::Init init{};
  must(Op(0, legacy::kOpInit, &init, sizeof init));
  BufferV2 own = buffer_arg(0);
  if (with_sched) own.flags = kBufferSchedRings;
  must(Op(0, kOpGetBufferV2, &own, sizeof own));
  if (with_sched) REQUIRE(own.nbuf_sched == machine->platform().NumCpus());
  MapRegion(0, 0, own);
  legacy::DomainIdArg zero = 0;
  must(Op(0, legacy::kOpSetActive, &zero, sizeof zero));
  for (DomainId domain : active) {
    legacy::DomainIdArg id = domain;
    must(Op(0, legacy::kOpSetActive, &id, sizeof id));
  }
  for (DomainId domain : passive) {
    BufferV2 buffer = buffer_arg(domain);
    must(Op(0, kOpSetPassiveV2, &buffer, sizeof buffer));
    MapRegion(0, domain, buffer);
  }
  must(Op(0, legacy::kOpReserveCounters, nullptr, 0));
  for (const CounterSpec& spec : counters) {
    legacy::Counter counter{};
    counter.ind = spec.index;
    counter.count = spec.count;
    counter.enabled = 1;
    counter.event = spec.event;
    counter.unit_mask = spec.unit_mask;
    counter.kernel = spec.kernel;
    counter.user = spec.user;
    must(Op(0, legacy::kOpCounter, &counter, sizeof counter));
  }
  must(Op(0, legacy::kOpSetupEvents, nullptr, 0));
  must(Op(0, legacy::kOpEnableVirq, nullptr, 0));
  for (DomainId domain : active) {
    must(Op(domain, legacy::kOpInit, &init, sizeof init));
    BufferV2 buffer = buffer_arg(domain);
    must(Op(domain, kOpGetBufferV2, &buffer, sizeof buffer));
    MapRegion(domain, domain, buffer);
    must(Op(domain, legacy::kOpEnableVirq, nullptr, 0));
  }
  must(Op(0, legacy::kOpStart, nullptr, 0));
}

void SimHost::StopProfiling() {
  REQUIRE(std::string(ErrorName(Op(0, legacy::kOpStop, nullptr, 0))) == "Ok");
  Drain();
}

void SimHost::Drain() {
  for (MappedRing& ring : rings_) {
    auto stats = ring.reader.DrainRecords(
        [&](const ring::SampleRecord& record, std::span<const uint64_t>) { samples.push_back({ring.owner, record}); },
        [&](const ring::SchedRecord& record) { sched.push_back(record); });
    malformed += stats.malformed;
  }
}

void SimHost::Run(uint64_t ns, uint64_t chunk_ns) {
  for (uint64_t done = 0; done < ns; done += chunk_ns) {
    machine->RunFor(std::min(chunk_ns, ns - done));
    Drain();
  }
}

}  // namespace hvprof::testing
