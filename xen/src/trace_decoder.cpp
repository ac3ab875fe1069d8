#include "hvprof/xen/trace_decoder.h"

#include <algorithm>
#include <cstring>

#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/xen_trace.h"

namespace hvprof::xen {

namespace ring = hvpmu::ring;
namespace xt = hvpmu::xentrace;

namespace {

uint32_t WordAt(std::span<const uint8_t> bytes, size_t offset) {
  uint32_t word;
  std::memcpy(&word, bytes.data() + offset, sizeof word);
  return word;
}

}  // namespace

TraceDecoder::TraceDecoder(uint64_t cpu_khz) : cpu_khz_(cpu_khz == 0 ? 1'000'000 : cpu_khz) {}

uint64_t TraceDecoder::NsOfTsc(uint64_t tsc) const {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(tsc) * 1'000'000 / cpu_khz_);
}

ring::SchedRecord TraceDecoder::Base(const Item& item, ring::SchedType type) const {
  ring::SchedRecord record{};
  record.kind = static_cast<uint8_t>(ring::RecordKind::kSched);
  record.type = static_cast<uint8_t>(type);
  record.slots = 1;
  record.pcpu = item.cpu;
  record.time_ns = item.time_ns;
  record.domain = static_cast<uint16_t>(item.word >> 16);
  record.vcpu = static_cast<uint16_t>(item.word & 0xFFFF);
  record.pid = record.tid = record.other_pid = record.other_tid = ring::kNoPid;
  record.from_pcpu = record.to_pcpu = ring::kUnknownPcpu;
  return record;
}

void TraceDecoder::Emit(const ring::SchedRecord& record, const OnSched& on_sched) {
  ++stats_.sched_records;
  on_sched(record);
}

void TraceDecoder::Apply(const Item& item, const OnSched& on_sched) {
  if (item.lost) {
    ring::SchedRecord record = Base(item, ring::SchedType::kLost);
    record.count = item.count;
    record.aux = item.aux;
    Emit(record, on_sched);
    return;
  }
  ++stats_.runstate;
  Vcpu& vcpu = vcpus_[item.word];
  if (vcpu.state != 0xFF && vcpu.state != item.old_state) ++stats_.inconsistent;
  if (item.woken) {
    if (item.old_state == xt::kRunstateBlocked || item.old_state == xt::kRunstateOffline) {
      ring::SchedRecord record = Base(item, ring::SchedType::kWakeup);
      record.old_state = item.old_state;
      record.new_state = static_cast<uint8_t>(ring::Runstate::kRunnable);
      ++stats_.wakeups;
      Emit(record, on_sched);
    } else {
      ++stats_.redundant_wakes;
    }
  }
  const bool idle = (item.word >> 16) == xt::kDomidIdle;
  const bool starts = item.new_state == xt::kRunstateRunning && item.old_state != xt::kRunstateRunning && !idle;
  if (starts && vcpu.last_pcpu != ring::kUnknownPcpu && vcpu.last_pcpu != item.cpu) {
    ring::SchedRecord record = Base(item, ring::SchedType::kMigrate);
    record.flags = ring::kSchedDerived;
    record.old_state = record.new_state = item.old_state;
    record.from_pcpu = vcpu.last_pcpu;
    record.to_pcpu = item.cpu;
    ++stats_.migrations;
    Emit(record, on_sched);
  }
  if (item.new_state == xt::kRunstateRunning && !idle) vcpu.last_pcpu = item.cpu;
  vcpu.state = item.new_state;
  ring::SchedRecord record = Base(item, ring::SchedType::kRunstate);
  record.old_state = item.old_state;
  record.new_state = item.new_state;
  Emit(record, on_sched);
}

void TraceDecoder::Flush(const OnSched& on_sched) {
  std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) {
    if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.cpu != b.cpu) return a.cpu < b.cpu;
    return a.sequence < b.sequence;
  });
  for (const Item& item : items_) Apply(item, on_sched);
  items_.clear();
}

