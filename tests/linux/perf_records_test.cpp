// The perf record parser and the ring reader, on synthetic bytes: every record type, records
// that straddle the ring's wrap, and truncated or garbage input.
#include <linux/perf_event.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "hvprof/linux/perf_records.h"
#include "hvprof/linux/perf_ring.h"
#include "record_builder.h"

using namespace hvprof::linux_host;
using hvprof::testing::RecordBuilder;

namespace {

RecordLayout Layout(bool callchain = false) {
  RecordLayout layout;
  layout.sample_type = kSampleIdentifier | kSampleIp | kSampleTid | kSampleTime | kSampleCpu |
                       kSamplePeriod | (callchain ? kSampleCallchain : 0);
  layout.sample_id_all = true;
  return layout;
}

struct Recorder final : RecordVisitor {
  std::vector<PerfSample> samples;
  std::vector<std::vector<uint64_t>> chains;
  std::vector<PerfMmap2> mmaps;
  std::vector<std::string> mmap_names;
  std::vector<PerfComm> comms;
  std::vector<std::string> comm_names;
  std::vector<PerfTask> tasks;
  std::vector<PerfLost> losts;
  std::vector<PerfThrottle> throttles;
  std::vector<PerfLostSamples> lost_samples;
  std::vector<PerfSwitch> switches;
  std::vector<std::string> order;

  void OnSample(const PerfSample& r) override {
    samples.push_back(r);
    chains.emplace_back(r.callchain.begin(), r.callchain.end());
    order.push_back("sample");
  }
  void OnMmap2(const PerfMmap2& r) override {
    mmaps.push_back(r);
    mmap_names.emplace_back(r.filename);
    order.push_back("mmap2");
  }
  void OnComm(const PerfComm& r) override {
    comms.push_back(r);
    comm_names.emplace_back(r.comm);
    order.push_back("comm");
  }
  void OnTask(const PerfTask& r) override {
    tasks.push_back(r);
    order.push_back(r.fork ? "fork" : "exit");
  }
  void OnLost(const PerfLost& r) override {
    losts.push_back(r);
    order.push_back("lost");
  }
  void OnThrottle(const PerfThrottle& r) override {
    throttles.push_back(r);
    order.push_back(r.throttle ? "throttle" : "unthrottle");
  }
  void OnLostSamples(const PerfLostSamples& r) override {
    lost_samples.push_back(r);
    order.push_back("lost_samples");
  }
  void OnSwitch(const PerfSwitch& r) override {
    switches.push_back(r);
    order.push_back(r.out ? "switch_out" : "switch_in");
  }
};

RecordBuilder::Sid Sid(uint32_t pid, uint64_t time, uint32_t cpu = 1, uint64_t id = 7) {
  RecordBuilder::Sid sid;
  sid.pid = pid;
  sid.tid = pid;
  sid.time = time;
  sid.cpu = cpu;
  sid.id = id;
  return sid;
}

}  // namespace

