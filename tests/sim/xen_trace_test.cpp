// Xen 4.17's trace buffers (issue 21): the decoder of the xen link on hand-made records, the
// simulator's Xen-layout producer (wrap and lost-records records, high water, a bogus cons),
// and the two together on the machine's scheduling: what the producer wrote and the decoder
// read back are the machine's records.
#include <algorithm>
#include <cstring>
#include <tuple>
#include <map>
#include <vector>

#include <catch2/catch.hpp>

#include "hvpmu/abi/xen_trace.h"
#include "hvprof/sim/xen_trace_writer.h"
#include "hvprof/xen/trace_decoder.h"
#include "sim_harness.h"

namespace xt = hvpmu::xentrace;
namespace ring = hvpmu::ring;
using hvprof::sim::XenTraceLayout;
using hvprof::sim::XenTraceWriter;
using hvprof::xen::TraceDecoder;

namespace {

// Records as Xen writes them, into a window of bytes.
struct Window {
  std::vector<uint8_t> bytes;
  void Word(uint32_t word) {
    const size_t at = bytes.size();
    bytes.resize(at + 4);
    std::memcpy(bytes.data() + at, &word, 4);
  }
  void Record(uint32_t event, uint64_t tsc, std::vector<uint32_t> extra, bool cycles = true) {
    Word(xt::HeaderWord(event, static_cast<uint32_t>(extra.size()), cycles));
    if (cycles) {
      Word(static_cast<uint32_t>(tsc));
      Word(static_cast<uint32_t>(tsc >> 32));
    }
    for (uint32_t word : extra) Word(word);
  }
};

std::vector<ring::SchedRecord> DecodeAll(TraceDecoder& decoder, uint16_t cpu, const Window& window) {
  std::vector<ring::SchedRecord> out;
  decoder.Decode(cpu, window.bytes);
  decoder.Flush([&](const ring::SchedRecord& record) { out.push_back(record); });
  return out;
}

// The producer's memory and an in-process consumer reading it as the xen link does: one CPU's
// pages put together in order (following t_info's frame lists), the window copied, cons
// written back.
struct TraceMemory {
  XenTraceLayout layout;
  std::vector<uint8_t> memory;
  XenTraceWriter writer;

  TraceMemory(uint32_t cpus, uint32_t pages)
      : layout(XenTraceLayout::For(cpus, pages, 0x80000)), memory(layout.bytes()), writer((Format(), memory.data()), layout) {}
  int Format() {
    layout.Format(memory.data());
    return 0;
  }
  // CPU `cpu`'s buffer through t_info, as a reader maps it.
  std::vector<uint8_t> Gather(uint32_t cpu) const {
    uint16_t size = 0, offset = 0;
    std::memcpy(&size, memory.data(), 2);
    std::memcpy(&offset, memory.data() + 2 + 2 * cpu, 2);
    std::vector<uint8_t> pages(size_t{size} * 4096);
    for (uint32_t page = 0; page < size; ++page) {
      uint32_t mfn = 0;
      std::memcpy(&mfn, memory.data() + 4 * (size_t{offset} + page), 4);
      std::memcpy(pages.data() + size_t{page} * 4096, memory.data() + (mfn - layout.first_mfn) * 4096, 4096);
    }
    return pages;
  }
  uint32_t* Buf(uint32_t cpu) { return reinterpret_cast<uint32_t*>(memory.data() + layout.PageOf(cpu, 0) * 4096); }
  // Consumes what CPU `cpu` holds: the bytes between cons and prod.
  std::vector<uint8_t> Consume(uint32_t cpu) {
    std::vector<uint8_t> pages = Gather(cpu);
    std::vector<uint8_t> window;
    const auto cons = hvprof::xen::CopyTraceWindow(pages.data(), layout.data_size(), &window);
    REQUIRE(cons.has_value());
    hvprof::xen::ReleaseTraceWindow(reinterpret_cast<uint8_t*>(Buf(cpu)), *cons);
    return window;
  }
};

}  // namespace

