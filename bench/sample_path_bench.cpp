// The engine's sample path, one sample into a ring, for both ring formats.
//   RingWrite/*    RingWriter::Write alone (what the NMI handler spends in the ring)
//   RecordSample/* Engine::RecordSample: mode classification, routing, timestamp and the write
//   RecordSched    Engine::RecordSched: one scheduling record (a runstate change) into the
//                  primary's scheduling ring of the pCPU (issue 21, bench/sched/run.sh)
//   RecordSampleScale/CPUS/DOMAINS/VCPUS/BUSY/RUN
//                  RecordSample on a host of CPUS pCPUs and DOMAINS passive domains of VCPUS
//                  vCPUs each (issue 22's scale figure, bench/scale/run.sh). BUSY of the pCPUs
//                  take turns (0: all of them); each takes RUN samples in a row in the vCPU it
//                  runs (a scheduler's slice), then runs another. With BUSY 2 the vCPUs that
//                  run are 8 picked once among the host's, as many as the 2-pCPU host has:
//                  the engine's own cost on a big host. With every pCPU busy the samples go to
//                  every ring, and one core, standing in for every pCPU's own cache, pays a
//                  cold slot on most samples; RUN 1 (another ring every sample) is the worst.
// A consumer that keeps up is simulated by moving the tail after each sample, so the ring
// never fills. Run with --benchmark_repetitions=10 for the median the issue asks for.
#include <memory>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "hvpmu/engine.h"
#include "hvprof/fake/fake_platform.h"
#include "hvpmu/pmu_drivers.h"

using namespace hvpmu;
namespace fake = hvprof::fake;

