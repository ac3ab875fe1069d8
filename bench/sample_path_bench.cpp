// The engine's sample path, one sample into a ring, for both ring formats.
//   RingWrite/*    RingWriter::Write alone (what the NMI handler spends in the ring)
//   RecordSample/* Engine::RecordSample: mode classification, routing, timestamp and the write
// A consumer that keeps up is simulated by moving the tail after each sample, so the ring
// never fills. Run with --benchmark_repetitions=10 for the median the issue asks for.
#include <memory>
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
  explicit Setup(bool v2) : platform(2, fake::IntelArchPerfmonModel()), drivers(platform) {
    platform.AddDomain(0, 2, DomainType::kPv64, true);
    platform.AddDomain(1, 2, DomainType::kPv64);
    engine = std::make_unique<Engine>(platform, drivers.Detect());
    legacy::Init init{};
    engine->DoOp(0, legacy::kOpInit, &init, sizeof init);
    GetBuffer(0, v2);
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
      engine->DoOp(domain, kOpGetBufferV2, &buffer, sizeof buffer);
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

}  // namespace

BENCHMARK(RingWriteV2);
BENCHMARK(RingWriteLegacy);
BENCHMARK(RecordSampleV2);
BENCHMARK(RecordSampleLegacy);
BENCHMARK_MAIN();
