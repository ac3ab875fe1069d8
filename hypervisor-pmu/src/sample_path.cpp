// The NMI sample path: no locks, no allocation, bounded work.
#include "freestanding.h"
#include "hvpmu/engine.h"
#include "ring_writer_inline.h"

namespace hvpmu {

using detail::LoadAcquire;
using detail::LoadRelaxed;
using detail::StoreRelaxed;

namespace {

inline uint64_t Bump(uint64_t* counter) {
  const uint64_t value = LoadRelaxed(counter) + 1;
  StoreRelaxed(counter, value);
  return value;
}

inline uint32_t LowestBit(uint32_t bits) { return static_cast<uint32_t>(__builtin_ctz(bits)); }

}  // namespace

ring::Mode ClassifyMode(const InterruptedContext& context) {
  if (context.in_hypervisor) return ring::Mode::kHypervisor;
  switch (context.type) {
    case DomainType::kPv64:
      return context.cpl == 3 && context.pv_kernel_mode ? ring::Mode::kKernel : ring::Mode::kUser;
    case DomainType::kPv32:
      return context.cpl == 1 ? ring::Mode::kKernel : ring::Mode::kUser;
    case DomainType::kHvm:
      if (context.hvm_real_mode) return ring::Mode::kKernel;
      if (context.hvm_vm86) return ring::Mode::kUser;
      return context.cpl != 3 ? ring::Mode::kKernel : ring::Mode::kUser;
  }
  return ring::Mode::kUser;
}

void Engine::HandlePmi(uint32_t cpu) {
  if (cpu >= num_cpus_ || driver_ == nullptr) return;
  const uint32_t overflowed = driver_->CollectOverflows(cpu);
  if (overflowed != 0) {
    InterruptedContext context{};
    if (platform_.GetInterruptedContext(cpu, &context)) {
      for (uint32_t bits = overflowed; bits != 0; bits &= bits - 1) {
        const uint32_t counter = LowestBit(bits);
        LogSample(cpu, context, static_cast<uint8_t>(counter), LoadRelaxed(&periods_[counter]));
      }
    }
  }
  platform_.RearmPmi(cpu);
}

void Engine::RecordSample(uint32_t cpu, const InterruptedContext& context, uint8_t counter,
                          uint64_t period) {
  if (cpu >= num_cpus_ || counter >= kMaxCounters) return;
  LogSample(cpu, context, counter, period);
}

uint32_t Engine::WalkBacktrace(const InterruptedContext& context, ring::Mode mode,
                               uint64_t* frames, uint32_t max_frames) {
  const bool hypervisor = mode == ring::Mode::kHypervisor;
  const DomainId memory = hypervisor ? kDomainXen : context.domain;
  const bool narrow = !hypervisor && (context.type == DomainType::kPv32 ||
                                      (context.type == DomainType::kHvm && !context.hvm_long_mode));
  const uint32_t word = narrow ? 4 : 8;
  uint64_t frame = context.frame_pointer;
  uint32_t count = 0;
  while (count < max_frames && frame != 0) {
    // A frame holds the caller's frame pointer, then the return address.
    uint64_t head[2] = {0, 0};
    if (narrow) {
      uint32_t narrow_head[2];
      if (!platform_.ReadGuestMemory(memory, context.vcpu, frame, narrow_head, 2 * word)) break;
      head[0] = narrow_head[0];
      head[1] = narrow_head[1];
    } else if (!platform_.ReadGuestMemory(memory, context.vcpu, frame, head, 2 * word)) {
      break;
    }
    frames[count++] = head[1];
    if (head[0] <= frame) break;  // frames must move up the stack, or the walk could loop
    frame = head[0];
  }
  return count;
}

void Engine::RecordSched(uint32_t cpu, const ring::SchedRecord& record) {
  // Not recording (no scheduling rings, or not profiling): nothing was asked for, nothing is lost.
  if (LoadAcquire(&sched_routing_) == 0 || cpu >= num_sched_rings_) return;
  RingWriter& writer = sched_rings_[cpu];
  ring::SchedRecord stamped = record;
  if (stamped.time_ns == 0) stamped.time_ns = platform_.NowNs();
  bool notify = false;
  writer.WriteSched(stamped, static_cast<uint16_t>(cpu), &notify);  // losses are the ring's count
  if (notify) platform_.Notify(primary_, primary_, sched_ring_base_ + cpu);
}

void Engine::LogSample(uint32_t cpu, const InterruptedContext& context, uint8_t counter,
                       uint64_t period) {
  CpuStats& stats = cpu_stats_[cpu];
  Bump(&stats.samples);
  const ring::Mode mode = ClassifyMode(context);

  RingWriter* writer = nullptr;
  DomainId owner = kDomainInvalid;
  DomainId consumer = kDomainInvalid;
  uint32_t ring_index = 0;
  if (context.domain == kDomainIdle) {
    Bump(&stats.idle_samples);
    if (LoadAcquire(&pcpu_routing_) == 0 || cpu >= num_pcpu_rings_) {
      Bump(&stats.lost[static_cast<uint32_t>(ring::LossReason::kUnprofiledDomain)]);
      return;
    }
    writer = &pcpu_rings_[cpu];
    owner = consumer = primary_;
    ring_index = pcpu_ring_base_ + cpu;
  } else {
    DomainSlot* slot = FindSlot(context.domain);
    if (slot == nullptr || LoadAcquire(&slot->routing) == 0) {
      const uint64_t lost =
          Bump(&stats.lost[static_cast<uint32_t>(ring::LossReason::kUnprofiledDomain)]);
      if (LoadAcquire(&pcpu_routing_) != 0 && cpu < num_pcpu_rings_) {
        pcpu_rings_[cpu].PublishLoss(ring::LossReason::kUnprofiledDomain, lost);
      }
      return;
    }
    if (context.vcpu >= slot->nbuf_vcpu) {
      const uint64_t lost = __atomic_add_fetch(&slot->no_ring_losses, 1, __ATOMIC_RELAXED);
      Bump(&stats.lost[static_cast<uint32_t>(ring::LossReason::kNoRing)]);
      slot->rings[0].PublishLoss(ring::LossReason::kNoRing, lost);
      return;
    }
    writer = &slot->rings[context.vcpu];
    owner = slot->id;
    consumer = slot->consumer;
    ring_index = context.vcpu;
  }

  uint64_t frames[ring::kMaxBacktraceDepth];
  uint32_t nframes = 0;
  uint16_t flags = 0;
  const uint32_t depth = LoadRelaxed(&backtrace_depth_);
  if (depth != 0) {
    nframes = WalkBacktrace(context, mode, frames, depth);
    if (nframes == depth) flags |= ring::kFlagBacktraceTruncated;
  }
  if (context.pid != ring::kNoPid) flags |= ring::kFlagPidValid;
  if (context.address_space != 0) flags |= ring::kFlagAddressSpaceValid;
  if (context.type == DomainType::kHvm && !context.in_hypervisor) flags |= ring::kFlagGuest;

  SampleToWrite sample;
  sample.mode = mode;
  sample.event = counter;
  sample.flags = flags;
  sample.pcpu = static_cast<uint16_t>(cpu);
  sample.domain = context.domain;
  sample.vcpu = context.vcpu;
  sample.ip = context.ip;
  sample.time_ns = platform_.NowNs();
  sample.period = period;
  sample.address_space = context.address_space;
  sample.pid = context.pid;
  sample.tid = context.tid;
  sample.frames = frames;
  sample.nframes = nframes;
  sample.backtrace_group = depth != 0;

  bool notify = false;
  switch (writer->WriteInline(sample, &notify)) {
    case RingWriter::Result::kWritten: break;
    case RingWriter::Result::kFull:
      Bump(&stats.lost[static_cast<uint32_t>(ring::LossReason::kRingFull)]);
      break;
    case RingWriter::Result::kCorruptIndex:
      Bump(&stats.lost[static_cast<uint32_t>(ring::LossReason::kCorruptIndex)]);
      break;
  }
  if (notify) platform_.Notify(consumer, owner, ring_index);
}

}  // namespace hvpmu