TEST_CASE("every record type parses with its sample_id trailer", "[linux][records]") {
  RecordBuilder b(Layout(true));
  b.Sample(kMiscUser, 42, 0x401000, 100, 101, 5000, 1, 38520,
           {kContextUser, 0x401000, 0x401234, 0x401456});
  b.Mmap2(100, 100, 0x7f0000001000, 0x2000, 0x1000, "/usr/lib/libc.so.6", Sid(100, 5100));
  b.Mmap2(100, 100, 0x555555555000, 0x1000, 0x1000, "/usr/bin/prog", Sid(100, 5150),
          "0123456789abcdef0123456789abcdef01234567");
  b.Comm(100, 100, "prog", true, Sid(100, 5200));
  b.Fork(102, 100, 102, 100, Sid(100, 5300));
  b.Exit(102, 100, 102, 102, Sid(102, 5400));
  b.Lost(7, 12, Sid(0, 5500));
  b.Throttle(true, 5600, 42, Sid(0, 5600));
  b.Throttle(false, 5700, 42, Sid(0, 5700));
  b.LostSamples(3, Sid(0, 5800));
  b.Switch(true, 200, 201, Sid(100, 5900));
  b.Switch(false, 100, 100, Sid(200, 5901));

  Recorder r;
  const ParseStats stats = ParseRecords(b.bytes(), Layout(true), r);
  CHECK(stats.records == 12);
  CHECK(stats.malformed == 0);
  CHECK(stats.unknown == 0);
  CHECK(r.order == std::vector<std::string>{"sample", "mmap2", "mmap2", "comm", "fork", "exit", "lost", "throttle",
                                            "unthrottle", "lost_samples", "switch_out", "switch_in"});
  REQUIRE(r.switches.size() == 2);
  CHECK(r.switches[0].other_pid == 200);
  CHECK(r.switches[0].other_tid == 201);
  CHECK(r.switches[0].sid.pid == 100);
  CHECK(r.switches[0].sid.time == 5900);
  CHECK(r.switches[1].other_pid == 100);
  CHECK(r.switches[1].sid.pid == 200);
  CHECK(r.switches[1].sid.cpu == 1);
  REQUIRE(r.samples.size() == 1);
  const PerfSample& s = r.samples[0];
  CHECK(s.misc == kMiscUser);
  CHECK(s.id == 42);
  CHECK(s.ip == 0x401000);
  CHECK(s.pid == 100);
  CHECK(s.tid == 101);
  CHECK(s.time == 5000);
  CHECK(s.cpu == 1);
  CHECK(s.period == 38520);
  CHECK(r.chains[0] == std::vector<uint64_t>{kContextUser, 0x401000, 0x401234, 0x401456});

  REQUIRE(r.mmaps.size() == 2);
  CHECK(r.mmaps[0].addr == 0x7f0000001000);
  CHECK(r.mmaps[0].len == 0x2000);
  CHECK(r.mmaps[0].pgoff == 0x1000);
  CHECK(r.mmaps[0].ino == 12345);
  CHECK(r.mmaps[0].build_id.empty());
  CHECK(r.mmap_names[0] == "/usr/lib/libc.so.6");
  CHECK(r.mmaps[0].sid.time == 5100);
  CHECK(r.mmaps[1].build_id == "0123456789abcdef0123456789abcdef01234567");
  CHECK(r.mmap_names[1] == "/usr/bin/prog");

  REQUIRE(r.comms.size() == 1);
  CHECK(r.comm_names[0] == "prog");
  CHECK(r.comms[0].exec);
  REQUIRE(r.tasks.size() == 2);
  CHECK(r.tasks[0].fork);
  CHECK(r.tasks[0].pid == 102);
  CHECK(r.tasks[0].ppid == 100);
  CHECK(r.tasks[0].sid.time == 5300);
  CHECK_FALSE(r.tasks[1].fork);
  REQUIRE(r.losts.size() == 1);
  CHECK(r.losts[0].id == 7);
  CHECK(r.losts[0].lost == 12);
  REQUIRE(r.throttles.size() == 2);
  CHECK(r.throttles[0].throttle);
  CHECK(r.throttles[0].id == 42);
  CHECK(r.throttles[0].time == 5600);
  CHECK_FALSE(r.throttles[1].throttle);
  REQUIRE(r.lost_samples.size() == 1);
  CHECK(r.lost_samples[0].lost == 3);
}

