// perf's records drained from its rings, merged in time order across CPUs, and applied.
#include "machine_parts.h"

HVPROF_PROBE_SEMAPHORE(perf__throttle);
HVPROF_PROBE_SEMAPHORE(perf__lost);

namespace hvprof::linux_host {

namespace {

// Processes that exited this long before the latest record are forgotten (their late samples
// have come by then).
constexpr uint64_t kPruneAfterNs = 2'000'000'000;

}  // namespace

DrainResult LinuxMachine::DrainSamples() {
  auto& rings = driver_->rings();
  // Each ring's records are parsed where the kernel wrote them, and handed back after; only a
  // ring whose records wrap the end of its data area is copied out, to parse them in one piece.
  if (buffers_.size() < rings.size()) buffers_.resize(rings.size());
  std::vector<PerfRing::View> views(rings.size());
  std::vector<std::span<const uint8_t>> records(rings.size());
  std::vector<uint32_t> cpus;
  for (size_t i = 0; i < rings.size(); ++i) {
    views[i] = rings[i].ring.Peek();
    ring_corrupt_ += views[i].corrupt ? 1 : 0;
    if (views[i].second.empty()) {
      records[i] = views[i].first;
    } else {
      buffers_[i].assign(views[i].first.begin(), views[i].first.end());
      buffers_[i].insert(buffers_[i].end(), views[i].second.begin(), views[i].second.end());
      records[i] = buffers_[i];
    }
    cpus.push_back(rings[i].cpu);
  }
  const DrainResult result = ApplyRecords(records, cpus);
  for (size_t i = 0; i < rings.size(); ++i) rings[i].ring.Release(views[i]);
  return result;
}

DrainResult LinuxMachine::InjectRecords(uint32_t cpu, std::span<const uint8_t> bytes) {
  return ApplyRecords({bytes}, {cpu});
}

// Applies each record of one ring to the machine: as the parser reads it (no copy) when the
// ring's records need no other ring's first, else as the merge replays it (HeldRecord::Replay).
struct LinuxMachine::Applier final : RecordVisitor {
  LinuxMachine& machine;
  DrainResult& result;
  uint32_t ring_cpu;

