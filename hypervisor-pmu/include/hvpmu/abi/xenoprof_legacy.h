// The legacy Xen 4.17 xenoprof ABI (xen/include/public/xenoprof.h), byte-exact for x86-64.
//
// These layouts are pinned with static_asserts below and compared field by field with the
// real <xen/xenoprof.h> in tests/unit/abi_legacy_test.cpp. Padding that Xen leaves implicit
// is spelled out so the structs can be copied across a boundary without leaking bytes.
// Semantics and quirks: docs/abi.md ("Legacy rings") and ../shared/reference/xenoprof.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvpmu::legacy {

inline constexpr uint32_t kHypercallXenoprofOp = 31;  // __HYPERVISOR_xenoprof_op
inline constexpr uint32_t kVirqXenoprof = 7;          // VIRQ_XENOPROF, per vCPU

enum Op : uint32_t {
  kOpInit = 0,
  kOpResetActiveList = 1,
  kOpResetPassiveList = 2,
  kOpSetActive = 3,
  kOpSetPassive = 4,
  kOpReserveCounters = 5,
  kOpCounter = 6,
  kOpSetupEvents = 7,
  kOpEnableVirq = 8,
  kOpStart = 9,
  kOpStop = 10,
  kOpDisableVirq = 11,
  kOpReleaseCounters = 12,
  kOpShutdown = 13,
  kOpGetBuffer = 14,
  kOpSetBacktrace = 15,
  kOpGetIbsCaps = 16,
  kOpIbsCounter = 17,
  kOpLast = 17,
};

inline constexpr uint32_t kMaxOprofEvents = 32;     // MAX_OPROF_EVENTS
inline constexpr uint32_t kMaxOprofDomains = 25;    // MAX_OPROF_DOMAINS
inline constexpr uint32_t kCpuTypeSize = 64;        // XENOPROF_CPU_TYPE_SIZE
inline constexpr uint64_t kEscapeCode = ~0ULL;      // XENOPROF_ESCAPE_CODE
inline constexpr uint8_t kTraceBegin = 1;           // XENOPROF_TRACE_BEGIN
inline constexpr uint32_t kMaxSharedPages = 32;     // Xen's per-domain cap (internal)

// event_log.mode
enum Mode : uint8_t { kModeUser = 0, kModeKernel = 1, kModeXen = 2 };

struct EventLog {  // struct event_log
  uint64_t eip;
  uint8_t mode;
  uint8_t event;
  uint8_t pad[6];
};

// struct xenoprof_buf. Xen declares event_log[1]; the real length is the ring size. Code
// addresses records as (bytes at kBufHeaderSize) + i * sizeof(EventLog), never through the
// one-element array.
struct XenoprofBuf {
  uint32_t event_head;  // producer (Xen) index, modulo the ring size
  uint32_t event_tail;  // consumer index
  uint32_t event_size;  // ring size in records, informational
  uint32_t vcpu_id;
  uint64_t xen_samples;
  uint64_t kernel_samples;
  uint64_t user_samples;
  uint64_t lost_samples;
  EventLog event_log[1];
};
inline constexpr size_t kBufHeaderSize = 48;

struct Init {  // struct xenoprof_init
  int32_t num_events;
  int32_t is_primary;
  char cpu_type[kCpuTypeSize];
};

struct GetBuffer {  // struct xenoprof_get_buffer
  int32_t max_samples;  // in
  int32_t nbuf;         // out
  int32_t bufsize;      // out: bytes per vCPU ring, header included
  uint32_t pad;
  uint64_t buf_gmaddr;  // out: machine address of the first page
};

struct Counter {  // struct xenoprof_counter
  uint32_t ind;
  uint32_t pad0;
  uint64_t count;
  uint32_t enabled;
  uint32_t event;
  uint32_t hypervisor;  // ignored by Xen and by hvprof (see docs/abi.md)
  uint32_t kernel;      // OS bit: counts at CPL 0
  uint32_t user;        // USR bit: counts at CPL > 0
  uint32_t pad1;
  uint64_t unit_mask;
};

struct Passive {  // xenoprof_passive_t
  uint16_t domain_id;
  uint16_t pad;
  int32_t max_samples;
  int32_t nbuf;
  int32_t bufsize;
  uint64_t buf_gmaddr;
};

struct IbsCounter {  // struct xenoprof_ibs_counter
  uint64_t op_enabled;
  uint64_t fetch_enabled;
  uint64_t max_cnt_fetch;
  uint64_t max_cnt_op;
  uint64_t rand_en;
  uint64_t dispatched_ops;
};

using DomainIdArg = uint16_t;        // set_active takes a domid_t
using BacktraceDepthArg = uint64_t;  // set_backtrace takes an unsigned long

static_assert(sizeof(EventLog) == 16 && alignof(EventLog) == 8);
static_assert(offsetof(EventLog, mode) == 8 && offsetof(EventLog, event) == 9);
static_assert(sizeof(XenoprofBuf) == 64 && offsetof(XenoprofBuf, event_log) == kBufHeaderSize);
static_assert(offsetof(XenoprofBuf, xen_samples) == 16 && offsetof(XenoprofBuf, lost_samples) == 40);
static_assert(sizeof(Init) == 72 && offsetof(Init, cpu_type) == 8);
static_assert(sizeof(GetBuffer) == 24 && offsetof(GetBuffer, buf_gmaddr) == 16);
static_assert(sizeof(Counter) == 48 && offsetof(Counter, count) == 8);
static_assert(offsetof(Counter, user) == 32 && offsetof(Counter, unit_mask) == 40);
static_assert(sizeof(Passive) == 24 && offsetof(Passive, max_samples) == 4);
static_assert(offsetof(Passive, buf_gmaddr) == 16);
static_assert(sizeof(IbsCounter) == 48);

// Xen's sizing of a domain's shared buffer (alloc_xenoprof_struct): rings of
// 48 + 16 * max_samples bytes packed back to back, capped at 32 pages per domain.
struct LegacyBufferLayout {
  int32_t max_samples;  // effective ring size in records (holds max_samples - 1)
  int32_t bufsize;      // bytes per ring
  uint32_t npages;      // pages shared with the consumer
};

constexpr LegacyBufferLayout ComputeLegacyBufferLayout(uint32_t nvcpu, int32_t requested) {
  constexpr uint32_t kPage = 4096;
  const uint32_t entry = sizeof(EventLog);
  const uint32_t header = sizeof(XenoprofBuf);
  const uint32_t max_bufsize = (kMaxSharedPages * kPage) / nvcpu;
  const uint32_t max_max_samples = (max_bufsize - header) / entry + 1;
  // Xen compares unsigned, so a negative request clamps to the maximum.
  uint32_t samples = static_cast<uint32_t>(requested);
  if (samples > max_max_samples) samples = max_max_samples;
  const uint32_t bufsize = header + (samples - 1) * entry;
  const uint32_t npages = (nvcpu * bufsize + kPage - 1) / kPage;
  return {static_cast<int32_t>(samples), static_cast<int32_t>(bufsize), npages};
}

}  // namespace hvpmu::legacy
