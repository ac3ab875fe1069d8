// The dom0 agent's hot path, drain plus store, on one thread, as issue 5 asks to measure it:
//   DrainAndStore/D   read every published sample of 8 default-size v2 rings (16384 slots)
//                     and append it to a session's samples.hvs on disk; D is the call-chain
//                     depth (0 or 8 frames per sample). Chunks are written as they fill and
//                     flushed (not synced) after each pass, as the agent does every second.
//   DrainAndStoreSched read every scheduling record of 8 default-size scheduling rings (one per
//                     pCPU, issue 21) and append it to the session's sched.hvs: a vCPU's
//                     switch out and another's in, and now and then a wake-up.
// The rings are refilled between passes outside the timed region. Samples follow a skewed
// distribution over a few thousand addresses per domain, like a real profile, so the delta
// encoding sees realistic input. bench/agent/run.sh measures the whole agent end to end.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "hvprof/agent/ring_reader.h"
#include "hvprof/agent/session_writer.h"
#include "hvpmu/ring_writer.h"

using namespace hvpmu;

namespace {

constexpr uint32_t kRings = 8;
constexpr uint32_t kCapacity = 16384;  // the default ring size

struct SampleSource {
  explicit SampleSource(uint32_t ring) : random(ring + 1), domain(static_cast<uint16_t>(ring / 2)) {
    // A few thousand hot addresses per ring, Zipf-like weights.
    std::uniform_int_distribution<uint64_t> offset(0, 1u << 22);
    for (int i = 0; i < 4000; ++i) {
      const ring::Mode mode = i % 10 < 5 ? ring::Mode::kUser : i % 10 < 8 ? ring::Mode::kKernel : ring::Mode::kHypervisor;
      const uint64_t base = mode == ring::Mode::kUser     ? 0x7f0000000000
                            : mode == ring::Mode::kKernel ? 0xffffffff81000000
                                                          : 0xffff82d040200000;
      addresses.push_back({base + (offset(random) & ~uint64_t{3}), mode});
      weights.push_back(1.0 / (i + 1));
    }
    pick = std::discrete_distribution<size_t>(weights.begin(), weights.end());
  }
  SampleToWrite Next(uint32_t depth) {
    const auto& [ip, mode] = addresses[pick(random)];
    SampleToWrite sample{};
    sample.mode = mode;
    sample.domain = domain;
    sample.vcpu = 0;
    sample.pcpu = static_cast<uint16_t>(domain);
    sample.ip = ip;
    time_ns += 9000 + random() % 2000;
    sample.time_ns = time_ns;
    sample.period = 30000;
    if (random() % 64 == 0) pid = 1000 + static_cast<uint32_t>(random() % 8);
    sample.pid = sample.tid = mode == ring::Mode::kHypervisor ? ring::kNoPid : pid;
    for (uint32_t f = 0; f < depth; ++f) frames[f] = ip + 0x40 * (f + 1) + random() % 64;
    sample.frames = frames;
    sample.nframes = depth;
    sample.backtrace_group = depth != 0;
    return sample;
  }
  std::mt19937_64 random;
  uint16_t domain;
  std::vector<std::pair<uint64_t, ring::Mode>> addresses;
  std::vector<double> weights;
  std::discrete_distribution<size_t> pick;
  uint64_t time_ns = 0;
  uint32_t pid = 1000;
  uint64_t frames[16] = {};
};

// Times one pass: `drain` (returning how much it drained) and the flush after it, as the agent
// flushes every second. False, with the benchmark skipped, when the flush failed.
bool TimePass(benchmark::State& state, hvprof::agent::SessionWriter& session, uint64_t* total,
              const std::function<uint64_t()>& drain) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t drained = drain();
  const auto flushed = session.Flush();
  const auto stop = std::chrono::steady_clock::now();
  if (!flushed) {
    state.SkipWithError(flushed.error().message().c_str());
    return false;
  }
  state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
  *total += drained;
  return true;
}

// kRings default-size rings (vCPU rings, two for each of four domains; or with `sched` one
// scheduling ring per pCPU), a reader of each, and a session in a directory of its own, which
// goes with them.
struct BenchRings {
  std::filesystem::path directory;
  std::vector<std::vector<uint64_t>> memory;
  std::vector<RingWriter> writers;
  std::vector<hvprof::agent::RingReader> readers;
  std::optional<hvprof::agent::SessionWriter> session;
  ~BenchRings() {
    session.reset();  // it writes its last metadata on the way out
    if (!directory.empty()) std::filesystem::remove_all(directory);
  }
};

