// The scheduler's tracepoints translated into the engine's scheduling records.
#include "machine_parts.h"

namespace hvprof::linux_host {

void LinuxMachine::ApplySched(const PerfSample& sample, uint32_t cpu, SchedTracepoint kind) {
  ++sched_samples_;
  const SchedTracepoints* points = driver_->sched();
  if (engine_ == nullptr || points == nullptr || !engine_->sched_recording()) return;
  const auto decoded = points->Decode(kind, sample.raw);
  if (!decoded) {
    ++sched_undecodable_;
    return;
  }
  using ring::Runstate;
  using ring::SchedType;
  ring::SchedRecord record{};
  record.time_ns = sample.time;
  record.other_pid = record.other_tid = ring::kNoPid;
  record.from_pcpu = record.to_pcpu = ring::kUnknownPcpu;
  const auto subject = [&](const SchedSubject& who) {
    record.domain = who.domain;
    record.vcpu = who.vcpu;
    record.pid = who.task ? who.pid : ring::kNoPid;
    record.tid = who.task ? who.tid : ring::kNoPid;
    record.flags = who.task ? ring::kSchedPidValid : uint8_t{0};
  };
  const auto emit = [&](SchedType type, Runstate from, Runstate to) {
    record.type = static_cast<uint8_t>(type);
    record.old_state = static_cast<uint8_t>(from);
    record.new_state = static_cast<uint8_t>(to);
    engine_->RecordSched(cpu, record);
  };
  switch (kind) {
    case SchedTracepoint::kSwitch: {
      // The sample's own pid/tid are prev's (the task running when the tracepoint fired).
      subject(router_->RouteTask(decoded->tid, decoded->tid == sample.tid ? sample.pid : kNoTask, cpu));
      const SwitchedOut out = ClassifyPrevState(decoded->prev_state);
      emit(SchedType::kRunstate, Runstate::kRunning,
           out == SwitchedOut::kRunnable ? Runstate::kRunnable
           : out == SwitchedOut::kOffline ? Runstate::kOffline
                                          : Runstate::kBlocked);
      subject(router_->RouteTask(decoded->next_tid, kNoTask, cpu));
      emit(SchedType::kRunstate, Runstate::kRunnable, Runstate::kRunning);
      break;
    }
    case SchedTracepoint::kWaking:
    case SchedTracepoint::kWakeupNew: {
      // The waker is whoever runs on this CPU (an interrupt's wake-ups are charged to it).
      const SchedSubject waker = router_->RouteTask(sample.tid, sample.pid, cpu);
      record.other_domain = waker.domain;
      record.other_vcpu = waker.vcpu;
      record.other_pid = waker.task ? waker.pid : ring::kNoPid;
      record.other_tid = waker.task ? waker.tid : ring::kNoPid;
      subject(router_->RouteTask(decoded->tid, kNoTask, cpu));
      record.flags |= ring::kSchedOtherValid;
      if (decoded->target_cpu >= 0 && static_cast<uint32_t>(decoded->target_cpu) < num_cpus_) {
        record.to_pcpu = static_cast<uint16_t>(decoded->target_cpu);
      }
      emit(SchedType::kWakeup, Runstate::kBlocked, Runstate::kRunnable);
      break;
    }
    case SchedTracepoint::kMigrate: {
      if (decoded->orig_cpu < 0 || decoded->dest_cpu < 0 || static_cast<uint32_t>(decoded->orig_cpu) >= num_cpus_ ||
          static_cast<uint32_t>(decoded->dest_cpu) >= num_cpus_) {
        ++sched_undecodable_;
        return;
      }
      subject(router_->RouteTask(decoded->tid, kNoTask, cpu));
      record.from_pcpu = static_cast<uint16_t>(decoded->orig_cpu);
      record.to_pcpu = static_cast<uint16_t>(decoded->dest_cpu);
      // A task moves while it waits for a CPU (or while it is being woken).
      emit(SchedType::kMigrate, Runstate::kRunnable, Runstate::kRunnable);
      break;
    }
  }
}

}  // namespace hvprof::linux_host