TEST_CASE("the time order of a ring is read as the parser times its records", "[linux][records]") {
  // Every kind of record, in time order, with and without call chains in the samples.
  for (const bool callchain : {false, true}) {
    auto ordered = [&](RecordBuilder& b) {
      b.Sample(kMiscUser, 42, 0x401000, 100, 101, 5000, 1, 38520, {kContextUser, 0x401000, 0x401234});
      b.Mmap2(100, 100, 0x7f0000001000, 0x2000, 0x1000, "/usr/lib/libc.so.6", Sid(100, 5100));
      b.Comm(100, 100, "prog", true, Sid(100, 5200));
      b.Fork(102, 100, 102, 100, Sid(100, 5300));
      b.Exit(102, 100, 102, 102, Sid(102, 5400));
      b.Lost(7, 12, Sid(0, 5500));
      b.Throttle(true, 5600, 42, Sid(0, 5600));
      b.LostSamples(3, Sid(0, 5800));
    };
    RecordBuilder in_order(Layout(callchain));
    ordered(in_order);
    CHECK(ScanRecords(in_order.bytes(), Layout(callchain)).in_order);
    CHECK(ScanRecords(in_order.bytes(), Layout(callchain)).side_band);
    // Each kind, last in the bytes but earliest in time, breaks the order.
    const std::vector<std::function<void(RecordBuilder&)>> late = {
        [](RecordBuilder& b) { b.Sample(kMiscUser, 42, 0x401000, 100, 101, 10, 1, 38520); },
        [](RecordBuilder& b) { b.Mmap2(100, 100, 0x1000, 0x1000, 0, "/bin/x", Sid(100, 10)); },
        [](RecordBuilder& b) { b.Comm(100, 100, "x", false, Sid(100, 10)); },
        [](RecordBuilder& b) { b.Fork(103, 100, 103, 100, Sid(100, 10)); },
        [](RecordBuilder& b) { b.Lost(7, 1, Sid(0, 10)); },
        [](RecordBuilder& b) { b.Throttle(false, 10, 42, Sid(0, 10)); },
        [](RecordBuilder& b) { b.LostSamples(1, Sid(0, 10)); },
    };
    for (size_t i = 0; i < late.size(); ++i) {
      CAPTURE(callchain, i);
      RecordBuilder b(Layout(callchain));
      ordered(b);
      late[i](b);
      CHECK_FALSE(ScanRecords(b.bytes(), Layout(callchain)).in_order);
    }
  }
  // A broken size ends the walk without reading past the bytes.
  RecordBuilder b(Layout());
  b.Sample(kMiscUser, 42, 0x401000, 100, 101, 5000, 1, 38520);
  b.Raw(9, kMiscUser, std::vector<uint8_t>(8, 0), 4000);
  CHECK(ScanRecords(b.bytes(), Layout()).in_order);
  CHECK_FALSE(ScanRecords(b.bytes(), Layout()).side_band);
}

