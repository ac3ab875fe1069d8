#include "hvprof/sim/xen_trace_writer.h"

#include <algorithm>
#include <cstring>

#include "hvpmu/abi/xen_trace.h"

namespace hvprof::sim {

namespace xt = hvpmu::xentrace;
namespace ring = hvpmu::ring;

XenTraceLayout XenTraceLayout::For(uint32_t cpus, uint32_t pages, uint64_t first_mfn, uint32_t nr_cpus) {
  XenTraceLayout layout;
  layout.cpus = cpus;
  layout.pages_per_cpu = pages;
  layout.first_mfn = first_mfn;
  // calc_tinfo_first_offset: t_info's fixed part for NR_CPUS CPUs, in whole u32 words.
  const uint32_t fixed_bytes = 2 + 2 * std::max(nr_cpus, cpus);
  layout.first_offset = (fixed_bytes + 3) / 4;
  const uint64_t words = uint64_t{layout.first_offset} + uint64_t{cpus} * pages;
  layout.t_info_pages = static_cast<uint32_t>((words * 4 + 4095) / 4096);
  return layout;
}

void XenTraceLayout::Format(uint8_t* memory) const {
  std::memset(memory, 0, size_t{t_info_pages} * 4096);
  const auto size = static_cast<uint16_t>(pages_per_cpu);
  std::memcpy(memory, &size, sizeof size);
  for (uint32_t cpu = 0; cpu < cpus; ++cpu) {
    const auto offset = static_cast<uint16_t>(first_offset + cpu * pages_per_cpu);
    std::memcpy(memory + 2 + 2 * size_t{cpu}, &offset, sizeof offset);
    for (uint32_t page = 0; page < pages_per_cpu; ++page) {
      const auto mfn = static_cast<uint32_t>(first_mfn + PageOf(cpu, page));
      std::memcpy(memory + 4 * (size_t{offset} + page), &mfn, sizeof mfn);
    }
    std::memset(memory + PageOf(cpu, 0) * 4096, 0, sizeof(xt::TraceBuf));
  }
}

XenTraceWriter::XenTraceWriter(uint8_t* memory, const XenTraceLayout& layout)
    : memory_(memory), layout_(layout), data_size_(layout.data_size()), cpus_(layout.cpus) {}

void XenTraceWriter::set_enabled(bool on) {
  enabled_ = on;
  if (!on) {
    for (Cpu& cpu : cpus_) cpu.lost = 0;
  }
}

uint32_t* XenTraceWriter::Buf(uint32_t cpu) const {
  return reinterpret_cast<uint32_t*>(memory_ + layout_.PageOf(cpu, 0) * 4096);
}

void XenTraceWriter::PutWord(uint32_t cpu, uint32_t position, uint32_t word) const {
  // The data area starts after t_buf in the CPU's first page and runs on through its pages;
  // records are whole words, and so are pages, so a word never straddles two of them.
  const uint64_t offset = uint64_t{position} + sizeof(xt::TraceBuf);
  uint8_t* page = memory_ + layout_.PageOf(cpu, static_cast<uint32_t>(offset / 4096)) * 4096;
  std::memcpy(page + offset % 4096, &word, sizeof word);
}

void XenTraceWriter::Insert(uint32_t cpu, uint32_t event, uint64_t tsc, bool cycles, std::span<const uint32_t> extra) {
  uint32_t* buf = Buf(cpu);
  const uint32_t prod = __atomic_load_n(&buf[1], __ATOMIC_RELAXED);
  uint32_t position = prod >= data_size_ ? prod - data_size_ : prod;
  PutWord(cpu, position, xt::HeaderWord(event, static_cast<uint32_t>(extra.size()), cycles));
  position += 4;
  if (cycles) {
    PutWord(cpu, position, static_cast<uint32_t>(tsc));
    PutWord(cpu, position + 4, static_cast<uint32_t>(tsc >> 32));
    position += 8;
  }
  for (uint32_t word : extra) {
    PutWord(cpu, position, word);
    position += 4;
  }
  uint32_t next = prod + xt::RecordSize(cycles, static_cast<uint32_t>(extra.size()));
  if (next >= 2 * data_size_) next -= 2 * data_size_;
  __atomic_store_n(&buf[1], next, __ATOMIC_RELEASE);  // the record before the index (smp_wmb)
  ++stats_.written;
}

void XenTraceWriter::InsertWrap(uint32_t cpu, uint64_t tsc) {
  // Exactly the room left before the end: a header, the TSC where the words alone cannot fill it.
  const uint32_t prod = __atomic_load_n(&Buf(cpu)[1], __ATOMIC_RELAXED);
  const uint32_t space = data_size_ - (prod >= data_size_ ? prod - data_size_ : prod);
  uint32_t extra_bytes = space - 4;
  bool cycles = false;
  if (extra_bytes / 4 > xt::kExtraMax) {
    cycles = true;
    extra_bytes -= 8;
  }
  const uint32_t zeros[xt::kExtraMax] = {};
  Insert(cpu, xt::kTraceWrapBuffer, tsc, cycles, std::span(zeros, extra_bytes / 4));
  ++stats_.wraps;
}

void XenTraceWriter::InsertLost(uint32_t cpu, uint64_t tsc) {
  Cpu& state = cpus_[cpu];
  const uint32_t data[4] = {state.lost, (state.current & 0xFFFF0000u) >> 16 | (state.current & 0xFFFFu) << 16,
                            static_cast<uint32_t>(state.first_lost_tsc),
                            static_cast<uint32_t>(state.first_lost_tsc >> 32)};
  state.lost = 0;
  Insert(cpu, xt::kLostRecords, tsc, true, data);
  ++stats_.lost_markers;
}

bool XenTraceWriter::Trace(uint32_t cpu, uint64_t tsc, uint32_t event, std::span<const uint32_t> extra) {
  if (!enabled_ || cpu >= cpus_.size() || extra.size() > xt::kExtraMax) return false;
  // The masks: any bit of the event, then the class and the subclass must match.
  if ((event_mask_ & event) == 0) return false;
  if (((event_mask_ >> xt::kClassShift) & (event >> xt::kClassShift)) == 0) return false;
  if ((((event_mask_ >> xt::kSubclassShift) & 0xF) & ((event >> xt::kSubclassShift) & 0xF)) == 0) return false;
  if (cpu < 64 && (cpu_mask_ & (uint64_t{1} << cpu)) == 0) return false;

  uint32_t* buf = Buf(cpu);
  const uint32_t cons = __atomic_load_n(&buf[0], __ATOMIC_ACQUIRE);
  const uint32_t prod = __atomic_load_n(&buf[1], __ATOMIC_RELAXED);
  if (!xt::ValidIndex(cons, data_size_) || !xt::ValidIndex(prod, data_size_)) {
    enabled_ = false;  // Xen's bogus(): tracing stops until enabled again
    ++stats_.bogus;
    return false;
  }
  const uint32_t highwater = data_size_ / 2;
  const uint32_t unconsumed = xt::Unconsumed(prod, cons, data_size_);
  if (unconsumed > data_size_) {  // more than the buffer holds: Xen's ASSERT, taken as bogus
    enabled_ = false;
    ++stats_.bogus;
    return false;
  }
  bool started_below = unconsumed < highwater;
  const auto rec_size = xt::RecordSize(true, static_cast<uint32_t>(extra.size()));
  const uint32_t available = data_size_ - unconsumed;
  uint32_t to_wrap = data_size_ - (prod >= data_size_ ? prod - data_size_ : prod);

  // The dry run: what the lost-records record, the wraps and the record take together.
  Cpu& state = cpus_[cpu];
  uint32_t total = 0;
  if (state.lost != 0) {
    if (xt::kLostRecordSize > to_wrap) {
      total += to_wrap;
      to_wrap = data_size_;
    }
    total += xt::kLostRecordSize;
    to_wrap -= xt::kLostRecordSize;
    if (to_wrap == 0) to_wrap = data_size_;
  }
  if (rec_size > to_wrap) total += to_wrap;
  total += rec_size;
  if (total > available) {
    if (++state.lost == 1) state.first_lost_tsc = tsc;
    ++stats_.lost;
    return false;
  }

  if (state.lost != 0) {
    const uint32_t now_prod = __atomic_load_n(&buf[1], __ATOMIC_RELAXED);
    if (xt::kLostRecordSize > data_size_ - (now_prod >= data_size_ ? now_prod - data_size_ : now_prod)) {
      InsertWrap(cpu, tsc);
    }
    InsertLost(cpu, tsc);
  }
  const uint32_t now_prod = __atomic_load_n(&buf[1], __ATOMIC_RELAXED);
  if (rec_size > data_size_ - (now_prod >= data_size_ ? now_prod - data_size_ : now_prod)) InsertWrap(cpu, tsc);
  Insert(cpu, event, tsc, true, extra);

  const uint32_t after = xt::Unconsumed(__atomic_load_n(&buf[1], __ATOMIC_RELAXED),
                                        __atomic_load_n(&buf[0], __ATOMIC_ACQUIRE), data_size_);
  return started_below && after >= highwater;
}

bool XenTraceWriter::TraceSched(uint32_t cpu, uint64_t tsc, const ring::SchedRecord& record) {
  const uint32_t word = xt::VcpuWord(record.domain, record.vcpu);
  switch (static_cast<ring::SchedType>(record.type)) {
    case ring::SchedType::kRunstate: {
      if (cpu < cpus_.size() && record.new_state == static_cast<uint8_t>(ring::Runstate::kRunning)) {
        cpus_[cpu].current = word;
      }
      // A state as it stands: Xen says so only of a vCPU that goes on running.
      if (record.old_state == record.new_state && record.new_state != static_cast<uint8_t>(ring::Runstate::kRunning)) {
        return false;
      }
      const uint32_t event = record.old_state == record.new_state
                                 ? xt::kContinueRunning
                                 : xt::RunstateChangeEvent(record.old_state, record.new_state);
      return Trace(cpu, tsc, event, std::span(&word, 1));
    }
    case ring::SchedType::kWakeup: {
      const uint32_t data[2] = {record.domain, record.vcpu};
      return Trace(cpu, tsc, xt::kSchedWake, data);
    }
    default:
      return false;  // no migration record in Xen 4.17 (the schedulers' own are not asked for)
  }
}

}  // namespace hvprof::sim
