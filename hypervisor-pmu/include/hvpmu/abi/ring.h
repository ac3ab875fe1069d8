// hvprof ring ABI, versions 2 and 3: the shared memory between the engine (producer) and an
// agent (consumer). The full contract, with who writes each field and the memory ordering, is
// in docs/abi.md; this header is its machine-checked form. Version 3 is version 2 plus
// scheduling records (SchedRecord) and their counts in the header. Only scheduling rings
// (RingKind::kSched, the primary's, one per pCPU, when it asks for them) are version 3, and
// they hold scheduling records only; every other ring stays version 2, byte for byte.
//
// A domain's shared region holds `nbuf` rings of `ring_bytes` each, back to back. A ring is a
// one-page RingHeader followed by `capacity` 64-byte record slots (capacity is a power of two).
//
//   head  free-running 64-bit count of slots published; written only by the producer (release)
//   tail  free-running 64-bit count of slots consumed; written only by the consumer (release)
//
// Slot i lives at index (i & (capacity - 1)). A sample with a backtrace occupies one
// SampleRecord and ceil(nframes / 7) FramesRecords in consecutive slots; the producer never
// splits such a group across the end of the array, writing a PadRecord over the remaining
// slots instead. The producer reads `tail` once per sample, checks tail <= head and
// head - tail <= capacity, and trusts nothing else in the region.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvpmu::ring {

inline constexpr uint32_t kMagic = 0x52505648;  // "HVPR" little-endian
inline constexpr uint16_t kVersion = 2;       // samples only
inline constexpr uint16_t kVersionSched = 3;  // samples and scheduling records
inline constexpr uint32_t kHeaderSize = 4096;   // records start one page in
inline constexpr uint32_t kRecordSize = 64;
inline constexpr uint32_t kFramesPerRecord = 7;
inline constexpr uint32_t kMaxBacktraceDepth = 64;
inline constexpr uint32_t kMinCapacity = 64;
inline constexpr uint32_t kMaxCapacity = 1u << 20;
inline constexpr uint32_t kCacheLine = 64;

enum class RingKind : uint16_t {
  kVcpu = 0,  // samples of one vCPU of the ring's domain
  kPcpu = 1,   // primary only: hypervisor samples of one physical CPU with no profiled vCPU (idle)
  kSched = 2,  // primary only, on request: scheduling records of one physical CPU (version 3)
};

// Why a sample did not reach a ring. Indexes RingHeader::lost and the engine's statistics.
enum class LossReason : uint32_t {
  kRingFull = 0,          // the consumer fell behind
  kCorruptIndex = 1,      // the consumer wrote a tail the producer cannot accept
  kNoRing = 2,            // the vCPU has no ring (it appeared after get_buffer)
  kUnprofiledDomain = 3,  // the running domain is neither activated nor passive
  kCount = 4,
};
inline constexpr uint32_t kLossSlots = 8;  // room for reasons added later

enum class Mode : uint8_t { kUser = 0, kKernel = 1, kHypervisor = 2 };
inline constexpr uint32_t kModeCount = 3;

enum class RecordKind : uint8_t {
  kSample = 1,
  kPad = 2,        // skip `slots` slots, this one included; only ever before the array's end
  kFrames = 3,     // continuation of the preceding SampleRecord's backtrace
  kSched = 4,      // a scheduling event (v3 rings): SchedRecord, `slots` slots long
  kSchedMore = 5,  // continuation of the preceding SchedRecord (a type that needs more room)
};

// RingHeader::flags
inline constexpr uint32_t kRingHasSched = 1u << 0;  // v3: a scheduling ring

// A vCPU's (or a task's) state, as Xen's runstates are numbered.
enum class Runstate : uint8_t {
  kRunning = 0,   // on a pCPU
  kRunnable = 1,  // ready, waiting for a pCPU
  kBlocked = 2,   // waiting for something else (I/O, a timer, an event)
  kOffline = 3,   // down, or gone
};
inline constexpr uint32_t kRunstateCount = 4;

