// The rings, producer and consumer together: ordering, wrap, full, exact accounting, hostile
// indices, and a two-thread stress run.
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "hvpmu/abi/ring.h"
#include "hvpmu/ring_writer.h"
#include "hvprof/agent/agent_daemon.h"
#include "hvprof/agent/ring_reader.h"

namespace ring = hvpmu::ring;
namespace legacy = hvpmu::legacy;
using hvpmu::RingWriter;
using hvpmu::SampleToWrite;
using hvprof::agent::LegacyRingReader;
using hvprof::agent::LegacySample;
using hvprof::agent::RingReader;

namespace {

// Exactly-sized, zeroed memory, so ASan catches any write past the ring.
struct Memory {
  explicit Memory(size_t size) : bytes(size), data(new uint8_t[size]()) {}
  size_t bytes;
  std::unique_ptr<uint8_t[]> data;
};

SampleToWrite MakeSample(uint64_t ip, const uint64_t* frames = nullptr, uint32_t nframes = 0,
                         ring::Mode mode = ring::Mode::kKernel) {
  SampleToWrite sample{};
  sample.mode = mode;
  sample.event = 1;
  sample.pcpu = 3;
  sample.domain = 7;
  sample.vcpu = 2;
  sample.ip = ip;
  sample.time_ns = ip * 10;
  sample.period = 100000;
  sample.pid = 42;
  sample.tid = 43;
  sample.frames = frames;
  sample.nframes = nframes;
  sample.backtrace_group = frames != nullptr;
  return sample;
}

struct Received {
  uint64_t ip;
  std::vector<uint64_t> frames;
};

std::vector<Received> DrainAll(RingReader& reader, hvprof::agent::DrainStats* stats = nullptr) {
  std::vector<Received> out;
  auto result = reader.Drain([&](const ring::SampleRecord& record, std::span<const uint64_t> f) {
    out.push_back({record.ip, {f.begin(), f.end()}});
  });
  if (stats != nullptr) *stats = result;
  return out;
}

struct V2Ring {
  explicit V2Ring(uint32_t capacity, uint32_t watermark = 0)
      : memory(ring::RingBytes(capacity)) {
    writer.AttachV2(memory.data.get(), capacity, watermark == 0 ? capacity / 2 : watermark, 7, 2,
                    ring::RingKind::kVcpu);
    auto attached = RingReader::Attach(memory.data.get(), memory.bytes, capacity);
    REQUIRE(attached.has_value());
    reader.emplace(std::move(attached).value());
  }
  ring::RingHeader* header() { return reinterpret_cast<ring::RingHeader*>(memory.data.get()); }
  Memory memory;
  RingWriter writer;
  std::optional<RingReader> reader;
};

}  // namespace

TEST_CASE("v2 ring carries every field of a sample", "[ring]") {
  V2Ring r(64);
  bool notify = false;
  REQUIRE(r.writer.Write(MakeSample(0xffff82d040201234), &notify) == RingWriter::Result::kWritten);
  ring::SampleRecord seen{};
  auto stats = r.reader->Drain([&](const ring::SampleRecord& record, std::span<const uint64_t>) {
    seen = record;
  });
  CHECK(stats.samples == 1);
  CHECK(stats.malformed == 0);
  CHECK(seen.kind == static_cast<uint8_t>(ring::RecordKind::kSample));
  CHECK(seen.ip == 0xffff82d040201234);
  CHECK(seen.time_ns == 0xffff82d040201234 * 10);
  CHECK(seen.mode == static_cast<uint8_t>(ring::Mode::kKernel));
  CHECK(seen.event == 1);
  CHECK(seen.pcpu == 3);
  CHECK(seen.domain == 7);
  CHECK(seen.vcpu == 2);
  CHECK(seen.period == 100000);
  CHECK(seen.pid == 42);
  CHECK(seen.tid == 43);
  CHECK(r.header()->samples[static_cast<int>(ring::Mode::kKernel)] == 1);
  CHECK(r.header()->tail == r.header()->head);
}

