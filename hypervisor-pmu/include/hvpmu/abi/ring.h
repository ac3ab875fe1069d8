// hvprof ring ABI, version 2: the shared memory between the engine (producer) and an agent
// (consumer). The full contract, with who writes each field and the memory ordering, is in
// docs/abi.md; this header is its machine-checked form.
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
inline constexpr uint16_t kVersion = 2;
inline constexpr uint32_t kHeaderSize = 4096;   // records start one page in
inline constexpr uint32_t kRecordSize = 64;
inline constexpr uint32_t kFramesPerRecord = 7;
inline constexpr uint32_t kMaxBacktraceDepth = 64;
inline constexpr uint32_t kMinCapacity = 64;
inline constexpr uint32_t kMaxCapacity = 1u << 20;
inline constexpr uint32_t kCacheLine = 64;

enum class RingKind : uint16_t {
  kVcpu = 0,  // samples of one vCPU of the ring's domain
  kPcpu = 1,  // primary only: hypervisor samples of one physical CPU with no profiled vCPU (idle)
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
  kPad = 2,     // skip `slots` slots, this one included; only ever before the array's end
  kFrames = 3,  // continuation of the preceding SampleRecord's backtrace
};

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
};

static_assert(sizeof(SampleRecord) == kRecordSize && sizeof(FramesRecord) == kRecordSize);
static_assert(sizeof(PadRecord) == kRecordSize);
static_assert(offsetof(SampleRecord, ip) == 8 && offsetof(SampleRecord, pid) == 40);
static_assert(offsetof(SampleRecord, domain) == 48 && offsetof(SampleRecord, vcpu) == 50);
static_assert(offsetof(FramesRecord, ip) == 8 && offsetof(PadRecord, slots) == 4);
static_assert(offsetof(RingHeader, head) == 64 && offsetof(RingHeader, tail) == 128);
static_assert(offsetof(RingHeader, samples) == 192 && offsetof(RingHeader, lost) == 216);
static_assert(sizeof(RingHeader) == 320 && sizeof(RingHeader) <= kHeaderSize);

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
