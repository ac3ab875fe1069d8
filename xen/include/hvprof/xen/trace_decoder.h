// Xen's trace records (hvpmu/abi/xen_trace.h) as hvprof's scheduling records (ring::SchedRecord):
// a pure decoder, fed the bytes the consumer copied out of each CPU's buffer (Decode, CPU by CPU,
// each CPU's windows in order), which hands on what it read merged by time across CPUs (Flush),
// as a vCPU's records are spread over the CPUs that traced them. At one time, a records-lost mark
// and a record that changes nothing come first, then one that takes a vCPU off a pCPU, then the
// others, and one that puts a vCPU on a pCPU last (the report's order, docs/sched.md); one CPU's
// records keep their order otherwise.
//
// - TRC_SCHED_RUNSTATE_CHANGE (old<<8 | new<<4) -> Runstate old -> new;
//   TRC_SCHED_CONTINUE_RUNNING -> Runstate running -> running (a state as it stands).
// - TRC_SCHED_WAKE followed on that CPU by the vCPU's change from blocked (or offline) ->
//   Wakeup, then the Runstate. A wake of a vCPU that was not blocked changes nothing (counted).
// - Xen 4.17 has no generic migration record: a vCPU that starts running on another pCPU than
//   the one it last ran on gets a Migrate (flag kSchedDerived) before its Runstate.
// - TRC_LOST_RECORDS -> Lost (count, the time of the first loss).
// - TRC_TRACE_WRAP_BUFFER is padding (counted); other ids of the scheduling class are counted as
//   ignored, ids of any other class as unknown; a record that runs past the window is truncated
//   and ends the window. A runstate change whose old state is not the one tracked is counted
//   (inconsistent), and believed.
// Records of one Flush are merged with each other only: a CPU's record read after a later one of
// another CPU was handed on (a race between the copies of two buffers) comes late.
// Times: the records' TSC as nanoseconds, tsc * 10^6 / cpu_khz (xc_physinfo's cpu_khz).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "hvpmu/abi/ring.h"

namespace hvprof::xen {

struct TraceDecodeStats {
  uint64_t records = 0;          // Xen records read, padding included
  uint64_t sched_records = 0;    // SchedRecords handed on
  uint64_t runstate = 0;         // runstate changes and continue-running records
  uint64_t wakeups = 0;          // Wakeups handed on
  uint64_t redundant_wakes = 0;  // WAKE of a vCPU that was not blocked (or without its change)
  uint64_t migrations = 0;       // Migrates derived
  uint64_t lost_markers = 0;     // TRC_LOST_RECORDS records
  uint64_t lost_records = 0;     // the records they say were lost
  uint64_t wrap_records = 0;     // TRC_TRACE_WRAP_BUFFER padding
  uint64_t ignored = 0;          // other scheduling events (SWITCH_INFPREV...), skipped
  uint64_t unknown = 0;          // ids of another class, skipped
  uint64_t no_cycles = 0;        // a scheduling record without its TSC (time taken from the last)
  uint64_t truncated = 0;        // windows that ended inside a record (or a record too short)
  uint64_t inconsistent = 0;     // runstate changes whose old state is not the one tracked
};

class TraceDecoder {
 public:
  using OnSched = std::function<void(const hvpmu::ring::SchedRecord&)>;

  // `cpu_khz` 0 is taken as 1 GHz (TSC ticks as nanoseconds).
  explicit TraceDecoder(uint64_t cpu_khz);

  // Reads the whole records at the start of `window` (copied out of CPU `cpu`'s buffer, in
  // order) and keeps them for Flush. Returns the bytes used: all of them, unless the window
  // ends inside a record.
  size_t Decode(uint16_t cpu, std::span<const uint8_t> window);
  // Hands on the scheduling records read since the last Flush, merged by time.
  void Flush(const OnSched& on_sched);

  uint64_t NsOfTsc(uint64_t tsc) const;
  const TraceDecodeStats& stats() const { return stats_; }

 private:
  struct Vcpu {
    uint8_t state = 0xFF;         // 0xFF: not known yet
    uint16_t last_pcpu = 0xFFFF;  // where it last started running
  };
  struct Pending {
    uint32_t vcpu_word = 0;  // the WAKE's subject
    bool set = false;
  };
  struct Item {  // one record read, until Flush
    uint64_t time_ns;
    uint32_t sequence;  // read order
    uint16_t cpu;
    uint8_t rank;       // the order at one time
    bool lost;          // TRC_LOST_RECORDS, else a runstate change
    bool woken;         // a WAKE of the same vCPU came just before it
    uint8_t old_state;
    uint8_t new_state;
    uint32_t word;      // domain << 16 | vcpu
    uint64_t count;     // lost: records lost, and the time of the first
    uint64_t aux;
  };
  void Apply(const Item& item, const OnSched& on_sched);
  hvpmu::ring::SchedRecord Base(const Item& item, hvpmu::ring::SchedType type) const;
  void Emit(const hvpmu::ring::SchedRecord& record, const OnSched& on_sched);

  uint64_t cpu_khz_;
  std::unordered_map<uint32_t, Vcpu> vcpus_;  // by VcpuWord (domain << 16 | vcpu)
  std::vector<Pending> pending_wake_;         // per CPU
  std::vector<uint64_t> last_ns_;             // per CPU: the time of its last record
  std::vector<Item> items_;                   // read since the last Flush
  uint32_t sequence_ = 0;
  TraceDecodeStats stats_;
};

// The consumer's side of one CPU's buffer, `buffer` being its pages mapped in order (t_buf,
// then the data area of `data_size` bytes): reads cons and prod once, appends the bytes between
// them to `out` (the part up to the end of the data area, then the part from its start), and
// returns the cons to write back once they are used (prod). nullopt, appending nothing, when
// cons or prod is one Xen would take for bogus: nothing may then be written back, as Xen would
// stop tracing.
std::optional<uint32_t> CopyTraceWindow(const uint8_t* buffer, uint32_t data_size, std::vector<uint8_t>* out);
// Writes `cons` back (after the records were used), as xentrace does: a full barrier first.
void ReleaseTraceWindow(uint8_t* buffer, uint32_t cons);

}  // namespace hvprof::xen
