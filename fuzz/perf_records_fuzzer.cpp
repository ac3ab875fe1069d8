// Fuzzes the reader of perf's ring records (hvprof-hv, linux platform) with bytes a hostile or
// broken kernel ring could hold: the first two input bytes choose the sample layout (bit 14:
// two ids are tracepoints with a layout of their own, as with --sched), the rest is records.
// The parser must never read outside the bytes (callchains, raw records and names included),
// and its quick scan must agree with it: when the scan says the records are in time order,
// the times the parser gives them do not go backwards, and when it says there is no side band
// (mmap, comm, fork, exit), the parser finds none.
#include <cstring>
#include <vector>

#include "hvprof/linux/perf_records.h"

using namespace hvprof::linux_host;

namespace {

struct Checker final : RecordVisitor {
  const uint8_t* begin;
  const uint8_t* end;
  bool sample_has_time;
  uint64_t last = 0;
  bool ordered = true;
  bool side_band = false;

  void Inside(const void* pointer, size_t bytes) const {
    const auto* p = static_cast<const uint8_t*>(pointer);
    if (bytes != 0 && (p < begin || p + bytes > end)) __builtin_trap();
  }
  void Time(uint64_t time) {
    if (time < last) ordered = false;
    last = time;
  }
  void OnSample(const PerfSample& r) override {
    Inside(r.callchain.data(), r.callchain.size_bytes());
    Inside(r.raw.data(), r.raw.size());
    if (sample_has_time) Time(r.time);
  }
  void OnMmap2(const PerfMmap2& r) override {
    Inside(r.filename.data(), r.filename.size());
    side_band = true;
    if (r.sid.has_time) Time(r.sid.time);
  }
  void OnComm(const PerfComm& r) override {
    Inside(r.comm.data(), r.comm.size());
    side_band = true;
    if (r.sid.has_time) Time(r.sid.time);
  }
  void OnTask(const PerfTask& r) override {
    side_band = true;
    Time(r.sid.has_time ? r.sid.time : r.time);
  }
  void OnLost(const PerfLost& r) override {
    if (r.sid.has_time) Time(r.sid.time);
  }
  void OnThrottle(const PerfThrottle& r) override { Time(r.time); }
  void OnLostSamples(const PerfLostSamples& r) override {
    if (r.sid.has_time) Time(r.sid.time);
  }
  void OnSwitch(const PerfSwitch& r) override {
    if (r.sid.has_time) Time(r.sid.time);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  RecordLayout layout;
  uint16_t bits = 0;
  std::memcpy(&bits, data, 2);
  // Every supported field can be on or off; sample_id_all from the top bit.
  const uint64_t fields[] = {kSampleIdentifier, kSampleIp,       kSampleTid,      kSampleTime,
                             kSampleAddr,       kSampleId,       kSampleStreamId, kSampleCpu,
                             kSamplePeriod,     kSampleCallchain, kSampleRaw};
  for (size_t i = 0; i < std::size(fields); ++i) {
    if (bits & (1u << i)) layout.sample_type |= fields[i];
  }
  layout.sample_id_all = (bits & 0x8000) != 0;
  // Bit 14: samples of ids 1 and 42 are a tracepoint's (--sched), laid out differently.
  static const uint64_t kOtherIds[] = {1, 42};
  if (bits & 0x4000) {
    layout.sample_type |= kSampleIdentifier;
    const uint64_t trailer_bits = kSampleTid | kSampleTime | kSampleId | kSampleStreamId | kSampleCpu;
    layout.other_sample_type = (layout.sample_type & trailer_bits) | kSampleIdentifier | kSampleRaw;
    layout.other_ids = kOtherIds;
  }
  // The ring's bytes as the reader gets them: copied into their own (aligned) buffer.
  std::vector<uint8_t> bytes(data + 2, data + size);
  Checker checker;
  checker.begin = bytes.data();
  checker.end = bytes.data() + bytes.size();
  checker.sample_has_time = (layout.sample_type & kSampleTime) != 0;
  const ParseStats stats = ParseRecords(bytes, layout, checker);
  if (stats.dropped_bytes > bytes.size()) __builtin_trap();
  const RingScan scan = ScanRecords(bytes, layout);
  if (scan.in_order && !checker.ordered) __builtin_trap();
  if (!scan.side_band && checker.side_band) __builtin_trap();
  return 0;
}
