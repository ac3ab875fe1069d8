// hvprof's profiling operations: the legacy ops 0-17 (xenoprof_legacy.h) plus extension ops
// numbered from 0x100. Extension arguments are extensible structs: `struct_size` first, set by
// the caller to sizeof(the struct it knows), then `abi_version`, and reserved words that must
// be zero. See docs/abi.md ("Operations").
#pragma once

#include <cstddef>
#include <cstdint>

#include "hvpmu/abi/ring.h"
#include "hvpmu/abi/xenoprof_legacy.h"

namespace hvpmu {

using DomainId = uint16_t;
inline constexpr DomainId kDomainSelf = 0x7FF0;     // DOMID_SELF
inline constexpr DomainId kDomainXen = 0x7FF2;      // DOMID_XEN: hypervisor memory
inline constexpr DomainId kDomainInvalid = 0x7FF4;  // DOMID_INVALID
inline constexpr DomainId kDomainIdle = 0x7FFF;     // DOMID_IDLE
inline constexpr DomainId kMaxDomainId = 0x7FEF;    // DOMID_FIRST_RESERVED - 1

inline constexpr uint32_t kAbiVersion = 2;
inline constexpr uint32_t kMaxListedDomains = 4096;  // active plus passive
inline constexpr uint32_t kMaxVcpus = 128;         // per profiled domain
inline constexpr uint32_t kMaxVcpuRings = 8192;    // vCPU rings of all listed domains together
inline constexpr uint32_t kMaxCpus = 256;          // physical CPUs
inline constexpr uint32_t kMaxCounters = 16;       // logical counters (general + fixed)
inline constexpr uint32_t kCpuTypeSize = legacy::kCpuTypeSize;

enum ExtensionOp : uint32_t {
  kOpInitV2 = 0x100,        // InitV2: init, with the full PMU description
  kOpStatus = 0x101,        // Status: engine state and per-domain roles (any caller)
  kOpGetBufferV2 = 0x102,   // BufferV2: the caller's own v2 rings
  kOpSetPassiveV2 = 0x103,  // BufferV2: a passive domain's v2 rings, shared with the primary
};

// Returns true for the op numbers the engine knows.
constexpr bool IsKnownOp(uint32_t op) {
  return op <= legacy::kOpLast || (op >= kOpInitV2 && op <= kOpSetPassiveV2);
}

enum class PmuKind : uint32_t {
  kNone = 0,
  kIntelArchPerfmon = 1,  // Intel architectural perfmon v1-v5
  kAmdLegacy = 2,         // AMD K8..family 16h, 4 counters at 0xC0010000
  kAmdCore = 3,           // AMD family 15h and later (Zen), 6 counters at 0xC0010200
  kExternal = 4,          // counters owned by the platform (Linux perf_event)
  kTimer = 5,             // no counters: a periodic timer interrupt samples (TimerSource)
};

// InitV2::flags
inline constexpr uint32_t kPmuFullWidthWrites = 1u << 0;  // Intel IA32_A_PMCx in use
inline constexpr uint32_t kPmuGlobalControl = 1u << 1;    // GLOBAL_CTRL/STATUS/OVF_CTRL in use

struct InitV2 {
  uint32_t struct_size;  // in: sizeof(InitV2)
  uint32_t abi_version;  // in: the caller's; out: the engine's
  uint32_t is_primary;   // out
  uint16_t caller_domain;  // out: the domain the engine believes is calling
  uint16_t pad0;
  uint32_t pmu_kind;     // out: PmuKind
  uint32_t pmu_version;  // out: Intel arch perfmon version, or 0
  uint32_t num_counters;        // out: general-purpose + fixed
  uint32_t num_gp_counters;     // out: logical counters 0..num_gp_counters-1
  uint32_t num_fixed_counters;  // out: logical counters that follow the general ones
  uint32_t gp_counter_width;    // out: bits
  uint32_t fixed_counter_width; // out: bits
  uint32_t num_pcpus;    // out
  uint32_t flags;        // out: kPmu* flags
  uint32_t pad1;
  uint64_t max_count;    // out: the largest count a general-purpose counter accepts
  char cpu_type[kCpuTypeSize];  // out: NUL-terminated, e.g. "i386/arch_perfmon"
  uint64_t reserved[8];
};
static_assert(sizeof(InitV2) == 192);

// BufferV2::flags
inline constexpr uint32_t kBufferHasPcpuRings = 1u << 0;  // out: rings nbuf_vcpu.. are pCPU rings
// In (get_buffer_v2 by the primary): also one scheduling ring per pCPU. Out: granted, the last
// nbuf_sched rings are they. An engine that predates it ignores the bit and never sets it.
inline constexpr uint32_t kBufferSchedRings = 1u << 1;

struct BufferV2 {
  uint32_t struct_size;       // in: sizeof(BufferV2)
  uint32_t abi_version;       // in
  uint16_t domain;            // in for set_passive_v2; out for get_buffer_v2
  uint16_t pad0;
  uint32_t capacity;          // in: slots wanted per ring; out: effective (power of two)
  uint32_t watermark;         // in: notify at this fill, 0 = capacity / 2; out: effective
  uint32_t nbuf;              // out: rings in the region
  uint32_t nbuf_vcpu;         // out: vCPU rings (indexes 0..nbuf_vcpu-1); the rest are pCPU rings
  uint32_t flags;             // in: kBufferSchedRings; out: kBuffer*
  uint64_t ring_bytes;        // out: bytes per ring; ring i starts at i * ring_bytes
  uint64_t region_bytes;      // out
  uint64_t region_handle;     // out: platform handle for mapping the region
  uint32_t nbuf_sched;        // out: scheduling rings, the last of the region's rings
  uint32_t pad1;
  uint64_t reserved[3];
};
static_assert(sizeof(BufferV2) == 88);

enum class EngineState : uint32_t {
  kIdle = 0,
  kInitialized = 1,
  kCountersReserved = 2,
  kReady = 3,
  kProfiling = 4,
};

enum class DomainRole : uint32_t {
  kIgnored = 0,  // known to the engine but not profiled
  kActive = 1,   // on the active list
  kPassive = 2,  // on the passive list
};

enum class RingFormat : uint32_t { kNone = 0, kLegacy = 1, kV2 = 2 };

struct DomainStatus {
  uint16_t domain;
  uint16_t num_rings;
  uint32_t role;          // DomainRole
  uint32_t activated;     // 1 once the domain called enable_virq (active domains)
  uint32_t ring_format;   // RingFormat
  uint32_t capacity;      // slots (v2) or records (legacy) per ring
  uint32_t shared;        // 1 while the rings are shared with their consumer
  uint64_t samples[ring::kModeCount];  // in its vCPU rings (idle samples are apart)
  uint64_t lost[ring::kLossSlots];
  uint64_t max_fill;      // highest fill level seen by the producer, in slots
};
static_assert(sizeof(DomainStatus) == 120);

// Domains per status call: a caller pages through more with Status::from_domain.
inline constexpr uint32_t kStatusMaxDomains = 64;
// Status::flags: the host names the task (pid, tid) of every guest sample it can. Xen does not:
// it knows vCPUs, not the guest kernel's tasks; the agent of a Linux domain then finds them
// itself (docs/xen.md).
inline constexpr uint32_t kStatusNamesTasks = 1u << 0;

// A logical counter as set up by the primary (the counter op), so that an active guest knows
// what its samples count.
struct CounterStatus {
  uint8_t enabled;
  uint8_t unit_mask;
  uint8_t kernel;
  uint8_t user;
  uint16_t event;
  uint16_t pad;
  uint64_t count;  // events per sample
};
static_assert(sizeof(CounterStatus) == 16);

struct Status {
  uint32_t struct_size;  // in: sizeof(Status)
  uint32_t abi_version;  // in
  uint32_t state;        // EngineState
  uint16_t primary;      // kDomainInvalid when there is none
  uint16_t caller;
  uint32_t pmu_kind;
  uint32_t num_counters;
  uint32_t enabled_counters;  // bitmask of logical counters set up
  uint32_t backtrace_depth;
  uint32_t num_pcpus;
  uint32_t num_active;     // on the active list
  uint32_t num_activated;  // of which called enable_virq
  uint32_t num_passive;
  uint64_t total_samples;  // PMIs turned into samples, all domains
  uint64_t lost[ring::kLossSlots];  // engine-wide, per LossReason
  uint64_t idle_samples;   // taken in the idle domain
  char cpu_type[kCpuTypeSize];
  uint32_t num_domains;    // valid entries below; a non-primary caller sees only itself
  uint32_t total_domains;  // entries with an id >= from_domain; more than num_domains: call again
  CounterStatus counters[kMaxCounters];  // valid once counters are set up (state ready or later)
  uint32_t from_domain;    // in: the lowest domain id to list (0 for the first page)
  uint32_t pad1;
  // The engine's clock when it answered: the clock of the samples' `time` (Xen's system time
  // under Xen). An agent brackets the op with its own clock to relate the two. 0 from an engine
  // before the field.
  uint64_t now_ns;
  uint32_t flags;  // kStatus*
  uint32_t pad2;
  uint64_t reserved[1];
  DomainStatus domains[kStatusMaxDomains];
};

}  // namespace hvpmu