TEST_CASE("tracepoint samples share a ring with the counters' by their ids", "[linux][records][sched]") {
  // The counters' samples and, for ids 90 and 95, a tracepoint's: no ip or period, a raw record.
  const std::vector<uint64_t> tracepoint_ids = {90, 95};
  RecordLayout layout = Layout(true);
  layout.other_sample_type = kSampleIdentifier | kSampleTid | kSampleTime | kSampleCpu | kSampleRaw;
  layout.other_ids = tracepoint_ids;
  REQUIRE(layout.Supported());
  RecordBuilder b(layout);
  const std::vector<uint8_t> raw = {0x74, 0x01, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};  // 17 bytes
  b.Sample(kMiscUser, 42, 0x401000, 100, 101, 5000, 1, 38520, {kContextUser, 0x401000});
  b.Tracepoint(95, 100, 101, 5100, 1, raw);
  b.Lost(90, 3, Sid(0, 5150, 1, 90));
  b.Tracepoint(90, 0, 0, 5200, 1, {});
  b.Sample(kMiscKernel, 42, 0xffffffff81000000, 0, 0, 5300, 1, 38520);
  Recorder r;
  const ParseStats stats = ParseRecords(b.bytes(), layout, r);
  CHECK(stats.malformed == 0);
  CHECK(r.order == std::vector<std::string>{"sample", "sample", "lost", "sample", "sample"});
  REQUIRE(r.samples.size() == 4);
  CHECK(r.samples[0].ip == 0x401000);
  CHECK(r.samples[0].raw.empty());
  CHECK(r.samples[1].id == 95);
  CHECK(r.samples[1].ip == 0);
  CHECK(r.samples[1].period == 0);
  CHECK(r.samples[1].tid == 101);
  CHECK(r.samples[1].time == 5100);
  CHECK(r.samples[1].cpu == 1);
  // The kernel pads the u32 size and the data to whole u64s, and counts the padding.
  REQUIRE(r.samples[1].raw.size() == 20);
  CHECK(std::equal(raw.begin(), raw.end(), r.samples[1].raw.begin()));
  CHECK(r.samples[2].raw.size() == 4);
  CHECK(r.samples[3].time == 5300);
  REQUIRE(r.losts.size() == 1);
  CHECK(r.losts[0].lost == 3);
  CHECK(ScanRecords(b.bytes(), layout).in_order);
  // Without the other ids, the tracepoint samples are read as counters' and come apart.
  RecordLayout counters_only = Layout(true);
  Recorder wrong;
  ParseRecords(b.bytes(), counters_only, wrong);
  CHECK(wrong.samples.size() < 4);

  // A raw size beyond the record, and layouts whose trailers would differ, are refused.
  RecordBuilder bad(layout);
  bad.Tracepoint(90, 0, 0, 5400, 1, {1, 2, 3, 4});
  std::vector<uint8_t> bytes = bad.bytes();
  const uint32_t too_big = 4000;
  std::memcpy(bytes.data() + 8 + 32, &too_big, 4);
  Recorder none;
  CHECK(ParseRecords(bytes, layout, none).malformed == 1);
  CHECK(none.samples.empty());
  RecordLayout mismatched = layout;
  mismatched.other_sample_type &= ~kSampleCpu;
  CHECK_FALSE(mismatched.Supported());
  mismatched = layout;
  mismatched.other_sample_type &= ~kSampleIdentifier;
  CHECK_FALSE(mismatched.Supported());
}