enum class SchedType : uint8_t {
  kRunstate = 1,  // the subject went from old_state to new_state on pcpu
  kWakeup = 2,    // the subject was woken (blocked -> runnable) by `other` when known
  kMigrate = 3,   // the subject moved from from_pcpu to to_pcpu
  kLost = 4,      // `count` scheduling records were lost on this pCPU before this one
};
inline constexpr uint8_t kMaxSchedType = 4;

// SchedRecord::flags
inline constexpr uint8_t kSchedPidValid = 1u << 0;    // pid/tid name the subject (a task)
inline constexpr uint8_t kSchedOtherValid = 1u << 1;  // other_* name someone (the waker)
inline constexpr uint8_t kSchedDerived = 1u << 2;     // inferred by the host, not reported to it

// SampleRecord::flags
inline constexpr uint16_t kFlagPidValid = 1u << 0;           // pid/tid are meaningful
inline constexpr uint16_t kFlagAddressSpaceValid = 1u << 1;  // address_space is meaningful
inline constexpr uint16_t kFlagBacktraceTruncated = 1u << 2; // the walk stopped at the depth
inline constexpr uint16_t kFlagGuest = 1u << 3;              // taken in a hardware guest (VMX/SVM)

inline constexpr uint32_t kNoPid = 0xFFFFFFFFu;
inline constexpr uint16_t kUnknownPcpu = 0xFFFFu;  // SampleRecord::pcpu of a legacy record

struct SampleRecord {
  uint8_t kind;     // RecordKind::kSample
  uint8_t mode;     // Mode
  uint8_t event;    // counter index that overflowed
  uint8_t nframes;  // return addresses in the FramesRecords that follow
  uint16_t flags;
  uint16_t pcpu;
  uint64_t ip;
  uint64_t time_ns;        // platform monotonic clock
  uint64_t period;         // events this sample stands for (the counter's reload count)
  uint64_t address_space;  // page-table root or other address-space tag
  uint32_t pid;            // execution context, kNoPid if unknown
  uint32_t tid;
  uint16_t domain;
  uint16_t vcpu;
  uint32_t reserved0;
  uint64_t reserved1;
};

struct FramesRecord {
  uint8_t kind;   // RecordKind::kFrames
  uint8_t count;  // 1..kFramesPerRecord
  uint8_t reserved[6];
  uint64_t ip[kFramesPerRecord];  // return addresses, innermost first
};

struct PadRecord {
  uint8_t kind;  // RecordKind::kPad
  uint8_t reserved0[3];
  uint32_t slots;  // slots covered, including this one
  uint64_t reserved1[7];
};

// One scheduling event: the first slot of a group of `slots` slots (the rest kSchedMore). Every
// type defined so far takes one slot; a reader skips a type it does not know by `slots`.
struct SchedRecord {
  uint8_t kind;       // RecordKind::kSched
  uint8_t type;       // SchedType
  uint8_t slots;      // 1 + the kSchedMore slots that follow
  uint8_t flags;      // kSched*
  uint16_t pcpu;      // the pCPU whose scheduler recorded it (the ring's index)
  uint8_t old_state;  // Runstate: the state left
  uint8_t new_state;  // Runstate: the state entered
  uint64_t time_ns;   // the platform's clock, as SampleRecord::time_ns
  uint16_t domain;    // the subject: a vCPU (kDomainIdle and the pCPU for the idle vCPU)
  uint16_t vcpu;
  uint32_t pid;       // with kSchedPidValid, the task (linux); else kNoPid
  uint32_t tid;
  uint16_t other_domain;  // with kSchedOtherValid: the waker
  uint16_t other_vcpu;
  uint32_t other_pid;
  uint32_t other_tid;
  uint16_t from_pcpu;  // kMigrate; kWakeup: the pCPU the subject is to run on, or kUnknownPcpu
  uint16_t to_pcpu;
  uint32_t reserved0;
  uint64_t count;      // kLost: records lost
  uint64_t aux;        // kLost: the time of the first of them
};

