// Xen's trace records (hvpmu/abi/xen_trace.h) as hvprof's scheduling records (ring::SchedRecord):
// a pure decoder, fed the bytes the consumer copied out of one CPU's buffer. It keeps what it
// needs between windows (each vCPU's state and last pCPU, a wake-up waiting for its runstate
// change), so windows of one CPU must come in order; windows of different CPUs may interleave.
//
// - TRC_SCHED_RUNSTATE_CHANGE (old<<8 | new<<4) -> Runstate old -> new;
//   TRC_SCHED_CONTINUE_RUNNING -> Runstate running -> running (a state as it stands).
// - TRC_SCHED_WAKE followed on that CPU by the vCPU's change from blocked (or offline) ->
//   Wakeup, then the Runstate. A wake of a vCPU that was not blocked changes nothing (counted).
// - Xen 4.17 has no generic migration record: a vCPU that starts running on another pCPU than
//   the one it last ran on gets a Migrate (flag kSchedDerived) before its Runstate. The pCPUs'
//   windows come one after the other, not merged by time: a start older than the vCPU's last
//   one known (another pCPU's window read later) derives nothing and moves nothing, so that no
//   migration is made up; those missed the report derives itself, in time order (docs/sched.md).
// - A runstate change whose old state is not the one the same pCPU's records left the vCPU in
//   is counted (inconsistent); across pCPUs the windows' order cannot tell.
// - TRC_LOST_RECORDS -> Lost (count, the time of the first loss).
// - TRC_TRACE_WRAP_BUFFER is padding (counted); other ids of the scheduling class are counted as
//   ignored, ids of any other class as unknown; a record that runs past the window is truncated
//   and ends the window.
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

  // Decodes the whole records at the start of `window` (copied out of CPU `cpu`'s buffer, in
  // order), handing on scheduling records as they come. Returns the bytes used: all of them,
  // unless the window ends inside a record.
  size_t Decode(uint16_t cpu, std::span<const uint8_t> window, const OnSched& on_sched);

  uint64_t NsOfTsc(uint64_t tsc) const;
  const TraceDecodeStats& stats() const { return stats_; }

 private:
  struct Vcpu {
    uint8_t state = 0xFF;          // 0xFF: not known yet
    uint16_t state_pcpu = 0xFFFF;  // the pCPU whose record said so
    uint16_t last_pcpu = 0xFFFF;   // where it last started running, and when
    uint64_t last_start_ns = 0;
  };
  struct Pending {
    uint32_t vcpu_word = 0;  // the WAKE's subject
    bool set = false;
  };
  void Runstate(uint16_t cpu, uint64_t time_ns, uint32_t word, uint32_t old_state, uint32_t new_state,
                const OnSched& on_sched);
  hvpmu::ring::SchedRecord Base(uint16_t cpu, uint64_t time_ns, uint32_t word, hvpmu::ring::SchedType type) const;
  void Emit(const hvpmu::ring::SchedRecord& record, const OnSched& on_sched);

  uint64_t cpu_khz_;
  std::unordered_map<uint32_t, Vcpu> vcpus_;  // by VcpuWord (domain << 16 | vcpu)
  std::vector<Pending> pending_wake_;         // per CPU
  std::vector<uint64_t> last_ns_;             // per CPU: the time of its last record
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
