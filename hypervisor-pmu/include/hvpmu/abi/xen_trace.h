// Xen 4.17's trace buffers (xen/include/public/trace.h, xen/common/trace.c), the mechanism
// xentrace reads: what hvprof's xen link reads scheduling records from (docs/xen.md,
// Scheduling), and what the simulator's Xen-layout producer writes for the tests.
//
// Layout, as Xen 4.17 shares it with dom0:
// - t_info: `t_info_pages` contiguous pages, read-only. A u16 `tbuf_size` (pages per CPU), then
//   u16 `mfn_offset[cpu]`: where CPU cpu's list of page frame numbers starts, in u32 words from
//   the start of t_info (0: the CPU has no buffer). The lists are u32 words (trace.c writes
//   them so, though trace.h's comment says unsigned long); their start depends on Xen's NR_CPUS,
//   so a reader uses mfn_offset and never computes it.
// - per CPU: `tbuf_size` pages, each its own frame (not contiguous), read-write. The first page
//   starts with TraceBuf {cons, prod}; the data area (data_size = tbuf_size * 4096 - 8 bytes)
//   follows it and runs on into the next pages. cons and prod are byte offsets modulo
//   2 * data_size; a record is at offset (x mod data_size) of the data area.
// - a record: a u32 header (event:28, extra words:3, cycles:1), then the TSC (two u32 words,
//   low first) when the cycles bit is set, then the extra words. Records never wrap the end of
//   the data area: Xen pads it first with a kTraceWrapBuffer record of exactly the room left.
// - Xen refuses (and disables tracing for good) a cons or prod that is not 4-aligned or not
//   below 2 * data_size: the consumer must never write such a cons.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvpmu::xentrace {

inline constexpr uint32_t kPageSize = 4096;
inline constexpr uint32_t kDomidXen = 0x7FF2;  // DOMID_XEN: whose frames the buffers are
inline constexpr uint32_t kVirqTbuf = 4;       // VIRQ_TBUF: global, dom0; a buffer passed half full

// The record header word.
inline constexpr uint32_t kEventMask = 0x0FFFFFFFu;  // TRC_HD_TO_EVENT
inline constexpr uint32_t kExtraShift = 28;          // TRACE_EXTRA_SHIFT
inline constexpr uint32_t kExtraMax = 7;             // TRACE_EXTRA_MAX: extra u32 words
inline constexpr uint32_t kCycleFlag = 1u << 31;     // TRC_HD_CYCLE_FLAG: the TSC follows

constexpr uint32_t HeaderWord(uint32_t event, uint32_t extra_words, bool cycles) {
  return (event & kEventMask) | ((extra_words & kExtraMax) << kExtraShift) | (cycles ? kCycleFlag : 0u);
}
constexpr uint32_t EventOf(uint32_t header) { return header & kEventMask; }
constexpr uint32_t ExtraWordsOf(uint32_t header) { return (header >> kExtraShift) & kExtraMax; }
constexpr bool HasCycles(uint32_t header) { return (header & kCycleFlag) != 0; }
// calc_rec_size: header, TSC, extra words.
constexpr uint32_t RecordSize(bool cycles, uint32_t extra_words) { return 4 + (cycles ? 8 : 0) + 4 * extra_words; }

// Classes and masks (the event mask xc_tbuf_set_evt_mask sets is global to the host).
inline constexpr uint32_t kClassShift = 16;     // TRC_CLS_SHIFT
inline constexpr uint32_t kSubclassShift = 12;  // TRC_SUBCLS_SHIFT
inline constexpr uint32_t kTrcGen = 0x0001F000;           // TRC_GEN
inline constexpr uint32_t kTrcSched = 0x0002F000;         // TRC_SCHED
inline constexpr uint32_t kTrcSchedMin = 0x00021000;      // TRC_SCHED_MIN: runstate changes
inline constexpr uint32_t kTrcSchedClass = 0x00022000;    // TRC_SCHED_CLASS: per scheduler
inline constexpr uint32_t kTrcSchedVerbose = 0x00028000;  // TRC_SCHED_VERBOSE
inline constexpr uint32_t kTrcAll = 0x0FFFF000;           // TRC_ALL: Xen's mask at boot
// What hvprof asks for: runstate changes and the verbose scheduling events (wake-ups), not the
// schedulers' own internals.
inline constexpr uint32_t kHvprofEventMask = kTrcSchedMin | kTrcSchedVerbose;  // 0x00029000