TEST_CASE("v2 ring wraps without splitting backtrace groups", "[ring]") {
  V2Ring r(64);
  std::mt19937_64 random(1);
  uint64_t next_ip = 1;
  uint64_t expected_ip = 1;
  for (int round = 0; round < 2000; ++round) {
    const int burst = static_cast<int>(random() % 5) + 1;
    std::vector<std::vector<uint64_t>> written;
    for (int i = 0; i < burst; ++i) {
      std::vector<uint64_t> frames(random() % 30);
      for (auto& frame : frames) frame = random();
      bool notify = false;
      auto result = r.writer.Write(MakeSample(next_ip, frames.data(), frames.size()), &notify);
      REQUIRE(result == RingWriter::Result::kWritten);
      written.push_back(frames);
      ++next_ip;
    }
    const uint64_t head_before_drain = r.header()->head;
    hvprof::agent::DrainStats stats;
    auto got = DrainAll(*r.reader, &stats);
    REQUIRE(stats.malformed == 0);
    REQUIRE(got.size() == written.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].ip == expected_ip++);
      CHECK(got[i].frames == written[i]);
    }
    CHECK(r.header()->tail == head_before_drain);
  }
  // 2000 rounds through 64 slots: the array wrapped many times, and padding was needed.
  CHECK(r.header()->head > 64 * 100);
  CHECK(r.header()->lost[static_cast<int>(ring::LossReason::kRingFull)] == 0);
}

TEST_CASE("v2 ring full: produced = consumed + lost, exactly", "[ring]") {
  V2Ring r(64);
  std::mt19937_64 random(7);
  uint64_t produced = 0;
  uint64_t consumed = 0;
  uint64_t lost = 0;
  for (int step = 0; step < 20000; ++step) {
    if (random() % 3 != 0) {
      std::vector<uint64_t> frames(random() % 12, 0x1234);
      bool notify = false;
      ++produced;
      auto result = r.writer.Write(MakeSample(produced, frames.data(), frames.size()), &notify);
      if (result == RingWriter::Result::kFull) ++lost;
      else REQUIRE(result == RingWriter::Result::kWritten);
    } else {
      consumed += r.reader->Drain([](const auto&, auto) {}, random() % 40).samples;
    }
  }
  consumed += DrainAll(*r.reader).size();
  CHECK(lost > 0);
  CHECK(produced == consumed + lost);
  CHECK(r.header()->lost[static_cast<int>(ring::LossReason::kRingFull)] == lost);
  CHECK(r.writer.stats().lost[static_cast<int>(ring::LossReason::kRingFull)] == lost);
  uint64_t samples = 0;
  for (uint64_t count : r.header()->samples) samples += count;
  CHECK(samples == consumed);
}

TEST_CASE("v2 ring refuses a consumer's impossible tail and writes nothing", "[ring][security]") {
  V2Ring r(64);
  bool notify = false;
  for (uint64_t i = 0; i < 10; ++i) r.writer.Write(MakeSample(i), &notify);
  const uint64_t head = r.header()->head;

  // Ahead of the producer, or wildly so.
  uint64_t refused = 0;
  for (uint64_t garbage : {head + 1, uint64_t{0xFFFFFFFFFFFFFFFF}, head + (uint64_t{1} << 40)}) {
    r.header()->tail = garbage;
    CHECK(r.writer.Write(MakeSample(99), &notify) == RingWriter::Result::kCorruptIndex);
    ++refused;
  }
  CHECK(r.header()->head == head);

  // Behind by more than a ring's worth.
  r.header()->tail = head;
  for (uint64_t i = 0; i < 200; ++i) {
    r.writer.Write(MakeSample(i), &notify);
    r.header()->tail = r.header()->head;  // a consumer that keeps up
  }
  const uint64_t head_after = r.header()->head;
  REQUIRE(head_after > 64);
  r.header()->tail = 0;
  CHECK(r.writer.Write(MakeSample(1), &notify) == RingWriter::Result::kCorruptIndex);
  ++refused;
  CHECK(r.header()->head == head_after);
  CHECK(r.header()->lost[static_cast<int>(ring::LossReason::kCorruptIndex)] == refused);

  // A consumer that comes back to its senses gets samples again.
  r.header()->tail = r.header()->head;
  CHECK(r.writer.Write(MakeSample(5), &notify) == RingWriter::Result::kWritten);
}

