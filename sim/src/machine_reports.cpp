// What the simulated machine tells: its ground truth, and each domain's images and processes.
#include "machine_parts.h"

namespace hvprof::sim {

// ---- reports

void SimMachine::ResetGroundTruth() {
  for (TruthRow& row : truth_) row = TruthRow{};
  timer_sampled_ = tick_cycles_ != 0;
  for (SchedTruth& truth : vcpu_truth_) truth = SchedTruth{};
  for (uint64_t& idle : idle_truth_) idle = 0;
  sched_accounted_to_ = sched_truth_since_ = now_;
}

context::GroundTruth SimMachine::GroundTruth() const {
  context::GroundTruth out;
  out.scenario = scenario_.name;
  out.seed = scenario_.seed;
  out.run_seed = scenario_.run_seed.value_or(scenario_.seed);
  out.sim_time_ns = now_ns();
  out.cpus = static_cast<uint32_t>(cpus_.size());
  out.pmu = std::string(PmuModelName(scenario_.machine.pmu));
  out.pmis = pmis_;
  out.ticks = ticks_;
  out.timer = timer_sampled_;
  const PmuModel& pmu = cpus_[0]->pmu;
  // The timer's truth is one counter: ns of each function's time and the ticks due in it.
  const uint32_t truth_counters = timer_sampled_ ? 1 : pmu.num_counters();
  auto events_of = [&](const TruthRow& row, uint32_t i) { return timer_sampled_ ? NsOf(row.timer_cycles) : row.events[i]; };
  auto overflows_of = [&](const TruthRow& row, uint32_t i) { return timer_sampled_ ? row.ticks : row.overflows[i]; };
  if (timer_sampled_) {
    out.counters.push_back({.index = 0,
                            .enabled = tick_cycles_ != 0,
                            .event = hvpmu::kTimerEventCode,
                            .unit_mask = 0,
                            .os = true,
                            .usr = true,
                            .fixed = false,
                            .counts = "time_ns"});
  }
  for (uint32_t i = 0; i < pmu.num_counters() && !timer_sampled_; ++i) {
    const PmuModel::CounterInfo info = pmu.Describe(i);
    out.counters.push_back({.index = i,
                            .enabled = info.enabled,
                            .event = info.event,
                            .unit_mask = info.unit_mask,
                            .os = info.os,
                            .usr = info.usr,
                            .fixed = info.fixed,
                            .counts = std::string(QuantityName(pmu.quantity(i)))});
  }
  for (size_t r = 0; r < truth_.size(); ++r) {
    const TruthRow& row = truth_[r];
    bool any = false;
    for (uint32_t i = 0; i < truth_counters; ++i) any |= events_of(row, i) != 0;
    if (!any) continue;
    const TruthKey& key = truth_keys_[r];
    context::TruthRow& entry = out.rows.emplace_back();
    entry.domain = key.domain;
    entry.vcpu = key.vcpu;
    entry.mode = key.mode;
    entry.image = image_names_[key.image];
    entry.function = function_names_[key.function];
    entry.start = key.start;
    entry.image_address = key.image_address;
    for (uint32_t i = 0; i < truth_counters; ++i) {
      entry.events.push_back(events_of(row, i));
      entry.overflows.push_back(overflows_of(row, i));
    }
    // The chain a frame-pointer walk finds from this function: its callers, innermost first.
    entry.callers = function_callers_[key.function];
  }

  // Time in state, with the interval since the last schedule counted as it stands.
  auto ns = [this](uint64_t cycles) { return NsOf(cycles); };
  const uint64_t open = now_ - sched_accounted_to_;
  out.sched.since_ns = ns(sched_truth_since_);
  out.sched.now_ns = now_ns();
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    uint64_t cycles[hvpmu::ring::kRunstateCount];
    for (uint32_t s = 0; s < hvpmu::ring::kRunstateCount; ++s) cycles[s] = vcpu_truth_[v].cycles[s];
    cycles[static_cast<uint32_t>(vcpus_[v].state)] += open;
    out.sched.vcpus.push_back({.domain = domains_[vcpus_[v].domain]->id,
                               .vcpu = vcpus_[v].id,
                               .running_ns = ns(cycles[0]),
                               .runnable_ns = ns(cycles[1]),
                               .blocked_ns = ns(cycles[2]),
                               .offline_ns = ns(cycles[3]),
                               .wakeups = vcpu_truth_[v].wakeups,
                               .migrations = vcpu_truth_[v].migrations});
  }
  for (size_t c = 0; c < cpus_.size(); ++c) {
    const uint64_t idle = idle_truth_[c] + (cpus_[c]->vcpu < 0 ? open : 0);
    const uint64_t total = now_ - sched_truth_since_;
    out.sched.cpus.push_back({.cpu = static_cast<uint16_t>(c), .idle_ns = ns(idle), .busy_ns = ns(total - idle)});
  }
  return out;
}