// Event ids.
inline constexpr uint32_t kLostRecords = kTrcGen + 1;      // TRC_LOST_RECORDS
inline constexpr uint32_t kTraceWrapBuffer = kTrcGen + 2;  // TRC_TRACE_WRAP_BUFFER
inline constexpr uint32_t kTraceCpuChange = kTrcGen + 3;   // TRC_TRACE_CPU_CHANGE: xentrace's files only
// TRC_SCHED_RUNSTATE_CHANGE is a base: Xen ORs the old state << 8 and the new state << 4 into it.
inline constexpr uint32_t kRunstateChange = kTrcSchedMin + 1;  // 0x00021001
inline constexpr uint32_t kContinueRunning = kTrcSchedMin + 2;  // 0x00021002
inline constexpr uint32_t kSchedWake = kTrcSchedVerbose + 4;    // 0x00028004 {domain, vcpu}
inline constexpr uint32_t kSchedSwitchInfPrev = kTrcSchedVerbose + 14;
inline constexpr uint32_t kSchedSwitchInfNext = kTrcSchedVerbose + 15;

constexpr uint32_t RunstateChangeEvent(uint32_t old_state, uint32_t new_state) {
  return kRunstateChange | ((old_state & 3u) << 8) | ((new_state & 3u) << 4);
}
// A runstate change of any pair of states (xenalyze reads them so too).
constexpr bool IsRunstateChange(uint32_t event) {
  return (event & 0x0FFFF000u) == kTrcSchedMin && (event & 0xFu) == 1 && (event & 0xC00u) == 0 && (event & 0xCCu) == 0;
}
constexpr uint32_t RunstateOld(uint32_t event) { return (event >> 8) & 3u; }
constexpr uint32_t RunstateNew(uint32_t event) { return (event >> 4) & 3u; }

// The one extra word of a runstate change or continue-running: {vcpu:16 (low), domain:16}.
constexpr uint32_t VcpuWord(uint32_t domain, uint32_t vcpu) { return (vcpu & 0xFFFFu) | ((domain & 0xFFFFu) << 16); }

// xen/include/public/vcpu.h's RUNSTATE_*.
inline constexpr uint32_t kRunstateRunning = 0;
inline constexpr uint32_t kRunstateRunnable = 1;
inline constexpr uint32_t kRunstateBlocked = 2;
inline constexpr uint32_t kRunstateOffline = 3;

inline constexpr uint32_t kDomidIdle = 0x7FFF;  // DOMID_IDLE: the idle vCPU of a CPU (vcpu = the CPU)

struct TraceBuf {  // struct t_buf
  uint32_t cons;   // next byte the consumer reads (modulo 2 * data_size)
  uint32_t prod;   // next byte Xen writes
};

// struct t_info's fixed part; mfn_offset[] follows tbuf_size.
struct TraceInfoHeader {
  uint16_t tbuf_size;  // pages per CPU
};

// TRC_LOST_RECORDS's four extra words (with the TSC of its insertion).
struct LostRecordsData {
  uint32_t lost;       // records lost on this CPU
  uint16_t domain;     // who ran when the marker was written, not whose records were lost
  uint16_t vcpu;
  uint32_t first_tsc_lo;  // the TSC of the first loss
  uint32_t first_tsc_hi;
};
inline constexpr uint32_t kLostRecordSize = 4 + 8 + 16;  // LOST_REC_SIZE

constexpr uint32_t DataSize(uint32_t tbuf_pages) { return tbuf_pages * kPageSize - static_cast<uint32_t>(sizeof(TraceBuf)); }
// Bytes written and not yet consumed, for a valid cons and prod.
constexpr uint32_t Unconsumed(uint32_t prod, uint32_t cons, uint32_t data_size) {
  return prod >= cons ? prod - cons : prod + 2 * data_size - cons;
}
// What Xen takes for a bogus index (trace.c's bogus()).
constexpr bool ValidIndex(uint32_t index, uint32_t data_size) { return (index & 3u) == 0 && index < 2 * data_size; }

static_assert(sizeof(TraceBuf) == 8 && offsetof(TraceBuf, prod) == 4);
static_assert(sizeof(TraceInfoHeader) == 2);
static_assert(sizeof(LostRecordsData) == 16 && RecordSize(true, 4) == kLostRecordSize);
static_assert(RunstateChangeEvent(kRunstateRunning, kRunstateBlocked) == 0x00021021);
static_assert(RunstateChangeEvent(kRunstateRunnable, kRunstateRunning) == 0x00021101);
static_assert(RunstateChangeEvent(kRunstateBlocked, kRunstateRunnable) == 0x00021211);
static_assert(IsRunstateChange(0x00021331) && !IsRunstateChange(kContinueRunning) && !IsRunstateChange(0x00021002));
static_assert(kHvprofEventMask == 0x00029000);
static_assert(HeaderWord(kLostRecords, 4, true) == 0xC001F001u);

}  // namespace hvpmu::xentrace
