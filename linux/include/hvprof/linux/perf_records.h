// Parsing perf's ring records (include/uapi/linux/perf_event.h) out of a linear copy of a
// ring's bytes. Every length is checked against what is left. A header with an impossible size
// stops the parse of that buffer (nothing after it can be found); a record whose size is
// plausible but whose body is malformed is skipped by its size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hvprof::linux_host {

// PERF_RECORD_* values used here.
enum class RecordType : uint32_t {
  kMmap = 1,
  kLost = 2,
  kComm = 3,
  kExit = 4,
  kThrottle = 5,
  kUnthrottle = 6,
  kFork = 7,
  kSample = 9,
  kMmap2 = 10,
  kLostSamples = 13,
  kSwitch = 14,          // the task's own context switch (per-task events)
  kSwitchCpuWide = 15,   // a CPU's context switch, naming the other task (per-CPU events)
};

// PERF_SAMPLE_* bits the parser understands.
inline constexpr uint64_t kSampleIp = 1u << 0;
inline constexpr uint64_t kSampleTid = 1u << 1;
inline constexpr uint64_t kSampleTime = 1u << 2;
inline constexpr uint64_t kSampleAddr = 1u << 3;
inline constexpr uint64_t kSampleCallchain = 1u << 5;
inline constexpr uint64_t kSampleId = 1u << 6;
inline constexpr uint64_t kSampleCpu = 1u << 7;
inline constexpr uint64_t kSamplePeriod = 1u << 8;
inline constexpr uint64_t kSampleStreamId = 1u << 9;
inline constexpr uint64_t kSampleRaw = 1u << 10;
inline constexpr uint64_t kSampleIdentifier = 1u << 16;
inline constexpr uint64_t kSupportedSampleBits = kSampleIp | kSampleTid | kSampleTime |
                                                 kSampleAddr | kSampleCallchain | kSampleId |
                                                 kSampleCpu | kSamplePeriod | kSampleStreamId |
                                                 kSampleRaw | kSampleIdentifier;

// PERF_RECORD_MISC_*.
inline constexpr uint16_t kMiscCpumodeMask = 7;
inline constexpr uint16_t kMiscCpumodeUnknown = 0;
inline constexpr uint16_t kMiscKernel = 1;
inline constexpr uint16_t kMiscUser = 2;
inline constexpr uint16_t kMiscHypervisor = 3;
inline constexpr uint16_t kMiscGuestKernel = 4;
inline constexpr uint16_t kMiscGuestUser = 5;
inline constexpr uint16_t kMiscCommExec = 1u << 13;
inline constexpr uint16_t kMiscSwitchOut = 1u << 13;  // SWITCH records: the task leaves the CPU
inline constexpr uint16_t kMiscMmapBuildId = 1u << 14;

// PERF_CONTEXT_* markers inside a callchain (values >= kContextMax are markers).
inline constexpr uint64_t kContextHv = static_cast<uint64_t>(-32);
inline constexpr uint64_t kContextKernel = static_cast<uint64_t>(-128);
inline constexpr uint64_t kContextUser = static_cast<uint64_t>(-512);
inline constexpr uint64_t kContextGuestKernel = static_cast<uint64_t>(-2176);
inline constexpr uint64_t kContextGuestUser = static_cast<uint64_t>(-2560);
inline constexpr uint64_t kContextMax = static_cast<uint64_t>(-4095);

// perf writes -1 as a record's pid, tid or cpu it does not know.
inline constexpr uint32_t kNoTask = static_cast<uint32_t>(-1);

// How the records of one ring are laid out: the attr's sample_type and sample_id_all.
//
// Events of two sample types may share a ring (the counters and, with --sched, the scheduler's
// tracepoints): the samples of the ids in `other_ids` are laid out by `other_sample_type`. Both
// types then carry kSampleIdentifier, so a sample's id is its first word whatever its type, and
// the same sample_id trailer, so every other record parses alike (Supported() checks both).
struct RecordLayout {
  uint64_t sample_type = 0;
  bool sample_id_all = false;
  uint64_t other_sample_type = 0;
  std::span<const uint64_t> other_ids;  // sorted; owned by whoever made the layout
  // The bytes of the sample_id trailer of non-sample records.
  uint32_t SampleIdBytes() const;
  bool Supported() const;
  // The sample_type of a sample whose body starts with `body` (`size` bytes).
  uint64_t SampleTypeOf(const uint8_t* body, size_t size) const;
};