context::DomainImages SimMachine::Images(DomainId domain_id) const {
  context::DomainImages images;
  if (domain_id == 0) images.hypervisor = scenario_.hypervisor.image;  // what dom0 would know
  if (const Domain* domain = FindDomain(domain_id)) images.kernel = domain->kernel_source;
  return images;
}

SimMachine::ContextBatch SimMachine::ContextEvents(DomainId domain_id, uint64_t from, size_t max_events) {
  ContextBatch batch;
  const Domain* domain = FindDomain(domain_id);
  if (domain == nullptr) return batch;
  const uint64_t now = now_ns();
  const size_t count = domain->processes.size();
  ContextCursor& cursor = context_cursors_[domain_id];
  auto mapping = [&](const Process::Image& image, uint32_t pid, uint64_t time, uint64_t offset) {
    context::ContextEvent event;
    event.kind = context::ContextKind::kMapping;
    event.domain = domain_id;
    event.pid = pid;
    event.time_ns = time;
    event.start = image.start + offset;
    event.end = image.end + offset;
    event.bias = image.bias + offset;
    event.path = image.path;
    event.build_id = image.build_id;
    batch.events.push_back(std::move(event));
  };
  auto born = [&](const Process& process, uint32_t pid, uint64_t time) {
    context::ContextEvent event;
    event.kind = context::ContextKind::kProcess;
    event.domain = domain_id;
    event.pid = pid;
    event.time_ns = time;
    event.comm = process.comm;
    batch.events.push_back(std::move(event));
  };
  // One run of a churned program: its birth, its mappings where this run has them, its exit.
  auto tell_run = [&](const Process& process, uint64_t run) {
    const uint32_t pid = process.PidOf(run);
    const uint64_t birth = run * process.period_ns;
    born(process, pid, birth);
    for (const Process::Image& image : process.images) mapping(image, pid, birth, process.ChurnOffset(run));
    context::ContextEvent exit;
    exit.kind = context::ContextKind::kExit;
    exit.domain = domain_id;
    exit.pid = pid;
    exit.time_ns = birth + process.lifetime_ns;
    batch.events.push_back(std::move(exit));
  };

  const bool retry = from != 0 && from == cursor.retry_sequence && cursor.retry_next_run.size() == count;
  if (from == 0 || (from != cursor.sequence && !retry) || cursor.next_run.size() != count) {
    // From the start: what is alive now.
    batch.first = from == 0 ? 0 : from + 1;
    cursor.next_run.assign(count, 0);
    for (size_t p = 0; p < count; ++p) {
      const Process& process = domain->processes[p];
      if (process.period_ns == 0) {
        born(process, process.pid, 0);
        for (const Process::Image& image : process.images) mapping(image, process.pid, 0, 0);
        continue;
      }
      const uint64_t newest = now / process.period_ns;
      const uint64_t oldest = now < process.lifetime_ns ? 0 : (now - process.lifetime_ns) / process.period_ns + 1;
      for (uint64_t run = oldest; run <= newest; ++run) tell_run(process, run);
      cursor.next_run[p] = newest + 1;
    }
    // Sequence 1 is this batch; asked for again (from 0), it is made again.
    cursor.sequence = 2;
    cursor.retry_sequence = 0;
    cursor.retry_next_run.clear();
    batch.next = cursor.sequence;
    return batch;
  }
  if (retry) {
    cursor.sequence = cursor.retry_sequence;
    cursor.next_run = cursor.retry_next_run;
  }
  batch.first = from;
  cursor.retry_sequence = cursor.sequence;
  cursor.retry_next_run = cursor.next_run;
  // The runs born since, oldest first (ties in the processes' order), while the batch has room.
  uint64_t told = 0;
  for (;;) {
    size_t pick = count;
    uint64_t pick_birth = UINT64_MAX;
    for (size_t p = 0; p < count; ++p) {
      const Process& process = domain->processes[p];
      if (process.period_ns == 0) continue;
      const uint64_t birth = cursor.next_run[p] * process.period_ns;
      if (birth <= now && birth < pick_birth) pick = p, pick_birth = birth;
    }
    if (pick == count) break;
    const Process& process = domain->processes[pick];
    if (told != 0 && batch.events.size() + process.images.size() + 2 > max_events) {
      batch.more = true;
      break;
    }
    tell_run(process, cursor.next_run[pick]++);
    ++told;
  }
  cursor.sequence += told;
  batch.next = cursor.sequence;
  return batch;
}


int64_t SimMachine::TruthRowAt(DomainId domain_id, uint16_t vcpu, Mode mode, uint64_t ip) const {
  const Domain* domain = domain_id == kDomainIdle ? idle_.get() : FindDomain(domain_id);
  if (domain == nullptr || vcpu >= domain->vcpus) return -1;
  const Function* best = nullptr;
  for (const Function& function : domain->modes[static_cast<int>(mode)].functions) {
    if (ip >= function.start && ip < function.start + function.size &&
        (best == nullptr || function.start > best->start)) {
      best = &function;
    }
  }
  return best == nullptr ? -1 : static_cast<int64_t>(best->truth) + vcpu;
}

}  // namespace hvprof::sim