TEST_CASE("xen trace: runstate changes, wake-ups, derived migrations and lost records decode", "[xen][trace]") {
  TraceDecoder decoder(2'000'000);  // 2 GHz: two ticks a nanosecond
  Window w;
  const uint32_t dom1v0 = xt::VcpuWord(1, 0);
  w.Record(xt::RunstateChangeEvent(xt::kRunstateRunnable, xt::kRunstateRunning), 2000, {dom1v0});
  w.Record(xt::kContinueRunning, 4000, {dom1v0});
  w.Record(xt::RunstateChangeEvent(xt::kRunstateRunning, xt::kRunstateBlocked), 6000, {dom1v0});
  w.Record(xt::kSchedSwitchInfPrev, 6000, {1, 0, 5});  // in the mask, not used
  w.Record(0x0010f001, 6000, {});                       // another class
  w.Record(xt::kTraceWrapBuffer, 0, {0, 0}, false);
  auto first = DecodeAll(decoder, 0, w);
  REQUIRE(first.size() == 3);
  CHECK(first[0].type == static_cast<uint8_t>(ring::SchedType::kRunstate));
  CHECK(first[0].time_ns == 1000);
  CHECK(first[0].domain == 1);
  CHECK(first[0].vcpu == 0);
  CHECK(first[0].pcpu == 0);
  CHECK(first[0].old_state == static_cast<uint8_t>(ring::Runstate::kRunnable));
  CHECK(first[0].new_state == static_cast<uint8_t>(ring::Runstate::kRunning));
  CHECK(first[1].old_state == first[1].new_state);
  CHECK(first[2].new_state == static_cast<uint8_t>(ring::Runstate::kBlocked));
  CHECK(decoder.stats().ignored == 1);
  CHECK(decoder.stats().unknown == 1);
  CHECK(decoder.stats().wrap_records == 1);

  // Woken on CPU 1, it then runs there: a wake-up, and a migration Xen never traced.
  Window wake;
  wake.Record(xt::kSchedWake, 8000, {1, 0});
  wake.Record(xt::RunstateChangeEvent(xt::kRunstateBlocked, xt::kRunstateRunnable), 8000, {dom1v0});
  wake.Record(xt::RunstateChangeEvent(xt::kRunstateRunnable, xt::kRunstateRunning), 10000, {dom1v0});
  wake.Record(xt::kSchedWake, 12000, {1, 0});  // already running: nothing
  wake.Record(xt::RunstateChangeEvent(xt::kRunstateBlocked, xt::kRunstateRunnable), 12000, {dom1v0});  // disagrees
  auto second = DecodeAll(decoder, 1, wake);
  REQUIRE(second.size() == 6);
  CHECK(second[0].type == static_cast<uint8_t>(ring::SchedType::kWakeup));
  CHECK(second[0].old_state == static_cast<uint8_t>(ring::Runstate::kBlocked));
  CHECK(second[1].type == static_cast<uint8_t>(ring::SchedType::kRunstate));
  CHECK(second[2].type == static_cast<uint8_t>(ring::SchedType::kMigrate));
  CHECK(second[2].flags == ring::kSchedDerived);
  CHECK(second[2].from_pcpu == 0);
  CHECK(second[2].to_pcpu == 1);
  CHECK(second[3].new_state == static_cast<uint8_t>(ring::Runstate::kRunning));
  CHECK(second[4].type == static_cast<uint8_t>(ring::SchedType::kWakeup));  // Xen's word for it, counted below
  CHECK(decoder.stats().inconsistent == 1);
  CHECK(decoder.stats().redundant_wakes == 0);
  CHECK(decoder.stats().migrations == 1);

  Window lost;
  lost.Record(xt::kLostRecords, 20000, {7, 0x00030000u | 1u, 14000, 0});  // dom1 vCPU 3 ran then
  auto third = DecodeAll(decoder, 1, lost);
  REQUIRE(third.size() == 1);
  CHECK(third[0].type == static_cast<uint8_t>(ring::SchedType::kLost));
  CHECK(third[0].count == 7);
  CHECK(third[0].aux == 7000);
  CHECK(third[0].time_ns == 10000);
  CHECK(third[0].domain == 1);
  CHECK(third[0].vcpu == 3);
  CHECK(decoder.stats().lost_records == 7);

  // A record cut short ends the window, and is counted.
  Window cut;
  cut.Record(xt::RunstateChangeEvent(xt::kRunstateRunning, xt::kRunstateRunnable), 30000, {dom1v0});
  cut.bytes.resize(cut.bytes.size() - 2);
  CHECK(decoder.Decode(0, cut.bytes) == 0);
  CHECK(DecodeAll(decoder, 0, Window{}).empty());
  CHECK(decoder.stats().truncated == 1);
}