TEST_CASE("v2 ring ignores a head scribbled by the consumer", "[ring][security]") {
  V2Ring r(64);
  bool notify = false;
  r.writer.Write(MakeSample(1), &notify);
  r.header()->head = 1000000;  // the producer keeps its own copy and never reads this
  REQUIRE(r.writer.Write(MakeSample(2), &notify) == RingWriter::Result::kWritten);
  CHECK(r.header()->head == 2);
}

TEST_CASE("v2 reader survives a corrupted ring", "[ring][security]") {
  V2Ring r(64);
  bool notify = false;
  for (uint64_t i = 0; i < 20; ++i) {
    uint64_t frames[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    r.writer.Write(MakeSample(i, frames, 9), &notify);
  }
  std::mt19937 random(3);
  uint8_t* slots = r.memory.data.get() + ring::kHeaderSize;
  for (int i = 0; i < 200; ++i) slots[random() % (64 * ring::kRecordSize)] = random();
  hvprof::agent::DrainStats stats;
  DrainAll(*r.reader, &stats);
  CHECK(r.header()->tail == r.header()->head);  // it always makes progress
  // A producer index that cannot be right makes the reader resynchronise, not read garbage.
  r.header()->head = r.header()->tail + 1000;
  auto bad = r.reader->Drain([](const auto&, auto) { FAIL("no sample expected"); });
  CHECK(bad.malformed == 1);
}

TEST_CASE("v2 reader counts a sample of a mode no engine writes as malformed, not as the hypervisor's",
          "[ring][security]") {
  V2Ring r(64);
  bool notify = false;
  for (uint64_t i = 0; i < 3; ++i) r.writer.Write(MakeSample(i), &notify);
  // The second record's mode byte scribbled over by the consumer's side.
  ring::SampleRecord second;
  uint8_t* slot = r.memory.data.get() + ring::kHeaderSize + ring::kRecordSize;
  std::memcpy(&second, slot, sizeof second);
  second.mode = ring::kModeCount;
  std::memcpy(slot, &second, sizeof second);
  std::vector<uint8_t> modes;
  const auto stats = r.reader->Drain([&](const ring::SampleRecord& sample, auto) { modes.push_back(sample.mode); });
  CHECK(stats.samples == 2);
  CHECK(stats.malformed == 1);
  CHECK(modes == std::vector<uint8_t>{hvprof::sample_mode::kKernel, hvprof::sample_mode::kKernel});
  CHECK(r.header()->tail == r.header()->head);
}

TEST_CASE("v2 ring notifies once per watermark crossing", "[ring]") {
  V2Ring r(64, 8);
  int notifications = 0;
  for (uint64_t i = 0; i < 20; ++i) {
    bool notify = false;
    r.writer.Write(MakeSample(i), &notify);
    notifications += notify;
  }
  CHECK(notifications == 1);  // the consumer has not moved since it was told
  DrainAll(*r.reader);
  for (uint64_t i = 0; i < 7; ++i) {
    bool notify = false;
    r.writer.Write(MakeSample(i), &notify);
    CHECK_FALSE(notify);  // below the watermark
  }
  bool notify = false;
  r.writer.Write(MakeSample(8), &notify);
  CHECK(notify);
  CHECK(r.header()->notifications == 2);
}

TEST_CASE("10M records across threads: no loss, no duplicates, in order", "[ring][stress]") {
  constexpr uint64_t kRecords = 10'000'000;
  V2Ring r(4096);
  std::atomic<bool> done{false};
  uint64_t full_retries = 0;
  std::thread producer([&] {
    uint64_t frames[3] = {7, 8, 9};
    for (uint64_t i = 1; i <= kRecords; ++i) {
      bool notify = false;
      const bool with_frames = (i % 16) == 0;
      for (;;) {
        auto result = r.writer.Write(MakeSample(i, with_frames ? frames : nullptr,
                                                with_frames ? 3 : 0), &notify);
        if (result == RingWriter::Result::kWritten) break;
        REQUIRE(result == RingWriter::Result::kFull);
        ++full_retries;
        std::this_thread::yield();
      }
    }
    done.store(true, std::memory_order_release);
  });
  uint64_t expected = 1;
  uint64_t bad_order = 0;
  uint64_t bad_frames = 0;
  uint64_t malformed = 0;
  auto on_sample = [&](const ring::SampleRecord& record, std::span<const uint64_t> frames) {
    bad_order += record.ip != expected;
    const bool with_frames = (record.ip % 16) == 0;
    bad_frames += frames.size() != (with_frames ? 3u : 0u);
    expected = record.ip + 1;
  };
  while (!done.load(std::memory_order_acquire)) {
    malformed += r.reader->Drain(on_sample).malformed;
  }
  malformed += r.reader->Drain(on_sample).malformed;
  producer.join();
  CHECK(expected == kRecords + 1);
  CHECK(bad_order == 0);
  CHECK(bad_frames == 0);
  CHECK(malformed == 0);
  // Every refused attempt was counted as a loss, and nothing else was.
  CHECK(r.header()->lost[static_cast<int>(ring::LossReason::kRingFull)] == full_retries);
}

// ---- legacy rings

namespace {

struct LegacyRing {
  explicit LegacyRing(uint32_t size)
      : memory(legacy::kBufHeaderSize + size * sizeof(legacy::EventLog)) {
    writer.AttachLegacy(memory.data.get(), size, size / 2, 5);
    auto attached = LegacyRingReader::Attach(memory.data.get(), memory.bytes, size);
    REQUIRE(attached.has_value());
    reader.emplace(std::move(attached).value());
  }
  legacy::XenoprofBuf* buf() { return reinterpret_cast<legacy::XenoprofBuf*>(memory.data.get()); }
  Memory memory;
  RingWriter writer;
  std::optional<LegacyRingReader> reader;
};

std::vector<Received> DrainLegacy(LegacyRingReader& reader, bool flush) {
  std::vector<Received> out;
  auto collect = [&](const LegacySample& sample) {
    out.push_back({sample.ip, {sample.frames.begin(), sample.frames.end()}});
  };
  reader.Drain(collect);
  if (flush) reader.Flush(collect);
  return out;
}

}  // namespace

TEST_CASE("legacy ring: one empty slot, wrap, counters", "[ring][legacy]") {
  LegacyRing r(16);
  CHECK(r.buf()->event_size == 16);
  CHECK(r.buf()->vcpu_id == 5);
  bool notify = false;
  int written = 0;
  for (uint64_t i = 0; i < 20; ++i) {
    written += r.writer.Write(MakeSample(100 + i, nullptr, 0, ring::Mode::kUser), &notify) ==
               RingWriter::Result::kWritten;
  }
  CHECK(written == 15);  // size - 1
  CHECK(r.buf()->lost_samples == 5);
  CHECK(r.buf()->user_samples == 15);
  auto got = DrainLegacy(*r.reader, false);
  REQUIRE(got.size() == 15);
  CHECK(got.front().ip == 100);
  CHECK(got.back().ip == 114);
  // Wrap many times with a modest fill.
  uint64_t expected = 1000;
  for (uint64_t i = 0; i < 500; ++i) {
    r.writer.Write(MakeSample(1000 + i, nullptr, 0, ring::Mode::kHypervisor), &notify);
    if (i % 7 == 6) {
      for (const auto& sample : DrainLegacy(*r.reader, false)) CHECK(sample.ip == expected++);
    }
  }
  for (const auto& sample : DrainLegacy(*r.reader, false)) CHECK(sample.ip == expected++);
  CHECK(expected == 1500);
  CHECK(r.buf()->xen_samples == 500);
}

TEST_CASE("legacy ring: escape groups carry backtraces", "[ring][legacy]") {
  LegacyRing r(64);
  bool notify = false;
  uint64_t frames[3] = {0x10, 0x20, 0x30};
  r.writer.Write(MakeSample(0xA, frames, 3), &notify);
  r.writer.Write(MakeSample(0xB, frames, 1), &notify);
  // ESC + sample + 3 frames, then ESC + sample + 1 frame.
  CHECK(r.buf()->event_head == 5 + 3);
  const auto* log = reinterpret_cast<const legacy::EventLog*>(r.memory.data.get() + 48);
  CHECK(log[0].eip == legacy::kEscapeCode);
  CHECK(log[0].event == legacy::kTraceBegin);
  CHECK(log[1].eip == 0xA);
  CHECK(log[2].eip == 0x10);
  CHECK(log[2].event == 0);
  auto got = DrainLegacy(*r.reader, true);
  REQUIRE(got.size() == 2);
  CHECK(got[0].frames == std::vector<uint64_t>{0x10, 0x20, 0x30});
  CHECK(got[1].frames == std::vector<uint64_t>{0x10});
  CHECK(r.buf()->kernel_samples == 2);  // frames and escapes are not samples
}

TEST_CASE("legacy ring: hostile tail is refused and counted", "[ring][legacy][security]") {
  LegacyRing r(16);
  bool notify = false;
  r.writer.Write(MakeSample(1), &notify);
  for (uint32_t garbage : {16u, 17u, 0xFFFFFFFFu}) {
    r.buf()->event_tail = garbage;
    CHECK(r.writer.Write(MakeSample(2), &notify) == RingWriter::Result::kCorruptIndex);
  }
  CHECK(r.writer.stats().lost[static_cast<int>(ring::LossReason::kCorruptIndex)] == 3);
  CHECK(r.buf()->lost_samples == 0);  // as in Xen, corrupt indices are not "lost samples"
  r.buf()->event_head = 9999;  // ignored: the producer keeps its own head
  r.buf()->event_tail = 0;
  CHECK(r.writer.Write(MakeSample(3), &notify) == RingWriter::Result::kWritten);
  CHECK(r.buf()->event_head == 2);
}

TEST_CASE("legacy reader: pending across the wrap, an impossible head, and resync after Xen zeroes the indices",
          "[ring][legacy][security]") {
  LegacyRing r(16);
  bool notify = false;
  for (uint64_t i = 0; i < 10; ++i) r.writer.Write(MakeSample(i), &notify);
  CHECK(r.reader->Pending() == 10);
  CHECK(DrainLegacy(*r.reader, false).size() == 10);
  for (uint64_t i = 0; i < 10; ++i) r.writer.Write(MakeSample(100 + i), &notify);
  CHECK(r.buf()->event_head == 4);  // wrapped
  CHECK(r.reader->Pending() == 10);
  CHECK(DrainLegacy(*r.reader, false).size() == 10);
  CHECK(r.buf()->event_tail == 4);

  // A head outside the ring: nothing is read, the tail stays, and the drain says so.
  r.buf()->event_head = 16;
  CHECK(r.reader->Pending() == 0);
  const hvprof::agent::DrainStats bad = r.reader->Drain([](const LegacySample&) { FAIL("no sample expected"); });
  CHECK(bad.malformed == 1);
  CHECK(r.buf()->event_tail == 4);

  // enable_virq zeroes both indices behind the reader's back; after a resync it reads from 0.
  auto* log = reinterpret_cast<legacy::EventLog*>(r.memory.data.get() + legacy::kBufHeaderSize);
  log[0] = legacy::EventLog{0x77, 1, 0, {}};
  r.buf()->event_tail = 0;
  r.buf()->event_head = 1;
  r.reader->Resync();
  const auto got = DrainLegacy(*r.reader, false);
  REQUIRE(got.size() == 1);
  CHECK(got[0].ip == 0x77);
}

// ---- scheduling rings (version 3)

namespace {

struct SchedRing {
  explicit SchedRing(uint32_t capacity) : memory(ring::RingBytes(capacity)) {
    writer.AttachV2(memory.data.get(), capacity, capacity / 2, 0, 1, ring::RingKind::kSched, true);
    auto attached = RingReader::Attach(memory.data.get(), memory.bytes, capacity);
    REQUIRE(attached.has_value());
    reader.emplace(std::move(attached).value());
  }
  ring::RingHeader* header() { return reinterpret_cast<ring::RingHeader*>(memory.data.get()); }
  uint8_t* slot(uint64_t index) {
    return memory.data.get() + ring::kHeaderSize + (index & (header()->capacity - 1)) * ring::kRecordSize;
  }
  std::vector<ring::SchedRecord> Drain(hvprof::agent::DrainStats* stats = nullptr, uint64_t max = UINT64_MAX) {
    std::vector<ring::SchedRecord> out;
    auto result = reader->DrainRecords([](const ring::SampleRecord&, std::span<const uint64_t>) { FAIL("a sample"); },
                                       [&](const ring::SchedRecord& record) { out.push_back(record); }, max);
    if (stats != nullptr) *stats = result;
    return out;
  }
  Memory memory;
  RingWriter writer;
  std::optional<RingReader> reader;
};

ring::SchedRecord Runstate(uint64_t time_ns, uint16_t domain, uint16_t vcpu, ring::Runstate from, ring::Runstate to) {
  ring::SchedRecord record{};
  record.type = static_cast<uint8_t>(ring::SchedType::kRunstate);
  record.old_state = static_cast<uint8_t>(from);
  record.new_state = static_cast<uint8_t>(to);
  record.time_ns = time_ns;
  record.domain = domain;
  record.vcpu = vcpu;
  record.pid = record.tid = record.other_pid = record.other_tid = ring::kNoPid;
  record.from_pcpu = record.to_pcpu = ring::kUnknownPcpu;
  return record;
}

}  // namespace

TEST_CASE("a scheduling ring is version 3 and carries every field of a record, sample rings stay version 2",
          "[ring][sched]") {
  SchedRing r(64);
  CHECK(r.header()->version == ring::kVersionSched);
  CHECK(r.header()->flags == ring::kRingHasSched);
  CHECK(r.header()->ring_kind == static_cast<uint16_t>(ring::RingKind::kSched));
  CHECK(r.reader->sched());
  V2Ring samples(64);
  CHECK(samples.header()->version == ring::kVersion);
  CHECK(samples.header()->flags == 0);
  CHECK_FALSE(samples.reader->sched());

  ring::SchedRecord wake = Runstate(12345, 3, 1, ring::Runstate::kBlocked, ring::Runstate::kRunnable);
  wake.type = static_cast<uint8_t>(ring::SchedType::kWakeup);
  wake.flags = ring::kSchedOtherValid;
  wake.other_domain = 4;
  wake.other_vcpu = 2;
  wake.to_pcpu = 9;
  bool notify = false;
  REQUIRE(r.writer.WriteSched(wake, 5, &notify) == RingWriter::Result::kWritten);
  hvprof::agent::DrainStats stats;
  auto got = r.Drain(&stats);
  REQUIRE(got.size() == 1);
  CHECK(stats.sched == 1);
  CHECK(stats.samples == 0);
  CHECK(stats.malformed == 0);
  const ring::SchedRecord& seen = got[0];
  CHECK(seen.kind == static_cast<uint8_t>(ring::RecordKind::kSched));
  CHECK(seen.type == static_cast<uint8_t>(ring::SchedType::kWakeup));
  CHECK(seen.slots == 1);
  CHECK(seen.pcpu == 5);  // the writer's, whatever the caller put there
  CHECK(seen.time_ns == 12345);
  CHECK(seen.domain == 3);
  CHECK(seen.vcpu == 1);
  CHECK(seen.old_state == static_cast<uint8_t>(ring::Runstate::kBlocked));
  CHECK(seen.new_state == static_cast<uint8_t>(ring::Runstate::kRunnable));
  CHECK(seen.flags == ring::kSchedOtherValid);
  CHECK(seen.other_domain == 4);
  CHECK(seen.other_vcpu == 2);
  CHECK(seen.to_pcpu == 9);
  CHECK(r.header()->sched_written == 1);
  // The sample counts of the header are the samples': untouched.
  for (uint64_t count : r.header()->samples) CHECK(count == 0);
}

TEST_CASE("a full scheduling ring: written + lost = produced, and a lost record marks the gap where it is",
          "[ring][sched]") {
  SchedRing r(64);
  std::mt19937_64 random(11);
  uint64_t produced = 0;
  uint64_t lost = 0;
  std::vector<ring::SchedRecord> got;
  for (int step = 0; step < 20000; ++step) {
    if (random() % 8 != 0) {  // the consumer falls behind now and then
      ++produced;
      bool notify = false;
      auto result = r.writer.WriteSched(
          Runstate(produced, 1, 0, ring::Runstate::kRunnable, ring::Runstate::kRunning), 0, &notify);
      if (result == RingWriter::Result::kFull) ++lost;
      else REQUIRE(result == RingWriter::Result::kWritten);
    } else {
      auto some = r.Drain(nullptr, random() % 40);
      got.insert(got.end(), some.begin(), some.end());
    }
  }
  auto rest = r.Drain();
  got.insert(got.end(), rest.begin(), rest.end());
  REQUIRE(lost > 0);
  uint64_t runstates = 0;
  uint64_t marked = 0;
  uint64_t expected_next = 1;  // the records' times are their sequence numbers
  for (const ring::SchedRecord& record : got) {
    if (record.type == static_cast<uint8_t>(ring::SchedType::kLost)) {
      marked += record.count;
      CHECK(record.aux == expected_next);  // the first lost one's time
      expected_next += record.count;
      continue;
    }
    ++runstates;
    CHECK(record.time_ns == expected_next);  // nothing skipped without a mark
    expected_next = record.time_ns + 1;
  }
  // A gap still open at the end is reported with the next record, not before.
  const uint64_t open_gap = produced - (expected_next - 1);
  CHECK(runstates + marked + open_gap == produced);
  CHECK(marked + open_gap == lost);
  CHECK(r.header()->sched_written == runstates);
  CHECK(r.header()->sched_lost[static_cast<int>(ring::LossReason::kRingFull)] == lost);
}

TEST_CASE("the reader skips scheduling records it does not know and refuses lying groups", "[ring][sched][security]") {
  SchedRing r(64);
  bool notify = false;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(r.writer.WriteSched(Runstate(i + 1, 1, 0, ring::Runstate::kRunnable, ring::Runstate::kRunning), 0,
                                &notify) == RingWriter::Result::kWritten);
  }
  SECTION("an unknown type is skipped and counted") {
    r.slot(1)[1] = 200;  // type
    hvprof::agent::DrainStats stats;
    auto got = r.Drain(&stats);
    CHECK(got.size() == 2);
    CHECK(stats.sched_unknown == 1);
    CHECK(stats.malformed == 0);
  }
  SECTION("a group longer than the published records ends the drain") {
    r.slot(2)[2] = 5;  // slots
    hvprof::agent::DrainStats stats;
    auto got = r.Drain(&stats);
    CHECK(got.size() == 2);
    CHECK(stats.malformed == 1);
    CHECK(r.header()->tail == r.header()->head);
  }
  SECTION("a continuation slot of the wrong kind makes the group malformed") {
    r.slot(0)[2] = 2;  // claims the next record as its continuation
    hvprof::agent::DrainStats stats;
    auto got = r.Drain(&stats);
    CHECK(got.size() == 1);
    CHECK(stats.malformed == 1);
  }
  SECTION("zero slots") {
    r.slot(0)[2] = 0;
    hvprof::agent::DrainStats stats;
    CHECK(r.Drain(&stats).empty());
    CHECK(stats.malformed == 1);
  }
}

