// The simulated machine and hvprof-hv, as issue 4 asks to measure them:
//   SimSamplesPerSecond  samples the sim produces into rings at full speed, on the thread that
//                        runs the machine, while another thread drains every ring
//   HostedOpRoundTrip    one profiling operation (status) over hvprof-hv's socket
// The scenario is bench/data/throughput.json: 8 CPUs, 4 busy domains, cycles sampled every
// 6000 events (the event's minimum) so that samples dominate the work.
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/agent/ring_reader.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "hvprof/hv/daemon.h"
#include "hvpmu/pmu_drivers.h"
#include "hvprof/sim/machine.h"

using namespace hvpmu;
namespace sim = hvprof::sim;
namespace hv = hvprof::hv;

namespace {

const std::string kScenario = std::string(HVPROF_SOURCE_DIR) + "/bench/data/throughput.json";

void Must(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "benchmark setup failed: %s\n", what);
    std::abort();
  }
}

void SimSamplesPerSecond(benchmark::State& state) {
  auto scenario = sim::LoadScenario(kScenario);
  Must(scenario.has_value(), "scenario");
  hvprof::symbolizer::Symbolizer symbolizer;
  auto created = sim::SimMachine::Create(scenario.value(), symbolizer);
  Must(created.has_value(), "machine");
  auto machine = std::move(created).value();
  PmuDrivers drivers(machine->platform());
  Engine engine(machine->platform(), drivers.Detect());
  machine->AttachEngine(&engine);

  // The standard session: every domain profiled (1-3 active), v2 rings of 32k slots.
  auto op = [&](DomainId caller, uint32_t code, void* arg, uint32_t size) {
    const ErrorCode error = engine.DoOp(caller, code, arg, size);
    if (error != ErrorCode::kOk) std::fprintf(stderr, "op %#x by %u: %s\n", code, caller, ErrorName(error));
    Must(error == ErrorCode::kOk, "profiling op");
  };
  legacy::Init init{};
  op(0, legacy::kOpInit, &init, sizeof init);
  std::vector<BufferV2> buffers;
  auto get_buffer = [&](DomainId domain) {
    BufferV2 buffer{};
    buffer.struct_size = sizeof buffer;
    buffer.abi_version = kAbiVersion;
    buffer.capacity = 32768;
    op(domain, kOpGetBufferV2, &buffer, sizeof buffer);
    buffer.domain = domain;
    buffers.push_back(buffer);
  };
  get_buffer(0);
  for (legacy::DomainIdArg d = 0; d < 4; ++d) op(0, legacy::kOpSetActive, &d, sizeof d);
  op(0, legacy::kOpReserveCounters, nullptr, 0);
  legacy::Counter counter{};
  counter.count = 6000;
  counter.enabled = counter.kernel = counter.user = 1;
  counter.event = 0x3C;
  op(0, legacy::kOpCounter, &counter, sizeof counter);
  op(0, legacy::kOpSetupEvents, nullptr, 0);
  op(0, legacy::kOpEnableVirq, nullptr, 0);
  for (DomainId d = 1; d < 4; ++d) {
    op(d, legacy::kOpInit, &init, sizeof init);
    get_buffer(d);
    op(d, legacy::kOpEnableVirq, nullptr, 0);
  }
  op(0, legacy::kOpStart, nullptr, 0);

  // The consumer maps every region as an agent would, and drains in its own thread.
  std::vector<std::shared_ptr<hvprof::ScopedMmap>> mappings;
  std::vector<hvprof::agent::RingReader> readers;
  for (const BufferV2& buffer : buffers) {
    uint64_t bytes = 0;
    auto fd = machine->platform().RegionFd(buffer.region_handle, buffer.domain, &bytes);
    Must(fd.has_value(), "region fd");
    auto mapping = hvprof::ScopedMmap::MapShared(fd.value(), bytes, PROT_READ | PROT_WRITE);
    Must(mapping.has_value(), "mmap");
    mappings.push_back(std::make_shared<hvprof::ScopedMmap>(std::move(mapping).value()));
    for (uint32_t i = 0; i < buffer.nbuf; ++i) {
      auto reader = hvprof::agent::RingReader::Attach(
          static_cast<uint8_t*>(mappings.back()->data()) + i * buffer.ring_bytes, buffer.ring_bytes,
          buffer.capacity);
      Must(reader.has_value(), "ring");
      readers.push_back(std::move(reader).value());
    }
  }
  std::atomic<bool> done{false};
  std::atomic<uint64_t> drained{0};
  std::thread consumer([&] {
    uint64_t count = 0;
    while (!done.load(std::memory_order_acquire)) {
      for (auto& reader : readers) {
        count += reader.Drain([](const ring::SampleRecord&, std::span<const uint64_t>) {}).samples;
      }
    }
    for (auto& reader : readers) {
      count += reader.Drain([](const ring::SampleRecord&, std::span<const uint64_t>) {}).samples;
    }
    drained = count;
  });

  uint64_t pmis_before = machine->pmis_delivered();
  for (auto _ : state) machine->RunFor(10'000'000);  // 10 ms of 8 CPUs per iteration
  const uint64_t produced = machine->pmis_delivered() - pmis_before;
  done = true;
  consumer.join();

  Status status{};
  status.struct_size = sizeof status;
  status.abi_version = kAbiVersion;
  engine.DoOp(0, kOpStatus, &status, sizeof status);
  state.SetItemsProcessed(static_cast<int64_t>(produced));
  state.counters["samples_per_s"] = benchmark::Counter(static_cast<double>(produced), benchmark::Counter::kIsRate);
  state.counters["lost_ring_full"] = static_cast<double>(status.lost[0]);
  state.counters["drained"] = static_cast<double>(drained.load());
}