namespace {

SampleToWrite Sample() {
  SampleToWrite sample{};
  sample.mode = ring::Mode::kKernel;
  sample.ip = 0xffffffff81000000;
  sample.period = 100000;
  sample.pid = ring::kNoPid;
  sample.tid = ring::kNoPid;
  return sample;
}

void RingWriteV2(benchmark::State& state) {
  const uint32_t capacity = 4096;
  std::vector<uint64_t> memory(ring::RingBytes(capacity) / 8);
  RingWriter writer;
  writer.AttachV2(memory.data(), capacity, capacity / 2, 1, 0, ring::RingKind::kVcpu);
  auto* header = reinterpret_cast<ring::RingHeader*>(memory.data());
  SampleToWrite sample = Sample();
  for (auto _ : state) {
    bool notify = false;
    sample.ip += 4;
    benchmark::DoNotOptimize(writer.Write(sample, &notify));
    ring::StoreRelease(&header->tail, ring::LoadRelaxed(&header->head));
  }
  state.SetItemsProcessed(state.iterations());
}

void RingWriteLegacy(benchmark::State& state) {
  const uint32_t size = 2048;
  std::vector<uint64_t> memory((legacy::kBufHeaderSize + size * 16) / 8);
  RingWriter writer;
  writer.AttachLegacy(memory.data(), size, size / 2, 0);
  auto* buf = reinterpret_cast<legacy::XenoprofBuf*>(memory.data());
  SampleToWrite sample = Sample();
  for (auto _ : state) {
    bool notify = false;
    sample.ip += 4;
    benchmark::DoNotOptimize(writer.Write(sample, &notify));
    __atomic_store_n(&buf->event_tail, __atomic_load_n(&buf->event_head, __ATOMIC_RELAXED),
                     __ATOMIC_RELEASE);
  }
  state.SetItemsProcessed(state.iterations());
}

// A profiled dom1 (active) on a 2-CPU fake machine, rings in the requested format.
struct Setup {
  // `sched`: dom0 also takes the scheduling rings (v2 only); sched_base is pCPU 0's.
  explicit Setup(bool v2, bool sched = false) : platform(2, fake::IntelArchPerfmonModel()), drivers(platform) {
    sched_ = sched;
    platform.AddDomain(0, 2, DomainType::kPv64, true);
    platform.AddDomain(1, 2, DomainType::kPv64);
    engine = std::make_unique<Engine>(platform, drivers.Detect());
    legacy::Init init{};
    engine->DoOp(0, legacy::kOpInit, &init, sizeof init);
    const uint64_t own = GetBuffer(0, v2);
    if (sched) {
      sched_base = static_cast<uint8_t*>(platform.RegionBase(own)) + first_sched_ring_ * ring_bytes_;
    }
    for (DomainId d : {DomainId{0}, DomainId{1}}) {
      legacy::DomainIdArg id = d;
      engine->DoOp(0, legacy::kOpSetActive, &id, sizeof id);
    }
    engine->DoOp(0, legacy::kOpReserveCounters, nullptr, 0);
    legacy::Counter counter{};
    counter.count = 100000;
    counter.enabled = 1;
    counter.event = 0x3C;
    counter.kernel = counter.user = 1;
    engine->DoOp(0, legacy::kOpCounter, &counter, sizeof counter);
    engine->DoOp(0, legacy::kOpSetupEvents, nullptr, 0);
    engine->DoOp(0, legacy::kOpEnableVirq, nullptr, 0);
    engine->DoOp(1, legacy::kOpInit, &init, sizeof init);
    base = static_cast<uint8_t*>(platform.RegionBase(GetBuffer(1, v2)));
    engine->DoOp(1, legacy::kOpEnableVirq, nullptr, 0);
    if (engine->DoOp(0, legacy::kOpStart, nullptr, 0) != ErrorCode::kOk) std::abort();
  }
  uint64_t GetBuffer(DomainId domain, bool v2) {
    if (v2) {
      BufferV2 buffer{};
      buffer.struct_size = sizeof buffer;
      buffer.abi_version = kAbiVersion;
      buffer.capacity = 4096;
      if (domain == 0 && sched_) buffer.flags = kBufferSchedRings;
      engine->DoOp(domain, kOpGetBufferV2, &buffer, sizeof buffer);
      if (domain == 0 && sched_) {
        if (buffer.nbuf_sched == 0) std::abort();
        first_sched_ring_ = buffer.nbuf - buffer.nbuf_sched;
        ring_bytes_ = buffer.ring_bytes;
      }
      return buffer.region_handle;
    }
    legacy::GetBuffer buffer{};
    buffer.max_samples = 2048;
    engine->DoOp(domain, legacy::kOpGetBuffer, &buffer, sizeof buffer);
    return buffer.buf_gmaddr;
  }
  fake::FakePlatform platform;
  PmuDrivers drivers;
  std::unique_ptr<Engine> engine;
  uint8_t* base = nullptr;
  uint8_t* sched_base = nullptr;