TEST_CASE("a version 3 header without the scheduling flag is refused", "[ring][sched][security]") {
  Memory memory(ring::RingBytes(64));
  RingWriter writer;
  writer.AttachV2(memory.data.get(), 64, 32, 0, 0, ring::RingKind::kSched, true);
  reinterpret_cast<ring::RingHeader*>(memory.data.get())->flags = 0;
  auto attached = RingReader::Attach(memory.data.get(), memory.bytes, 64);
  REQUIRE_FALSE(attached.has_value());
  CHECK(attached.error().message().find("version 3 is not supported") != std::string::npos);
}

TEST_CASE("the agent's drain period follows how fast its events can fill a ring", "[ring][agent]") {
  using hvprof::agent::PeakSampleRate;
  using hvprof::agent::PollIntervalFor;
  // CPU_CLOCK counts nanoseconds: every 20 us is 50,000 samples a second. Other events are taken
  // to count at most 3e9 a second.
  CHECK(PeakSampleRate("CPU_CLOCK", 20000) == Approx(50000));
  CHECK(PeakSampleRate("CPU_CLK_UNHALTED", 20000) == Approx(150000));
  CHECK(PeakSampleRate("CPU_CLOCK", 0) == 0);
  // A quarter of the time to fill the ring: 16384 samples at 50 kHz fill it in 328 ms.
  CHECK(PollIntervalFor(50000, 16384) == 81);
  // Two events share the ring: their rates add up.
  CHECK(PollIntervalFor(PeakSampleRate("CPU_CLK_UNHALTED", 20000) + PeakSampleRate("INST_RETIRED", 40000), 16384) == 18);
  // Within 1-250 ms; unknown rates poll at the slowest.
  CHECK(PollIntervalFor(1000, 16384) == 250);
  CHECK(PollIntervalFor(1e9, 16384) == 1);
  CHECK(PollIntervalFor(0, 16384) == 250);
}