// hvprof-hv serving the throughput scenario from a thread, and one domain's link to it.
class HostedServer {
 public:
  HostedServer(const std::string& run_dir_name, DomainId domain) {
    const std::string run_dir = std::filesystem::temp_directory_path() / run_dir_name;
    hv::DaemonOptions options;
    options.scenario_path = kScenario;
    options.run_dir = run_dir;
    options.speed = sim::Speed::kMax;
    auto daemon = hv::Daemon::Create(options);
    Must(daemon.has_value(), "daemon");
    daemon_ = std::move(daemon).value();
    server_ = std::thread([this] { (void)daemon_->Run(); });
    auto link = hvprof::agent::ConnectHosted(hv::DomainSocketPath(run_dir, domain));
    Must(link.has_value(), "connect");
    link_ = std::move(link).value();
  }
  ~HostedServer() {
    link_.reset();
    daemon_->Stop();
    server_.join();
  }
  hvprof::agent::HypervisorLink& link() { return *link_; }

 private:
  std::unique_ptr<hv::Daemon> daemon_;
  std::thread server_;
  std::unique_ptr<hvprof::agent::HypervisorLink> link_;
};

void HostedOpRoundTrip(benchmark::State& state) {
  HostedServer server("hvprof-bench-run", 0);
  auto status = std::make_unique<Status>();
  for (auto _ : state) {
    std::memset(status.get(), 0, sizeof *status);
    status->struct_size = sizeof(Status);
    status->abi_version = kAbiVersion;
    benchmark::DoNotOptimize(hvprof::agent::RunOp(server.link(), kOpStatus, status.get()));
  }
  state.counters["status_bytes"] = sizeof(Status);
}

void HostedSmallOpRoundTrip(benchmark::State& state) {
  HostedServer server("hvprof-bench-run2", 1);
  legacy::Init init{};
  for (auto _ : state) {
    benchmark::DoNotOptimize(hvprof::agent::RunOp(server.link(), legacy::kOpInit, &init));
  }
}

}  // namespace

BENCHMARK(SimSamplesPerSecond)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(HostedSmallOpRoundTrip)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(HostedOpRoundTrip)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_MAIN();