TEST_CASE("broken records are counted and never read past", "[linux][records]") {
  const RecordLayout layout = Layout();
  SECTION("a header larger than what is left drops the rest") {
    RecordBuilder b(layout);
    b.Sample(kMiscUser, 1, 0x1000, 1, 1, 10, 0, 100);
    b.Raw(static_cast<uint32_t>(RecordType::kSample), kMiscUser, std::vector<uint8_t>(24, 0), 4096);
    Recorder r;
    const ParseStats stats = ParseRecords(b.bytes(), layout, r);
    CHECK(r.samples.size() == 1);
    CHECK(stats.malformed == 1);
    CHECK(stats.dropped_bytes == 32);
  }
  SECTION("a size below the header, or not a multiple of 8, stops the parse") {
    for (int size : {0, 4, 12}) {
      RecordBuilder b(layout);
      b.Raw(static_cast<uint32_t>(RecordType::kComm), 0, std::vector<uint8_t>(16, 'x'), size);
      b.Sample(kMiscUser, 1, 0x1000, 1, 1, 10, 0, 100);
      Recorder r;
      const ParseStats stats = ParseRecords(b.bytes(), layout, r);
      CHECK(r.samples.empty());
      CHECK(stats.malformed == 1);
    }
  }
  SECTION("a plausible size around a bad body skips only that record") {
    RecordBuilder b(layout);
    // A COMM whose name has no terminating NUL before the trailer.
    std::vector<uint8_t> body(8 + 8 + layout.SampleIdBytes(), 'x');
    b.Raw(static_cast<uint32_t>(RecordType::kComm), 0, body);
    // A sample cut short: its period is missing.
    b.Raw(static_cast<uint32_t>(RecordType::kSample), kMiscUser, std::vector<uint8_t>(32, 0));
    // A FORK with trailing garbage.
    b.Raw(static_cast<uint32_t>(RecordType::kFork), 0, std::vector<uint8_t>(24 + layout.SampleIdBytes() + 8, 0));
    b.Sample(kMiscKernel, 1, 0xffffffff81000000, 0, 0, 10, 0, 100);
    Recorder r;
    const ParseStats stats = ParseRecords(b.bytes(), layout, r);
    CHECK(stats.malformed == 3);
    CHECK(r.comms.empty());
    CHECK(r.tasks.empty());
    REQUIRE(r.samples.size() == 1);
    CHECK(r.samples[0].ip == 0xffffffff81000000);
  }
  SECTION("a callchain longer than its record") {
    RecordBuilder b(Layout(true));
    b.Sample(kMiscUser, 1, 0x1000, 1, 1, 10, 0, 100, {kContextUser, 0x1000});
    // Patch nr (the last three words are nr and two entries) to claim 1000 entries.
    std::vector<uint8_t> bytes = b.bytes();
    const uint64_t huge = 1000;
    std::memcpy(bytes.data() + bytes.size() - 24, &huge, 8);
    Recorder r;
    const ParseStats stats = ParseRecords(bytes, Layout(true), r);
    CHECK(stats.malformed == 1);
    CHECK(r.samples.empty());
  }
  SECTION("unknown record types are skipped by their size") {
    RecordBuilder b(layout);
    b.Raw(17 /* KSYMBOL */, 0, std::vector<uint8_t>(40, 0));
    b.Sample(kMiscUser, 1, 0x1000, 1, 1, 10, 0, 100);
    Recorder r;
    const ParseStats stats = ParseRecords(b.bytes(), layout, r);
    CHECK(stats.unknown == 1);
    CHECK(stats.malformed == 0);
    CHECK(r.samples.size() == 1);
  }
  SECTION("a layout with bits the parser does not know parses nothing") {
    RecordLayout odd = layout;
    odd.sample_type |= PERF_SAMPLE_RAW;
    RecordBuilder b(layout);
    b.Sample(kMiscUser, 1, 0x1000, 1, 1, 10, 0, 100);
    Recorder r;
    CHECK(ParseRecords(b.bytes(), odd, r).malformed == 1);
    CHECK(r.samples.empty());
  }
}

TEST_CASE("the parser copes with misaligned buffers and random garbage", "[linux][records]") {
  const RecordLayout layout = Layout(true);
  RecordBuilder b(layout);
  b.Sample(kMiscUser, 1, 0x1000, 1, 1, 10, 0, 100, {kContextUser, 0x1000, 0x2000});
  std::vector<uint8_t> shifted(b.bytes().size() + 1);
  std::memcpy(shifted.data() + 1, b.bytes().data(), b.bytes().size());
  Recorder r;
  ParseRecords(std::span<const uint8_t>(shifted).subspan(1), layout, r);
  REQUIRE(r.chains.size() == 1);
  CHECK(r.chains[0] == std::vector<uint64_t>{kContextUser, 0x1000, 0x2000});

  std::mt19937_64 rng(1234);
  for (int round = 0; round < 2000; ++round) {
    std::vector<uint8_t> garbage(rng() % 512);
    for (uint8_t& byte : garbage) byte = static_cast<uint8_t>(rng());
    // Plausible headers now and then, so the bodies get exercised too.
    for (size_t pos = 0; pos + 8 <= garbage.size(); pos += 8 * (1 + rng() % 6)) {
      const uint32_t type = static_cast<uint32_t>(1 + rng() % 14);
      const uint16_t size = static_cast<uint16_t>(8 * (1 + rng() % 12));
      std::memcpy(garbage.data() + pos, &type, 4);
      std::memcpy(garbage.data() + pos + 6, &size, 2);
    }
    Recorder sink;
    const ParseStats stats = ParseRecords(garbage, layout, sink);
    CHECK(stats.dropped_bytes <= garbage.size());
  }
}