TEST_CASE("xen trace: the producer wraps, counts and marks lost records, and notifies at half full", "[xen][trace]") {
  TraceMemory trace(2, 1);  // one page a CPU: 4088 bytes, 255 records of 16 bytes
  XenTraceWriter& writer = trace.writer;
  const uint32_t word = xt::VcpuWord(1, 0);
  const uint32_t running_to_runnable = xt::RunstateChangeEvent(0, 1);
  // Nothing before it is enabled.
  CHECK_FALSE(writer.Trace(0, 1, running_to_runnable, std::span(&word, 1)));
  CHECK(writer.stats().written == 0);
  writer.set_enabled(true);
  writer.set_event_mask(xt::kHvprofEventMask);
  // The mask: a scheduler's own event is not written.
  const uint32_t credit2_event = 0x00022201;
  writer.Trace(0, 1, credit2_event, std::span(&word, 1));
  CHECK(writer.stats().written == 0);

  const uint32_t data_size = trace.layout.data_size();
  uint64_t notified = 0;
  uint64_t tsc = 100;
  for (int i = 0; i < 200; ++i) notified += writer.Trace(0, tsc++, running_to_runnable, std::span(&word, 1)) ? 1 : 0;
  CHECK(notified == 1);  // crossing half full, once
  for (int i = 0; i < 100; ++i) writer.Trace(0, tsc++, running_to_runnable, std::span(&word, 1));
  CHECK(writer.stats().lost == 300 - data_size / 16);
  auto window = trace.Consume(0);
  CHECK(window.size() == data_size / 16 * 16);
  // The next record finds room: a lost-records record first, then a wrap record to the end.
  CHECK(writer.Trace(0, tsc++, running_to_runnable, std::span(&word, 1)) == false);
  CHECK(writer.stats().lost_markers == 1);
  CHECK(writer.stats().wraps == 1);
  TraceDecoder decoder(1'000'000);
  std::vector<ring::SchedRecord> records;
  decoder.Decode(0, trace.Consume(0));
  decoder.Flush([&](const ring::SchedRecord& r) { records.push_back(r); });
  REQUIRE(records.size() == 2);
  CHECK(records[0].type == static_cast<uint8_t>(ring::SchedType::kLost));
  CHECK(records[0].count == writer.stats().lost);
  CHECK(records[1].type == static_cast<uint8_t>(ring::SchedType::kRunstate));
  CHECK(decoder.stats().wrap_records == 1);

  // Around and around: cons and prod stay below twice the data size, the records whole.
  uint64_t written = 0;
  uint64_t read = 0;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 100; ++i) {
      writer.Trace(1, tsc++, running_to_runnable, std::span(&word, 1));
      ++written;
    }
    decoder.Decode(1, trace.Consume(1));
    decoder.Flush([&](const ring::SchedRecord&) { ++read; });
    CHECK(trace.Buf(1)[1] < 2 * data_size);
  }
  CHECK(read == written);
  CHECK(decoder.stats().truncated == 0);

  // A bogus cons turns tracing off, as Xen does; the consumer never writes one.
  trace.Buf(1)[0] = 3;
  CHECK_FALSE(writer.Trace(1, tsc++, running_to_runnable, std::span(&word, 1)));
  CHECK(writer.stats().bogus == 1);
  CHECK_FALSE(writer.enabled());
  std::vector<uint8_t> pages = trace.Gather(1);
  std::vector<uint8_t> none;
  CHECK_FALSE(hvprof::xen::CopyTraceWindow(pages.data(), data_size, &none).has_value());
  CHECK(none.empty());
}

