// Xen 4.17's trace buffers on the simulated machine (hvpmu/abi/xen_trace.h): the layout Xen
// shares with dom0 and the producer side of xen/common/trace.c's __trace_var, fed with the
// machine's scheduling records, so that hvprof's xen link can be tested end to end through the
// fake Xen libraries (tests/xen-fake) against the machine's ground truth.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hvpmu/abi/ring.h"

namespace hvprof::sim {

// Where everything is in one block of memory: the t_info pages first, then the CPUs' pages. Page
// p of the block has frame number first_mfn + p. Page j of CPU c is page t_info_pages + j *
// cpus + c, so that with more than one CPU no CPU's pages are contiguous (as Xen allocates them
// one by one): a reader must follow the frame lists.
struct XenTraceLayout {
  uint32_t cpus = 0;
  uint32_t pages_per_cpu = 0;  // t_info's tbuf_size
  uint32_t t_info_pages = 0;
  uint32_t first_offset = 0;  // u32 words from t_info's start to CPU 0's frame list
  uint64_t first_mfn = 0;

  // For `cpus` CPUs of `pages` pages each, with t_info's fixed part sized for `nr_cpus`
  // (Xen's NR_CPUS, at least `cpus`).
  static XenTraceLayout For(uint32_t cpus, uint32_t pages, uint64_t first_mfn, uint32_t nr_cpus = 256);
  uint64_t bytes() const { return (uint64_t{t_info_pages} + uint64_t{cpus} * pages_per_cpu) * 4096; }
  uint64_t PageOf(uint32_t cpu, uint32_t page) const {
    return t_info_pages + uint64_t{page} * cpus + cpu;
  }
  uint32_t data_size() const { return pages_per_cpu * 4096 - 8; }
  // Writes t_info (size, offsets, frame lists) and zeroes every CPU's cons and prod.
  void Format(uint8_t* memory) const;
};

struct XenTraceWriterStats {
  uint64_t written = 0;  // records, the inserted ones included
  uint64_t lost = 0;     // records that found no room
  uint64_t wraps = 0;    // wrap records inserted
  uint64_t lost_markers = 0;
  uint64_t bogus = 0;    // a bogus cons or prod seen: tracing was turned off, as Xen does
};

class XenTraceWriter {
 public:
  XenTraceWriter(uint8_t* memory, const XenTraceLayout& layout);

  // Xen's tb_init_done, tb_event_mask and tb_cpu_mask. Turning tracing off forgets every CPU's
  // count of lost records, as Xen's disable does.
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
  void set_event_mask(uint32_t mask) { event_mask_ = mask; }
  uint32_t event_mask() const { return event_mask_; }
  void set_cpu_mask(uint64_t mask) { cpu_mask_ = mask; }  // CPUs 0-63; higher ones always traced

  // __trace_var on `cpu` at TSC `tsc`: `event` with `extra` (at most 7 words) and the TSC, if it
  // passes the masks and fits; a lost-records record first when records were lost; a wrap
  // record when it would not fit before the end. True when the buffer crossed its high-water
  // mark (half full) from below: the consumer is to be notified (VIRQ_TBUF).
  bool Trace(uint32_t cpu, uint64_t tsc, uint32_t event, std::span<const uint32_t> extra);
  // The machine's scheduling record, as Xen 4.17 traces it: a runstate change (running ->
  // running as continue-running), a wake-up as TRC_SCHED_WAKE. Xen has no generic migration
  // record: migrations are not traced.
  bool TraceSched(uint32_t cpu, uint64_t tsc, const hvpmu::ring::SchedRecord& record);

  const XenTraceWriterStats& stats() const { return stats_; }

 private:
  struct Cpu {
    uint32_t lost = 0;
    uint64_t first_lost_tsc = 0;
    uint32_t current = 0;  // who runs there (domain << 16 | vcpu), for the lost-records record
  };
  uint32_t* Buf(uint32_t cpu) const;  // cons, then prod
  void PutWord(uint32_t cpu, uint32_t position, uint32_t word) const;
  // __insert_record at the CPU's prod, which only this writer moves.
  void Insert(uint32_t cpu, uint32_t event, uint64_t tsc, bool cycles, std::span<const uint32_t> extra);
  void InsertWrap(uint32_t cpu, uint64_t tsc);
  void InsertLost(uint32_t cpu, uint64_t tsc);

  uint8_t* memory_;
  XenTraceLayout layout_;
  uint32_t data_size_;
  bool enabled_ = false;
  uint32_t event_mask_ = 0x0FFFF000;  // TRC_ALL, as Xen boots
  uint64_t cpu_mask_ = ~uint64_t{0};
  std::vector<Cpu> cpus_;
  XenTraceWriterStats stats_;
};

}  // namespace hvprof::sim