  Applier(LinuxMachine& m, DrainResult& r, uint32_t cpu) : machine(m), result(r), ring_cpu(cpu) {}
  template <typename Record>
  void Seen(const Record& r) {
    machine.last_time_ = std::max(machine.last_time_, OrderTime(r));
  }
  void OnSample(const PerfSample& r) override { Seen(r), machine.ApplySample(r, ring_cpu, result); }
  void OnMmap2(const PerfMmap2& r) override { Seen(r), machine.processes_->OnMmap2(r); }
  void OnComm(const PerfComm& r) override { Seen(r), machine.processes_->OnComm(r); }
  void OnTask(const PerfTask& r) override { Seen(r), machine.processes_->OnTask(r); }
  void OnLost(const PerfLost& r) override { Seen(r), machine.ApplyLost(r, ring_cpu); }
  void OnThrottle(const PerfThrottle& r) override { Seen(r), machine.ApplyThrottle(r, ring_cpu); }
  void OnLostSamples(const PerfLostSamples& r) override { Seen(r), machine.ApplyLostSamples(r, ring_cpu); }
};

void LinuxMachine::CountParsed(const RecordReader& reader, DrainResult& result) {
  parse_malformed_ += reader.stats().malformed;
  parse_unknown_ += reader.stats().unknown;
  result.records += reader.stats().records;
}

void LinuxMachine::ApplySample(const PerfSample& sample, uint32_t ring_cpu, DrainResult& result) {
  const uint32_t cpu = sample.cpu < num_cpus_ ? sample.cpu : ring_cpu;
  // A ring's samples come in runs of one event: its counter is looked up once a run (perf's
  // event ids are never reused, so a remembered one cannot name another event).
  if (!last_id_known_ || sample.id != last_id_) {
    last_id_ = sample.id;
    last_counter_ = driver_->CounterOfId(sample.id);
    last_id_known_ = true;
  }
  const int counter = last_counter_;
  if (counter < 0) {
    if (const auto kind = PerfPmuDriver::TracepointOf(counter)) {
      ApplySched(sample, cpu, *kind);
    } else {
      ++unknown_ids_;
    }
    return;
  }
  ++StatsOf(cpu).samples[counter];
  if (engine_ == nullptr) {
    ++samples_without_engine_;
    return;
  }
  RoutedSample routed = router_->Route(sample, cpu);
  if (!routed.frames.empty()) routed.context.frame_pointer = LinuxPlatform::kFrameBase;
  platform_->BeginSample(sample.time, routed.frames);
  engine_->RecordSample(cpu, routed.context, static_cast<uint8_t>(counter),
                        driver_->EnginePeriod(static_cast<uint32_t>(counter), sample.period));
  platform_->EndSample();
  ++result.samples;
}

void LinuxMachine::ApplyLost(const PerfLost& lost, uint32_t ring_cpu) {
  CpuRateStats& stats = StatsOf(lost.sid.cpu < num_cpus_ ? lost.sid.cpu : ring_cpu);
  ++stats.lost_records;
  stats.lost += lost.lost;
  HVPROF_PROBE(perf__lost, lost.sid.cpu, lost.lost, 0);
}

void LinuxMachine::ApplyThrottle(const PerfThrottle& throttle, uint32_t ring_cpu) {
  const uint32_t cpu = throttle.sid.cpu < num_cpus_ ? throttle.sid.cpu : ring_cpu;
  OnThrottle(cpu, throttle);
  HVPROF_PROBE(perf__throttle, throttle.sid.cpu, static_cast<int>(throttle.throttle), throttle.time);
}

void LinuxMachine::ApplyLostSamples(const PerfLostSamples& lost, uint32_t ring_cpu) {
  StatsOf(lost.sid.cpu < num_cpus_ ? lost.sid.cpu : ring_cpu).lost_samples += lost.lost;
  HVPROF_PROBE(perf__lost, lost.sid.cpu, lost.lost, 1);
}

DrainResult LinuxMachine::ApplyRecords(const std::vector<std::span<const uint8_t>>& buffers,
                                       const std::vector<uint32_t>& ring_cpus) {
  DrainResult result;
  const RecordLayout layout = driver_->layout();
  const size_t n = buffers.size();
  const auto cpu_of = [&](uint32_t ring) { return ring < ring_cpus.size() ? ring_cpus[ring] : 0; };
  // Side-band records (fork, exec, mmap) change how later samples are read, on every CPU: then
  // every ring is merged in time order. Without them no record depends on another ring's, and
  // within a ring only the scheduler's tracepoints depend on their order (a ring's records are
  // in time order but for rare exceptions, which only the merge below sorts): the order is
  // checked only when they are recorded. The common case (no side band, nothing to sort) reads
  // one header per record here, then applies each record as it is parsed.
  const bool order_matters = driver_->sched() != nullptr;
  bool side_band = false;
  std::vector<RingScan> scans(n);
  for (uint32_t i = 0; i < n; ++i) {
    scans[i] = ScanRecords(buffers[i], layout, order_matters);
    side_band |= scans[i].side_band;
    result.bytes += buffers[i].size();
  }
  if (side_band && !order_matters) {
    for (uint32_t i = 0; i < n; ++i) scans[i].in_order = ScanRecords(buffers[i], layout, true).in_order;
  }
  const bool direct = !side_band && std::all_of(scans.begin(), scans.end(), [](const RingScan& scan) {
    return scan.in_order;
  });
  if (direct) {
    for (uint32_t i = 0; i < n; ++i) {
      Applier applier(*this, result, cpu_of(i));
      RecordReader reader(buffers[i], layout);
      while (reader.Next(applier)) {
      }
      CountParsed(reader, result);
    }
  } else {
    ApplyMerged(buffers, scans, ring_cpus, result);
  }
  // The ELF headers read meanwhile, off this thread.
  processes_->TakeImages();
  // Pruning walks every process: once a second is enough, whatever the sample rate.
  if (last_time_ > kPruneAfterNs && last_time_ - last_prune_ >= 1'000'000'000) {
    processes_->Prune(last_time_ - kPruneAfterNs);
    last_prune_ = last_time_;
  }
  return result;
}

void LinuxMachine::ApplyMerged(const std::vector<std::span<const uint8_t>>& buffers, const std::vector<RingScan>& scans,
                               const std::vector<uint32_t>& ring_cpus, DrainResult& result) {
  const RecordLayout layout = driver_->layout();
  const auto cpu_of = [&](uint32_t ring) { return ring < ring_cpus.size() ? ring_cpus[ring] : 0; };
  // Every ring in time order, merged: a fork on one CPU comes before its child's samples and
  // forks on another. The merge reads each ring in place, one record ahead: a heap of the rings'
  // next records, earliest first (ties: the lower ring first). A ring out of order (rare) is
  // parsed whole and sorted first.
  const size_t n = buffers.size();
  if (heads_.size() < n) heads_.resize(n);
  if (sorted_.size() < n) sorted_.resize(n);
  std::vector<RecordReader> readers;
  readers.reserve(n);
  std::vector<size_t> next_sorted(n, SIZE_MAX);  // SIZE_MAX: the ring is read in place
  const auto advance = [&](uint32_t ring) -> const HeldRecord* {
    if (next_sorted[ring] == SIZE_MAX) return heads_[ring].Advance(readers[ring]) ? &heads_[ring] : nullptr;
    return next_sorted[ring] < sorted_[ring].size() ? &sorted_[ring][next_sorted[ring]++] : nullptr;
  };
  std::vector<std::pair<uint64_t, uint32_t>> heap;  // (time, ring), a min-heap
  heap.reserve(n);
  const auto later = [](const std::pair<uint64_t, uint32_t>& a, const std::pair<uint64_t, uint32_t>& b) {
    return a > b;
  };
  std::vector<const HeldRecord*> current(n, nullptr);
  // Without side-band records anywhere, each ring is applied whole, one after the other.
  const bool side_band =
      std::any_of(scans.begin(), scans.end(), [](const RingScan& scan) { return scan.side_band; });
  for (uint32_t i = 0; i < n; ++i) {
    readers.emplace_back(buffers[i], layout);
    if (!scans[i].in_order) {
      sorted_[i].clear();
      while (heads_[i].Advance(readers[i])) sorted_[i].push_back(heads_[i]);
      std::stable_sort(sorted_[i].begin(), sorted_[i].end(),
                       [](const HeldRecord& a, const HeldRecord& b) { return a.time < b.time; });
      next_sorted[i] = 0;
    }
    current[i] = advance(i);
    if (current[i] != nullptr) heap.emplace_back(current[i]->time, i);
  }
  std::make_heap(heap.begin(), heap.end(), later);
  // Merging: the earliest head of all rings; otherwise ring after ring (the heap's order).
  uint32_t ring = 0;
  bool reading = false;  // `ring` is being read to its end (no side band)
  while (reading || !heap.empty()) {
    if (!reading) {
      std::pop_heap(heap.begin(), heap.end(), later);
      ring = heap.back().second;
      heap.pop_back();
      reading = true;
    }
    Applier applier(*this, result, cpu_of(ring));
    current[ring]->Replay(applier);
    current[ring] = advance(ring);
    if (current[ring] == nullptr) {
      reading = false;
    } else if (side_band) {
      heap.emplace_back(current[ring]->time, ring);
      std::push_heap(heap.begin(), heap.end(), later);
      reading = false;
    }
  }
  for (const RecordReader& reader : readers) CountParsed(reader, result);
}

}  // namespace hvprof::linux_host