TEST_CASE("xen trace: the machine's scheduling through Xen's buffers and back is the machine's", "[xen][trace]") {
  nlohmann::json scenario = hvprof::testing::TestScenario("intel-arch-v4", 21);
  const double loads[] = {0.6, 0.95, 0.4, 0.85};
  for (size_t d = 0; d < scenario["domains"].size(); ++d) scenario["domains"][d]["load"] = loads[d % 4];
  auto host = hvprof::testing::SimHost::Create(scenario);
  REQUIRE(host);
  hvprof::sim::SimMachine& machine = *host->machine;
  const auto cpus = static_cast<uint32_t>(machine.scenario().machine.cpus);
  TraceMemory trace(cpus, 2);  // small: the buffers wrap many times
  trace.writer.set_event_mask(xt::kHvprofEventMask);
  trace.writer.set_enabled(true);
  std::vector<std::vector<ring::SchedRecord>> sent(cpus);
  machine.SetSchedSink([&](uint32_t cpu, uint64_t tsc, const ring::SchedRecord& record) {
    trace.writer.TraceSched(cpu, tsc, record);
    sent[cpu].push_back(record);
  });
  TraceDecoder decoder(uint64_t{machine.scenario().machine.mhz} * 1000);
  std::vector<std::vector<ring::SchedRecord>> read(cpus);
  for (int step = 0; step < 400; ++step) {
    machine.RunFor(1'000'000);
    // Drained now and then, as an agent does: windows of many scheduling decisions.
    if (step % 37 != 36 && step != 399) continue;
    for (uint32_t cpu = 0; cpu < cpus; ++cpu) decoder.Decode(static_cast<uint16_t>(cpu), trace.Consume(cpu));
    decoder.Flush([&](const ring::SchedRecord& record) { read.at(record.pcpu).push_back(record); });
  }
  CHECK(trace.writer.stats().lost == 0);
  CHECK(trace.writer.stats().wraps > 0);
  CHECK(decoder.stats().truncated == 0);
  CHECK(decoder.stats().inconsistent == 0);
  // At one time a pCPU's records come in the report's order (docs/sched.md): compare them as sets.
  auto order = [](const ring::SchedRecord& a, const ring::SchedRecord& b) {
    return std::tie(a.time_ns, a.domain, a.vcpu, a.type, a.old_state, a.new_state) <
           std::tie(b.time_ns, b.domain, b.vcpu, b.type, b.old_state, b.new_state);
  };
  uint64_t migrations_sent = 0;
  uint64_t compared = 0;
  for (uint32_t cpu = 0; cpu < cpus; ++cpu) {
    INFO("pCPU " << cpu);
    // Xen traces no migration: the decoder derives them, where it knew the vCPU's last pCPU.
    std::vector<ring::SchedRecord> expected;
    for (const ring::SchedRecord& record : sent[cpu]) {
      if (record.type == static_cast<uint8_t>(ring::SchedType::kMigrate)) {
        ++migrations_sent;
      } else {
        expected.push_back(record);
      }
    }
    std::vector<ring::SchedRecord> got;
    for (const ring::SchedRecord& record : read[cpu]) {
      if (record.type != static_cast<uint8_t>(ring::SchedType::kMigrate)) got.push_back(record);
    }
    std::sort(expected.begin(), expected.end(), order);
    std::sort(got.begin(), got.end(), order);
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("record " << i);
      CHECK(got[i].type == expected[i].type);
      CHECK(got[i].time_ns == expected[i].time_ns);
      CHECK(got[i].domain == expected[i].domain);
      CHECK(got[i].vcpu == expected[i].vcpu);
      CHECK(got[i].pcpu == cpu);
      CHECK(got[i].old_state == expected[i].old_state);
      CHECK(got[i].new_state == expected[i].new_state);
      ++compared;
    }
  }
  CHECK(compared > 1000);
  // Every migration but the first move of each vCPU (whose earlier pCPU Xen never said).
  CHECK(decoder.stats().migrations <= migrations_sent);
  CHECK(decoder.stats().migrations + 7 >= migrations_sent);
  CHECK(decoder.stats().wakeups > 0);
}