// False, with the benchmark skipped, when a ring or the session cannot be set up.
bool OpenRings(benchmark::State& state, bool sched, BenchRings* rings) {
  rings->directory = std::filesystem::temp_directory_path() /
                     ((sched ? "hvprof-agent-bench-sched-" : "hvprof-agent-bench-") + std::to_string(::getpid()));
  std::filesystem::remove_all(rings->directory);
  rings->memory.assign(kRings, std::vector<uint64_t>(ring::RingBytes(kCapacity) / 8));
  rings->writers = std::vector<RingWriter>(kRings);
  for (uint32_t r = 0; r < kRings; ++r) {
    if (sched) {
      rings->writers[r].AttachV2(rings->memory[r].data(), kCapacity, kCapacity / 2, 0, static_cast<uint16_t>(r),
                                 ring::RingKind::kSched, true);
    } else {
      rings->writers[r].AttachV2(rings->memory[r].data(), kCapacity, kCapacity / 2, static_cast<DomainId>(r / 2),
                                 static_cast<uint16_t>(r % 2), ring::RingKind::kVcpu);
    }
    auto reader = hvprof::agent::RingReader::Attach(rings->memory[r].data(), ring::RingBytes(kCapacity), kCapacity);
    if (!reader) {
      state.SkipWithError(reader.error().message().c_str());
      return false;
    }
    rings->readers.push_back(std::move(reader).value());
  }
  hvprof::store::SessionMetadata metadata;
  metadata.platform = "bench";
  auto opened = hvprof::agent::SessionWriter::Open(rings->directory.string(), metadata);
  if (!opened) {
    state.SkipWithError(opened.error().message().c_str());
    return false;
  }
  rings->session.emplace(std::move(opened).value());
  return true;
}

void DrainAndStore(benchmark::State& state) {
  const auto depth = static_cast<uint32_t>(state.range(0));
  BenchRings rings;
  if (!OpenRings(state, false, &rings)) return;
  std::vector<RingWriter>& writers = rings.writers;
  std::vector<hvprof::agent::RingReader>& readers = rings.readers;
  hvprof::agent::SessionWriter& session = *rings.session;
  std::vector<SampleSource> sources;
  for (uint32_t r = 0; r < kRings; ++r) sources.emplace_back(r);

  uint64_t total = 0;
  for (auto _ : state) {
    for (uint32_t r = 0; r < kRings; ++r) {
      bool notify = false;
      while (writers[r].Write(sources[r].Next(depth), &notify) == RingWriter::Result::kWritten) {
      }
    }
    const bool timed = TimePass(state, session, &total, [&] {
      uint64_t drained = 0;
      for (auto& reader : readers) {
        drained += reader.Drain([&](const ring::SampleRecord& record, std::span<const uint64_t> frames) {
          session.Add(record, frames);
        }).samples;
      }
      return drained;
    });
    if (!timed) break;
  }
  state.SetItemsProcessed(static_cast<int64_t>(total));
  state.counters["bytes_per_sample"] =
      total == 0 ? 0.0 : static_cast<double>(session.stats().bytes) / static_cast<double>(total);
}

void DrainAndStoreSched(benchmark::State& state) {
  BenchRings rings;
  if (!OpenRings(state, true, &rings)) return;
  std::vector<RingWriter>& writers = rings.writers;
  std::vector<hvprof::agent::RingReader>& readers = rings.readers;
  hvprof::agent::SessionWriter& session = *rings.session;
  std::mt19937_64 random(7);
  uint64_t time_ns = 0;
  uint64_t total = 0;
  for (auto _ : state) {
    for (uint32_t r = 0; r < kRings; ++r) {
      bool notify = false;
      for (;;) {
        ring::SchedRecord record{};
        const uint64_t draw = random();
        const bool wakeup = draw % 8 == 0;
        record.type = static_cast<uint8_t>(wakeup ? ring::SchedType::kWakeup : ring::SchedType::kRunstate);
        record.old_state = static_cast<uint8_t>(wakeup ? ring::Runstate::kBlocked : ring::Runstate::kRunning);
        record.new_state = static_cast<uint8_t>(ring::Runstate::kRunnable);
        time_ns += 20000 + draw % 5000;
        record.time_ns = time_ns;
        record.domain = static_cast<uint16_t>(draw >> 8) % 16;
        record.vcpu = static_cast<uint16_t>(draw >> 16) % 4;
        record.pid = record.tid = record.other_pid = record.other_tid = ring::kNoPid;
        record.from_pcpu = record.to_pcpu = ring::kUnknownPcpu;
        if (writers[r].WriteSched(record, static_cast<uint16_t>(r), &notify) != RingWriter::Result::kWritten) break;
      }
    }
    const bool timed = TimePass(state, session, &total, [&] {
      uint64_t drained = 0;
      for (auto& reader : readers) {
        drained += reader.DrainRecords([](const ring::SampleRecord&, std::span<const uint64_t>) {},
                                       [&](const ring::SchedRecord& record) { session.AddSched(record); })
                       .sched;
      }
      return drained;
    });
    if (!timed) break;
  }
  state.SetItemsProcessed(static_cast<int64_t>(total));
}

}  // namespace

BENCHMARK(DrainAndStore)->Arg(0)->Arg(8)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

BENCHMARK(DrainAndStoreSched)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

BENCHMARK_MAIN();