size_t TraceDecoder::Decode(uint16_t cpu, std::span<const uint8_t> window) {
  if (pending_wake_.size() <= cpu) {
    pending_wake_.resize(size_t{cpu} + 1);
    last_ns_.resize(size_t{cpu} + 1, 0);
  }
  size_t at = 0;
  while (at < window.size()) {
    if (window.size() - at < 4) {
      ++stats_.truncated;
      break;
    }
    const uint32_t header = WordAt(window, at);
    const bool cycles = xt::HasCycles(header);
    const uint32_t extra = xt::ExtraWordsOf(header);
    const uint32_t size = xt::RecordSize(cycles, extra);
    if (window.size() - at < size) {
      ++stats_.truncated;
      break;
    }
    ++stats_.records;
    const uint32_t event = xt::EventOf(header);
    size_t data = at + 4;
    uint64_t time_ns = last_ns_[cpu];
    if (cycles) {
      const uint64_t tsc = WordAt(window, data) | (uint64_t{WordAt(window, data + 4)} << 32);
      time_ns = NsOfTsc(tsc);
      data += 8;
    }
    auto word = [&](uint32_t i) { return WordAt(window, data + 4 * size_t{i}); };
    at += size;
    if (event == xt::kTraceWrapBuffer) {
      ++stats_.wrap_records;
      continue;
    }
    const bool runstate = xt::IsRunstateChange(event) || event == xt::kContinueRunning;
    if (!runstate && event != xt::kSchedWake && event != xt::kLostRecords) {
      if ((event & 0x0FFF0000u) == (xt::kTrcSched & 0x0FFF0000u)) {
        ++stats_.ignored;
      } else {
        ++stats_.unknown;
      }
      continue;
    }
    if (!cycles) ++stats_.no_cycles;
    last_ns_[cpu] = time_ns;
    Pending& wake = pending_wake_[cpu];
    Item item{};
    item.time_ns = time_ns;
    item.sequence = sequence_++;
    item.cpu = cpu;
    item.rank = 2;
    if (event == xt::kLostRecords) {
      if (extra < 4) {
        ++stats_.truncated;
        continue;
      }
      item.lost = true;
      item.rank = 0;  // before the record it was written with
      item.word = xt::VcpuWord(word(1) & 0xFFFF, word(1) >> 16);  // {u16 domain, u16 vcpu}
      item.count = word(0);
      item.aux = NsOfTsc(word(2) | (uint64_t{word(3)} << 32));
      ++stats_.lost_markers;
      stats_.lost_records += item.count;
      if (wake.set) ++stats_.redundant_wakes;
      wake.set = false;  // what it woke may have been lost
      items_.push_back(item);
      continue;
    }
    if (event == xt::kSchedWake) {
      if (extra < 2) {
        ++stats_.truncated;
        continue;
      }
      if (wake.set) ++stats_.redundant_wakes;  // the one before it changed nothing
      wake.vcpu_word = xt::VcpuWord(word(0), word(1));
      wake.set = true;
      continue;
    }
    if (extra < 1) {
      ++stats_.truncated;
      continue;
    }
    item.word = word(0);
    item.old_state = static_cast<uint8_t>(event == xt::kContinueRunning ? xt::kRunstateRunning : xt::RunstateOld(event));
    item.new_state = static_cast<uint8_t>(event == xt::kContinueRunning ? xt::kRunstateRunning : xt::RunstateNew(event));
    item.woken = wake.set && wake.vcpu_word == item.word;
    if (wake.set && !item.woken) ++stats_.redundant_wakes;  // another vCPU's change came first
    wake.set = false;
    const bool on = item.new_state == xt::kRunstateRunning;
    const bool was_on = item.old_state == xt::kRunstateRunning;
    item.rank = item.old_state == item.new_state ? 0 : was_on ? 1 : on ? 3 : 2;
    items_.push_back(item);
  }
  return at;
}

std::optional<uint32_t> CopyTraceWindow(const uint8_t* buffer, uint32_t data_size, std::vector<uint8_t>* out) {
  const auto* buf = reinterpret_cast<const uint32_t*>(buffer);
  const uint32_t cons = __atomic_load_n(&buf[0], __ATOMIC_RELAXED);
  const uint32_t prod = __atomic_load_n(&buf[1], __ATOMIC_ACQUIRE);  // the records before it (xen_rmb)
  if (data_size == 0 || !xt::ValidIndex(cons, data_size) || !xt::ValidIndex(prod, data_size)) return std::nullopt;
  const uint32_t pending = xt::Unconsumed(prod, cons, data_size);
  if (pending > data_size) return std::nullopt;
  const uint8_t* data = buffer + sizeof(xt::TraceBuf);
  const uint32_t start = cons >= data_size ? cons - data_size : cons;
  const uint32_t first = std::min(pending, data_size - start);
  out->insert(out->end(), data + start, data + start + first);
  out->insert(out->end(), data, data + (pending - first));
  return prod;
}

void ReleaseTraceWindow(uint8_t* buffer, uint32_t cons) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // xen_mb: the records are read before cons moves
  __atomic_store_n(reinterpret_cast<uint32_t*>(buffer), cons, __ATOMIC_RELAXED);
}

}  // namespace hvprof::xen