// The sample_id_all trailer of a non-sample record; fields are kNoTask / 0 when absent.
struct SampleId {
  uint32_t pid = kNoTask;
  uint32_t tid = kNoTask;
  uint64_t time = 0;
  uint64_t id = 0;
  uint32_t cpu = kNoTask;
  bool has_time = false;
};

struct PerfSample {
  uint16_t misc = 0;
  uint64_t id = 0;
  uint64_t ip = 0;
  uint32_t pid = kNoTask;
  uint32_t tid = kNoTask;
  uint64_t time = 0;
  uint32_t cpu = kNoTask;
  uint64_t period = 0;
  std::span<const uint64_t> callchain;  // into the parsed buffer
  std::span<const uint8_t> raw;         // PERF_SAMPLE_RAW's data (a tracepoint's record), into the buffer
};

struct PerfMmap2 {
  uint16_t misc = 0;
  uint32_t pid = 0, tid = 0;
  uint64_t addr = 0, len = 0, pgoff = 0;
  uint32_t maj = 0, min = 0;
  uint64_t ino = 0, ino_generation = 0;
  std::string build_id;  // lower-case hex, when misc has kMiscMmapBuildId
  uint32_t prot = 0, flags = 0;
  std::string_view filename;  // into the parsed buffer
  SampleId sid;
};

struct PerfComm {
  uint32_t pid = 0, tid = 0;
  bool exec = false;
  std::string_view comm;
  SampleId sid;
};

struct PerfTask {  // FORK and EXIT
  bool fork = false;
  uint32_t pid = 0, ppid = 0, tid = 0, ptid = 0;
  uint64_t time = 0;
  SampleId sid;
};

struct PerfLost {
  uint64_t id = 0;
  uint64_t lost = 0;
  SampleId sid;
};

struct PerfThrottle {
  bool throttle = true;  // false: UNTHROTTLE
  uint64_t time = 0, id = 0, stream_id = 0;
  SampleId sid;
};

struct PerfLostSamples {
  uint64_t lost = 0;
  SampleId sid;
};

// A context switch (attr.context_switch). `sid` is the task switching in (out: false) or out
// (true) at sid.time; a CPU-wide record also names the other task: the next one when switching
// out, the previous one when switching in (kNoTask in a per-task SWITCH record).
struct PerfSwitch {
  bool out = false;
  uint32_t other_pid = kNoTask, other_tid = kNoTask;
  SampleId sid;
};

class RecordVisitor {
 public:
  virtual void OnSample(const PerfSample&) {}
  virtual void OnMmap2(const PerfMmap2&) {}
  virtual void OnComm(const PerfComm&) {}
  virtual void OnTask(const PerfTask&) {}
  virtual void OnLost(const PerfLost&) {}
  virtual void OnThrottle(const PerfThrottle&) {}
  virtual void OnLostSamples(const PerfLostSamples&) {}
  virtual void OnSwitch(const PerfSwitch&) {}

 protected:
  ~RecordVisitor() = default;
};

struct ParseStats {
  uint64_t records = 0;    // well-formed records delivered or skipped as unknown
  uint64_t unknown = 0;    // record types not handled here (skipped by their size)
  uint64_t malformed = 0;  // records that broke the format (skipped, or the rest dropped)
  uint64_t dropped_bytes = 0;
};

// Walks `bytes` (whole records, as copied out of a ring) one record at a time, for a caller
// that interleaves several rings in time order. `bytes` must outlive the reader and what its
// records point into (callchains, file names).
class RecordReader {
 public:
  RecordReader(std::span<const uint8_t> bytes, const RecordLayout& layout);
  // Parses the next record and hands it to `visitor`; a record whose body breaks the format is
  // counted and skipped, a broken size drops the rest. False at the end.
  bool Next(RecordVisitor& visitor);
  const ParseStats& stats() const { return stats_; }