namespace {

// A fake perf mapping: the metadata page and a small data area.
struct FakeRing {
  static constexpr uint64_t kPage = 4096;
  static constexpr uint64_t kData = 512;
  alignas(4096) uint8_t memory[kPage + kData] = {};

  perf_event_mmap_page& meta() { return *reinterpret_cast<perf_event_mmap_page*>(memory); }
  // Writes `bytes` at ring position `position` (wrapping) and publishes head.
  void Publish(uint64_t position, const std::vector<uint8_t>& bytes) {
    for (size_t i = 0; i < bytes.size(); ++i) memory[kPage + (position + i) % kData] = bytes[i];
    meta().data_head = position + bytes.size();
  }
};

}  // namespace

TEST_CASE("the ring reader copies across the wrap and hands space back", "[linux][ring]") {
  auto ring_memory = std::make_unique<FakeRing>();
  FakeRing& fake = *ring_memory;
  fake.meta().data_offset = FakeRing::kPage;
  fake.meta().data_size = FakeRing::kData;
  auto attached = PerfRing::Attach(fake.memory, sizeof fake.memory, FakeRing::kPage);
  REQUIRE(attached.has_value());
  PerfRing ring = attached.value();
  CHECK(ring.data_size() == FakeRing::kData);

  const RecordLayout layout = Layout();
  RecordBuilder b(layout);
  for (int i = 0; i < 5; ++i) b.Sample(kMiscUser, 1, 0x1000 + i, 1, 1, 10 + i, 0, 100);
  const std::vector<uint8_t> records = b.bytes();  // 5 x 56 bytes
  REQUIRE(records.size() == 280);

  // First pass: 280 bytes at 0. Second: the same records from 480, across the end of the ring.
  for (uint64_t start : {uint64_t{0}, uint64_t{480}}) {
    fake.meta().data_tail = start;
    auto again = PerfRing::Attach(fake.memory, sizeof fake.memory, FakeRing::kPage);
    REQUIRE(again.has_value());
    ring = again.value();
    fake.Publish(start, records);
    CHECK(ring.Pending() == records.size());
    // Read in place: one span, or two across the end; the kernel gets the space back on Release.
    const PerfRing::View view = ring.Peek();
    CHECK_FALSE(view.corrupt);
    CHECK(view.second.empty() == (start == 0));
    std::vector<uint8_t> out(view.first.begin(), view.first.end());
    out.insert(out.end(), view.second.begin(), view.second.end());
    CHECK(out == records);
    CHECK(fake.meta().data_tail == start);
    ring.Release(view);
    CHECK(fake.meta().data_tail == start + records.size());
    CHECK(ring.Pending() == 0);
    Recorder r;
    ParseRecords(out, layout, r);
    REQUIRE(r.samples.size() == 5);
    CHECK(r.samples[4].ip == 0x1004);
  }

  SECTION("an impossible head is skipped, never read") {
    const uint64_t tail = fake.meta().data_tail;
    fake.meta().data_head = tail + FakeRing::kData + 8;  // more than the ring holds
    PerfRing::View view = ring.Peek();
    CHECK(view.corrupt);
    CHECK((view.first.empty() && view.second.empty()));
    ring.Release(view);
    CHECK(fake.meta().data_tail == tail + FakeRing::kData + 8);
    fake.meta().data_head = tail;  // behind the tail
    view = ring.Peek();
    CHECK(view.corrupt);
    CHECK((view.first.empty() && view.second.empty()));
  }
  SECTION("a metadata page whose data area does not fit is refused") {
    fake.meta().data_size = FakeRing::kData * 2;
    CHECK_FALSE(PerfRing::Attach(fake.memory, sizeof fake.memory, FakeRing::kPage).has_value());
    fake.meta().data_size = 300;  // not a power of two
    CHECK_FALSE(PerfRing::Attach(fake.memory, sizeof fake.memory, FakeRing::kPage).has_value());
  }
}