struct RingHeader {
  // Written once by the producer before the region is shared.
  uint32_t magic;
  uint16_t version;
  uint16_t ring_kind;     // RingKind
  uint32_t header_bytes;  // offset of slot 0 from the header: kHeaderSize
  uint32_t record_size;   // kRecordSize
  uint32_t capacity;      // slots, a power of two
  uint16_t domain;        // whose samples: the owner, or the primary for pCPU rings
  uint16_t index;         // vCPU id for kVcpu rings, pCPU id for kPcpu rings
  uint32_t watermark;     // fill level (slots) at which the producer notifies; informational
  uint32_t flags;
  uint8_t reserved0[kCacheLine - 32];

  alignas(kCacheLine) uint64_t head;  // producer-owned
  uint8_t reserved1[kCacheLine - 8];

  alignas(kCacheLine) uint64_t tail;  // consumer-owned
  uint8_t reserved2[kCacheLine - 8];

  // Producer statistics: stores of the producer's private counts, never read back by it.
  alignas(kCacheLine) uint64_t samples[kModeCount];  // per Mode, samples written
  uint64_t lost[kLossSlots];                          // per LossReason
  uint64_t notifications;                             // notifications sent
  uint8_t reserved3[2 * kCacheLine - (kModeCount + kLossSlots + 1) * 8];

  // Version 3 (kRingHasSched) only; zero otherwise. Producer statistics, as above.
  alignas(kCacheLine) uint64_t sched_written;  // scheduling records written
  uint64_t sched_lost[kLossSlots];             // per LossReason, scheduling records lost
  uint8_t reserved4[2 * kCacheLine - (1 + kLossSlots) * 8];
};

static_assert(sizeof(SampleRecord) == kRecordSize && sizeof(FramesRecord) == kRecordSize);
static_assert(sizeof(PadRecord) == kRecordSize);
static_assert(offsetof(SampleRecord, ip) == 8 && offsetof(SampleRecord, pid) == 40);
static_assert(offsetof(SampleRecord, domain) == 48 && offsetof(SampleRecord, vcpu) == 50);
static_assert(offsetof(FramesRecord, ip) == 8 && offsetof(PadRecord, slots) == 4);
static_assert(offsetof(RingHeader, head) == 64 && offsetof(RingHeader, tail) == 128);
static_assert(offsetof(RingHeader, samples) == 192 && offsetof(RingHeader, lost) == 216);
static_assert(sizeof(SchedRecord) == kRecordSize);
static_assert(offsetof(SchedRecord, time_ns) == 8 && offsetof(SchedRecord, domain) == 16);
static_assert(offsetof(SchedRecord, other_domain) == 28 && offsetof(SchedRecord, from_pcpu) == 40);
static_assert(offsetof(SchedRecord, count) == 48 && offsetof(SchedRecord, aux) == 56);
static_assert(offsetof(RingHeader, sched_written) == 320 && offsetof(RingHeader, sched_lost) == 328);
static_assert(sizeof(RingHeader) == 448 && sizeof(RingHeader) <= kHeaderSize);

// Bytes of one ring: the header page plus the slots (a whole number of pages for
// capacity >= kMinCapacity).
constexpr uint64_t RingBytes(uint32_t capacity) {
  return kHeaderSize + static_cast<uint64_t>(capacity) * kRecordSize;
}

constexpr uint32_t FrameRecordsFor(uint32_t nframes) {
  return (nframes + kFramesPerRecord - 1) / kFramesPerRecord;
}

// Memory-ordering helpers usable on both sides (freestanding and user space).
inline uint64_t LoadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void StoreRelease(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
inline uint64_t LoadRelaxed(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
inline void StoreRelaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

}  // namespace hvpmu::ring