 private:
  std::span<const uint8_t> bytes_;
  RecordLayout layout_;
  std::vector<uint64_t> aligned_;  // a copy, only when `bytes` is not 8-byte aligned
  size_t pos_ = 0;
  ParseStats stats_;
};

// The time a merge of several rings orders a record by: a sample's TIME, a FORK/EXIT or
// THROTTLE record's own time, others' sample_id time.
inline uint64_t OrderTime(const PerfSample& r) { return r.time; }
inline uint64_t OrderTime(const PerfMmap2& r) { return r.sid.time; }
inline uint64_t OrderTime(const PerfComm& r) { return r.sid.time; }
inline uint64_t OrderTime(const PerfTask& r) { return r.sid.has_time ? r.sid.time : r.time; }
inline uint64_t OrderTime(const PerfLost& r) { return r.sid.time; }
inline uint64_t OrderTime(const PerfThrottle& r) { return r.time; }
inline uint64_t OrderTime(const PerfLostSamples& r) { return r.sid.time; }
inline uint64_t OrderTime(const PerfSwitch& r) { return r.sid.time; }

// One parsed record held by value, with its OrderTime: a merge
// reads each ring one record ahead into one of these, applies the earliest, and reads on. Its
// strings and callchain still point into the ring's bytes.
struct HeldRecord final : RecordVisitor {
  enum Kind : uint8_t { kNone, kSample, kMmap2, kComm, kTask, kLost, kThrottle, kLostSamples, kSwitch };
  Kind kind = kNone;
  uint64_t time = 0;
  PerfSample sample;
  PerfMmap2 mmap;
  PerfComm comm;
  PerfTask task;
  PerfLost lost;
  PerfThrottle throttle;
  PerfLostSamples lost_samples;
  PerfSwitch context_switch;

  void OnSample(const PerfSample& r) override { kind = kSample, time = OrderTime(r), sample = r; }
  void OnMmap2(const PerfMmap2& r) override { kind = kMmap2, time = OrderTime(r), mmap = r; }
  void OnComm(const PerfComm& r) override { kind = kComm, time = OrderTime(r), comm = r; }
  void OnTask(const PerfTask& r) override { kind = kTask, time = OrderTime(r), task = r; }
  void OnLost(const PerfLost& r) override { kind = kLost, time = OrderTime(r), lost = r; }
  void OnThrottle(const PerfThrottle& r) override { kind = kThrottle, time = OrderTime(r), throttle = r; }
  void OnLostSamples(const PerfLostSamples& r) override { kind = kLostSamples, time = OrderTime(r), lost_samples = r; }
  void OnSwitch(const PerfSwitch& r) override { kind = kSwitch, time = OrderTime(r), context_switch = r; }

  // The record held, to `visitor` as the parser gave it.
  void Replay(RecordVisitor& visitor) const;
  // Reads the ring's next record of a kind above; false at its end.
  bool Advance(RecordReader& reader);
};

// One quick walk over `bytes` (one field read per record): whether its records are in time
// order, as the parser would time them (a sample's TIME, a FORK/EXIT or THROTTLE record's own
// time, others' sample_id time; records without one do not count), and whether it holds
// side-band records (MMAP2, COMM, FORK, EXIT), which change the process table and which samples
// on other CPUs must be ordered against. The kernel writes a ring nearly always in order, but
// not always (an NMI can take its sample between another record's timestamp and its write).
struct RingScan {
  bool in_order = true;  // always true when the order was not checked
  bool side_band = false;
};
// With `check_order` false, only the record types are looked at (one header read per record).
RingScan ScanRecords(std::span<const uint8_t> bytes, const RecordLayout& layout, bool check_order = true);

// Walks `bytes` (whole records, as copied out of a ring) and calls the visitor per record.
ParseStats ParseRecords(std::span<const uint8_t> bytes, const RecordLayout& layout,
                        RecordVisitor& visitor);

}  // namespace hvprof::linux_host