 private:
  bool sched_ = false;
  uint32_t first_sched_ring_ = 0;
  uint64_t ring_bytes_ = 0;
};

InterruptedContext GuestKernel() {
  InterruptedContext context{};
  context.domain = 1;
  context.vcpu = 0;
  context.type = DomainType::kPv64;
  context.cpl = 3;
  context.pv_kernel_mode = true;
  context.ip = 0xffffffff81000000;
  context.pid = ring::kNoPid;
  context.tid = ring::kNoPid;
  return context;
}

void RecordSampleV2(benchmark::State& state) {
  Setup setup(true);
  auto* header = reinterpret_cast<ring::RingHeader*>(setup.base);
  InterruptedContext context = GuestKernel();
  for (auto _ : state) {
    context.ip += 4;
    setup.engine->RecordSample(0, context, 0, 100000);
    ring::StoreRelease(&header->tail, ring::LoadRelaxed(&header->head));
  }
  state.SetItemsProcessed(state.iterations());
}

void RecordSched(benchmark::State& state) {
  Setup setup(true, true);
  auto* header = reinterpret_cast<ring::RingHeader*>(setup.sched_base);
  ring::SchedRecord record{};
  record.type = static_cast<uint8_t>(ring::SchedType::kRunstate);
  record.old_state = static_cast<uint8_t>(ring::Runstate::kRunning);
  record.new_state = static_cast<uint8_t>(ring::Runstate::kRunnable);
  record.domain = 1;
  record.pid = record.tid = record.other_pid = record.other_tid = ring::kNoPid;
  for (auto _ : state) {
    record.time_ns += 1000;
    setup.engine->RecordSched(0, record);
    ring::StoreRelease(&header->tail, ring::LoadRelaxed(&header->head));
  }
  if (ring::LoadRelaxed(&header->sched_written) != static_cast<uint64_t>(state.iterations())) {
    state.SkipWithError("records went missing");
  }
  state.SetItemsProcessed(state.iterations());
}

void RecordSampleLegacy(benchmark::State& state) {
  Setup setup(false);
  auto* buf = reinterpret_cast<legacy::XenoprofBuf*>(setup.base);
  InterruptedContext context = GuestKernel();
  for (auto _ : state) {
    context.ip += 4;
    setup.engine->RecordSample(0, context, 0, 100000);
    __atomic_store_n(&buf->event_tail, __atomic_load_n(&buf->event_head, __ATOMIC_RELAXED),
                     __ATOMIC_RELEASE);
  }
  state.SetItemsProcessed(state.iterations());
}

// A host with a primary dom0 and `domains - 1` passive guests (all of `vcpus` vCPUs), v2 rings
// of `capacity` slots, profiling.
struct Host {
  Host(uint32_t cpus, uint32_t domains, uint16_t vcpus, uint32_t capacity)
      : platform(cpus, fake::IntelArchPerfmonModel()), drivers(platform) {
    for (uint32_t d = 0; d < domains; ++d) {
      platform.AddDomain(static_cast<DomainId>(d), vcpus, DomainType::kPv64, d == 0);
    }
    engine = std::make_unique<Engine>(platform, drivers.Detect());
    auto must = [](ErrorCode error, const char* what) {
      if (error != ErrorCode::kOk) {
        std::fprintf(stderr, "scale setup: %s: %s\n", what, ErrorName(error));
        std::abort();
      }
    };
    legacy::Init init{};
    must(engine->DoOp(0, legacy::kOpInit, &init, sizeof init), "init");
    BufferV2 own{};
    own.struct_size = sizeof own;
    own.abi_version = kAbiVersion;
    own.capacity = capacity;
    must(engine->DoOp(0, kOpGetBufferV2, &own, sizeof own), "get_buffer");
    Add(0, own);
    legacy::DomainIdArg zero = 0;
    must(engine->DoOp(0, legacy::kOpSetActive, &zero, sizeof zero), "set_active");
    for (uint32_t d = 1; d < domains; ++d) {
      BufferV2 buffer{};
      buffer.struct_size = sizeof buffer;
      buffer.abi_version = kAbiVersion;
      buffer.domain = static_cast<DomainId>(d);
      buffer.capacity = capacity;
      must(engine->DoOp(0, kOpSetPassiveV2, &buffer, sizeof buffer), "set_passive");
      Add(d, buffer);
    }
    must(engine->DoOp(0, legacy::kOpReserveCounters, nullptr, 0), "reserve");
    legacy::Counter counter{};
    counter.count = 100000;
    counter.enabled = 1;
    counter.event = 0x3C;
    counter.kernel = counter.user = 1;
    must(engine->DoOp(0, legacy::kOpCounter, &counter, sizeof counter), "counter");
    must(engine->DoOp(0, legacy::kOpSetupEvents, nullptr, 0), "setup_events");
    must(engine->DoOp(0, legacy::kOpEnableVirq, nullptr, 0), "enable_virq");
    must(engine->DoOp(0, legacy::kOpStart, nullptr, 0), "start");
  }
  void Add(uint32_t domain, const BufferV2& buffer) {
    auto* base = static_cast<uint8_t*>(platform.RegionBase(buffer.region_handle));
    for (uint32_t v = 0; v < buffer.nbuf_vcpu; ++v) {
      headers.push_back(reinterpret_cast<ring::RingHeader*>(base + v * buffer.ring_bytes));
    }
    first_ring.push_back(static_cast<uint32_t>(headers.size() - buffer.nbuf_vcpu));
    (void)domain;
  }
  fake::FakePlatform platform;
  PmuDrivers drivers;
  std::unique_ptr<Engine> engine;
  std::vector<ring::RingHeader*> headers;  // every vCPU ring, domain by domain
  std::vector<uint32_t> first_ring;        // per domain: its vCPU 0 in `headers`
};

void RecordSampleScale(benchmark::State& state) {
  const auto cpus = static_cast<uint32_t>(state.range(0));
  const auto domains = static_cast<uint32_t>(state.range(1));
  const auto vcpus = static_cast<uint16_t>(state.range(2));
  const auto busy = state.range(3) == 0 ? cpus : static_cast<uint32_t>(state.range(3));
  const auto run = static_cast<uint32_t>(state.range(4));
  Host host(cpus, domains, vcpus, 256);
  // The samples in the order PMIs arrive, precomputed: (cpu, domain, vcpu) triples.
  struct Pmi {
    uint32_t cpu;
    uint16_t domain;
    uint16_t vcpu;
  };
  std::vector<Pmi> order;
  std::mt19937 random(1);
  const uint32_t total_vcpus = domains * vcpus;
  std::vector<uint32_t> runnable;  // the vCPUs that run
  if (busy < cpus) {
    for (int i = 0; i < 8; ++i) runnable.push_back(random() % total_vcpus);
  } else {
    for (uint32_t v = 0; v < total_vcpus; ++v) runnable.push_back(v);
  }
  while (order.size() < (1u << 18)) {
    for (uint32_t c = 0; c < busy; ++c) {
      const uint32_t v = runnable[random() % runnable.size()];
      for (uint32_t k = 0; k < run; ++k) {
        order.push_back({c * (cpus / busy), static_cast<uint16_t>(v / vcpus), static_cast<uint16_t>(v % vcpus)});
      }
    }
  }
  order.resize(1u << 18);
  InterruptedContext context = GuestKernel();
  size_t next = 0;
  for (auto _ : state) {
    const Pmi& pmi = order[next];
    next = (next + 1) & (order.size() - 1);
    context.domain = pmi.domain;
    context.vcpu = pmi.vcpu;
    context.ip += 4;
    host.engine->RecordSample(pmi.cpu, context, 0, 100000);
    ring::RingHeader* header = host.headers[host.first_ring[pmi.domain] + pmi.vcpu];
    ring::StoreRelease(&header->tail, ring::LoadRelaxed(&header->head));
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["rings"] = static_cast<double>(host.headers.size());
}

}  // namespace

BENCHMARK(RecordSampleScale)
    ->ArgNames({"cpus", "domains", "vcpus", "busy", "run"})
    ->Args({2, 4, 2, 0, 32})
    ->Args({16, 32, 4, 2, 32})
    ->Args({64, 125, 4, 2, 32})
    ->Args({256, 500, 4, 2, 32})
    ->Args({16, 32, 4, 0, 32})
    ->Args({64, 125, 4, 0, 32})
    ->Args({256, 500, 4, 0, 32})
    ->Args({2, 4, 2, 0, 1})
    ->Args({256, 500, 4, 0, 1});
BENCHMARK(RingWriteV2);
BENCHMARK(RingWriteLegacy);
BENCHMARK(RecordSampleV2);
BENCHMARK(RecordSampleLegacy);
BENCHMARK(RecordSched);
BENCHMARK_MAIN();
