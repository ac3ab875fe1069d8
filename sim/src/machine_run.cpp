// Running the simulated machine: the credit scheduler, bursts, execution, PMIs and ticks.
#include "machine_parts.h"

namespace hvprof::sim {

// ---- running

uint64_t SimMachine::NsOf(uint64_t cycles) const {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(cycles) * 1000 / scenario_.machine.mhz);
}

uint64_t SimMachine::now_ns() const { return NsOf(now_); }

SimMachine::Domain* SimMachine::FindDomain(DomainId id) {
  for (auto& domain : domains_) {
    if (domain->id == id) return domain.get();
  }
  return nullptr;
}

const SimMachine::Domain* SimMachine::FindDomain(DomainId id) const {
  for (const auto& domain : domains_) {
    if (domain->id == id) return domain.get();
  }
  return nullptr;
}

const std::string& SimMachine::kernel_source(DomainId domain) const {
  static const std::string kEmpty;
  const Domain* found = FindDomain(domain);
  return found == nullptr ? kEmpty : found->kernel_source;
}

void SimMachine::RunFor(uint64_t ns) {
  const uint64_t target =
      now_ + static_cast<uint64_t>(static_cast<unsigned __int128>(ns) * scenario_.machine.mhz / 1000);
  // The engine started recording scheduling since the last step: say where everybody is.
  const bool recording = engine_ != nullptr && engine_->sched_recording();
  if (recording && !was_recording_sched_) EmitSnapshot();
  was_recording_sched_ = recording;
  while (now_ < target) {
    if (now_ == slice_end_) {
      Schedule();
      slice_end_ = now_ + slice_cycles_;
      ++slices_;
    }
    const uint64_t segment_end = std::min(slice_end_, target);
    for (auto& cpu : cpus_) RunCpu(cpu->index, segment_end);
    now_ = segment_end;
  }
}

void SimMachine::Schedule() {
  AccountSchedTruth();
  previous_vcpu_.resize(cpus_.size());
  for (size_t c = 0; c < cpus_.size(); ++c) previous_vcpu_[c] = cpus_[c]->vcpu;
  // Credit refill every accounting period, shared between domains by weight.
  if (slices_ % kCreditPeriodSlices == 0) {
    uint64_t total_weight = 0;
    for (const auto& domain : domains_) total_weight += domain->weight;
    const double period = static_cast<double>(slice_cycles_) * kCreditPeriodSlices * cpus_.size();
    for (Vcpu& vcpu : vcpus_) {
      const Domain& domain = *domains_[vcpu.domain];
      const auto share = static_cast<int64_t>(period * domain.weight / total_weight / domain.vcpus);
      vcpu.credit = std::min<int64_t>(vcpu.credit + share, share);
    }
  }
  runnable_.clear();
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    Vcpu& vcpu = vcpus_[v];
    vcpu.runnable = rng_.NextDouble() < domains_[vcpu.domain]->load;
    vcpu.running = false;
    if (vcpu.runnable) runnable_.push_back(static_cast<int>(v));
  }
  // CPU i runs the i-th runnable vCPU by credit, the lower index first among equals: the
  // highest credits, found without a scan of every vCPU per CPU (a host with hundreds of CPUs
  // and thousands of vCPUs reschedules every slice).
  const size_t placed = std::min(runnable_.size(), cpus_.size());
  std::partial_sort(runnable_.begin(), runnable_.begin() + static_cast<std::ptrdiff_t>(placed), runnable_.end(),
                    [this](int a, int b) {
                      const int64_t ca = vcpus_[a].credit;
                      const int64_t cb = vcpus_[b].credit;
                      return ca != cb ? ca > cb : a < b;
                    });
  for (size_t c = 0; c < cpus_.size(); ++c) {
    auto& cpu = cpus_[c];
    const int best = c < placed ? runnable_[c] : -1;
    if (best != cpu->vcpu) cpu->burst_left = 0;  // a different vCPU starts afresh
    cpu->vcpu = best;
    if (best >= 0) {
      vcpus_[best].running = true;
      vcpus_[best].credit -= static_cast<int64_t>(slice_cycles_);
    }
  }

  // What changed, as a real scheduler would trace it: on each pCPU, whoever leaves first, then
  // wake-ups, waits and arrivals. The idle vCPU of a pCPU runs while no other does.
  using hvpmu::ring::Runstate;
  using hvpmu::ring::SchedType;
  const auto ncpus = static_cast<uint32_t>(cpus_.size());
  auto state_of = [](const Vcpu& vcpu) {
    return vcpu.running ? Runstate::kRunning : vcpu.runnable ? Runstate::kRunnable : Runstate::kBlocked;
  };
  auto home = [&](const Vcpu& vcpu, size_t index) {
    return vcpu.last_cpu >= 0 ? static_cast<uint32_t>(vcpu.last_cpu) : static_cast<uint32_t>(index % ncpus);
  };
  for (size_t v = 0; v < vcpus_.size(); ++v) {  // leaving a pCPU
    Vcpu& vcpu = vcpus_[v];
    if (vcpu.state != Runstate::kRunning) continue;
    const bool stays = vcpu.running && cpus_[static_cast<uint32_t>(vcpu.last_cpu)]->vcpu == static_cast<int>(v);
    if (stays) continue;
    // It stops running (blocked or runnable), or runs on another pCPU from now: runnable between.
    const Runstate next = vcpu.running ? Runstate::kRunnable : state_of(vcpu);
    EmitSched(static_cast<uint32_t>(vcpu.last_cpu), SchedType::kRunstate, domains_[vcpu.domain]->id, vcpu.id,
              Runstate::kRunning, next);
    vcpu.state = next;
  }
  for (uint32_t c = 0; c < ncpus; ++c) {  // the idle vCPU leaves a pCPU that got work
    if (previous_vcpu_[c] < 0 && cpus_[c]->vcpu >= 0) {
      EmitSched(c, SchedType::kRunstate, hvpmu::kDomainIdle, static_cast<uint16_t>(c), Runstate::kRunning,
                Runstate::kRunnable);
    }
  }
  for (size_t v = 0; v < vcpus_.size(); ++v) {  // wake-ups, waits, arrivals
    Vcpu& vcpu = vcpus_[v];
    const Runstate next = state_of(vcpu);
    if (next == vcpu.state) continue;
    const DomainId domain = domains_[vcpu.domain]->id;
    uint32_t cpu = home(vcpu, v);
    if (next == Runstate::kRunning) {
      for (uint32_t c = 0; c < ncpus; ++c) {
        if (cpus_[c]->vcpu == static_cast<int>(v)) cpu = c;
      }
    }
    if (vcpu.state == Runstate::kBlocked) {
      ++vcpu_truth_[v].wakeups;
      EmitSched(cpu, SchedType::kWakeup, domain, vcpu.id, Runstate::kBlocked, Runstate::kRunnable, 0xFFFF,
                static_cast<uint16_t>(cpu));
    }
    if (next == Runstate::kRunning && vcpu.last_cpu >= 0 && static_cast<uint32_t>(vcpu.last_cpu) != cpu) {
      ++vcpu_truth_[v].migrations;
      EmitSched(cpu, SchedType::kMigrate, domain, vcpu.id, vcpu.state, vcpu.state,
                static_cast<uint16_t>(vcpu.last_cpu), static_cast<uint16_t>(cpu));
    }
    EmitSched(cpu, SchedType::kRunstate, domain, vcpu.id, vcpu.state, next);
    vcpu.state = next;
    if (next == Runstate::kRunning) vcpu.last_cpu = static_cast<int>(cpu);
  }
  if (sched_sink_) {  // who goes on running where (Xen's continue-running), for the sink only
    for (uint32_t c = 0; c < ncpus; ++c) {
      if (previous_vcpu_[c] != cpus_[c]->vcpu) continue;
      const int v = cpus_[c]->vcpu;
      hvpmu::ring::SchedRecord record{};
      record.type = static_cast<uint8_t>(SchedType::kRunstate);
      record.old_state = record.new_state = static_cast<uint8_t>(Runstate::kRunning);
      record.time_ns = now_ns();
      record.domain = v < 0 ? hvpmu::kDomainIdle : domains_[vcpus_[v].domain]->id;
      record.vcpu = v < 0 ? static_cast<uint16_t>(c) : vcpus_[v].id;
      record.pid = record.tid = record.other_pid = record.other_tid = hvpmu::ring::kNoPid;
      record.from_pcpu = record.to_pcpu = 0xFFFF;
      sched_sink_(c, now_, record);
    }
  }
  for (uint32_t c = 0; c < ncpus; ++c) {  // the idle vCPU takes over a pCPU left without work
    if (previous_vcpu_[c] >= 0 && cpus_[c]->vcpu < 0) {
      EmitSched(c, SchedType::kRunstate, hvpmu::kDomainIdle, static_cast<uint16_t>(c), Runstate::kRunnable,
                Runstate::kRunning);
    }
  }
}

void SimMachine::AccountSchedTruth() {
  const uint64_t elapsed = now_ - sched_accounted_to_;
  sched_accounted_to_ = now_;
  if (elapsed == 0) return;
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    vcpu_truth_[v].cycles[static_cast<uint32_t>(vcpus_[v].state)] += elapsed;
  }
  for (size_t c = 0; c < cpus_.size(); ++c) {
    if (cpus_[c]->vcpu < 0) idle_truth_[c] += elapsed;
  }
}

void SimMachine::EmitSched(uint32_t cpu, hvpmu::ring::SchedType type, DomainId domain, uint16_t vcpu,
                           hvpmu::ring::Runstate from, hvpmu::ring::Runstate to, uint16_t from_cpu,
                           uint16_t to_cpu) {
  const bool recording = engine_ != nullptr && engine_->sched_recording();
  if (!recording && !sched_sink_) return;
  hvpmu::ring::SchedRecord record{};
  record.type = static_cast<uint8_t>(type);
  record.old_state = static_cast<uint8_t>(from);
  record.new_state = static_cast<uint8_t>(to);
  record.time_ns = now_ns();
  record.domain = domain;
  record.vcpu = vcpu;
  record.pid = record.tid = record.other_pid = record.other_tid = hvpmu::ring::kNoPid;
  record.from_pcpu = from_cpu;
  record.to_pcpu = to_cpu;
  if (recording) engine_->RecordSched(cpu, record);
  if (sched_sink_) sched_sink_(cpu, now_, record);
}

void SimMachine::EmitSnapshot() {
  // Where every vCPU is when recording starts: a runstate record that changes nothing, on the
  // pCPU it runs on (or last ran on), so that a reader knows the state of those that keep it.
  using hvpmu::ring::Runstate;
  using hvpmu::ring::SchedType;
  const auto ncpus = static_cast<uint32_t>(cpus_.size());
  for (uint32_t c = 0; c < ncpus; ++c) {
    const Runstate idle = cpus_[c]->vcpu < 0 ? Runstate::kRunning : Runstate::kRunnable;
    EmitSched(c, SchedType::kRunstate, hvpmu::kDomainIdle, static_cast<uint16_t>(c), idle, idle);
  }
  for (size_t v = 0; v < vcpus_.size(); ++v) {
    const Vcpu& vcpu = vcpus_[v];
    const uint32_t cpu = vcpu.last_cpu >= 0 ? static_cast<uint32_t>(vcpu.last_cpu) : static_cast<uint32_t>(v % ncpus);
    EmitSched(cpu, SchedType::kRunstate, domains_[vcpu.domain]->id, vcpu.id, vcpu.state, vcpu.state);
  }
}

void SimMachine::StartBurst(Cpu& cpu) {
  if (cpu.vcpu < 0) {
    cpu.domain = idle_.get();
    cpu.mode = Mode::kHypervisor;
    cpu.cpl = 0;
    const ModeTable& table = idle_->modes[static_cast<int>(Mode::kHypervisor)];
    cpu.function = &table.functions[table.picker.Pick(rng_)];
    cpu.halted = rng_.NextDouble() < scenario_.hypervisor.idle_halted;
    cpu.truth_row = cpu.function->truth + cpu.index;
  } else {
    Vcpu& vcpu = vcpus_[cpu.vcpu];
    Domain& domain = *domains_[vcpu.domain];
    cpu.domain = &domain;
    cpu.mode = domain.picker_modes[domain.mode_picker.Pick(rng_)];
    cpu.cpl = CplOf(domain.type, cpu.mode);
    const ModeTable& table = domain.modes[static_cast<int>(cpu.mode)];
    cpu.function = &table.functions[table.picker.Pick(rng_)];
    cpu.halted = false;
    cpu.truth_row = cpu.function->truth + vcpu.id;
    if (cpu.function->process != kNone) vcpu.process = cpu.function->process;
  }
  cpu.burst_left = rng_.NextExponential(scenario_.machine.burst_cycles);
}

void SimMachine::RunCpu(uint32_t cpu_index, uint64_t until) {
  Cpu& cpu = *cpus_[cpu_index];
  while (cpu.time < until) {
    if (cpu.burst_left == 0) StartBurst(cpu);
    uint64_t step = std::min(cpu.burst_left, until - cpu.time);
    if (tick_cycles_ != 0) step = std::min(step, cpu.next_tick - cpu.time);
    cpu.burst_left -= step;
    const uint32_t row = cpu.truth_row;
    if (cpu.halted) {
      cpu.time += step;  // a halted CPU counts nothing
    } else {
      Execute(cpu, step);
    }
    if (tick_cycles_ == 0) continue;
    // The timer's truth: this function's time, and the tick that ends it if one is due now.
    truth_[row].timer_cycles += step;
    if (cpu.time == cpu.next_tick) {
      ++truth_[row].ticks;
      cpu.next_tick += tick_cycles_;
      DeliverTick(cpu);
    }
  }
}

void SimMachine::Execute(Cpu& cpu, uint64_t cycles) {
  const Function& function = *cpu.function;
  TruthRow& row = truth_[cpu.truth_row];
  while (cycles > 0) {
    const uint32_t counting = cpu.pmu.counting_mask(cpu.cpl);
    if (counting == 0) {
      cpu.time += cycles;
      return;
    }
    // Run up to the first counter overflow, or to the end of the run.
    uint64_t step = cycles;
    uint32_t quantities = 0;
    for (uint32_t bits = counting; bits != 0; bits &= bits - 1) {
      const uint32_t counter = static_cast<uint32_t>(__builtin_ctz(bits));
      const Quantity quantity = cpu.pmu.quantity(counter);
      quantities |= 1u << quantity;
      const uint64_t rate = function.rate[quantity];
      if (rate == 0) continue;
      const uint64_t until = cpu.pmu.UntilOverflow(counter);
      uint64_t at;
      if (until < (uint64_t{1} << 40)) {  // fits 64-bit arithmetic
        at = (until * kPerMillion - cpu.carry[quantity] + rate - 1) / rate;
      } else {
        const unsigned __int128 needed =
            static_cast<unsigned __int128>(until) * kPerMillion - cpu.carry[quantity];
        const unsigned __int128 wide = (needed + rate - 1) / rate;
        at = wide > step ? step : static_cast<uint64_t>(wide);
      }
      if (at < step) step = at;
    }
    uint64_t events[kQuantityCount];
    for (uint32_t bits = quantities; bits != 0; bits &= bits - 1) {
      const uint32_t quantity = static_cast<uint32_t>(__builtin_ctz(bits));
      // step is below 2^40 cycles and rates below 2^24 per million: no overflow in 64 bits.
      const uint64_t total = step * function.rate[quantity] + cpu.carry[quantity];
      events[quantity] = total / kPerMillion;
      cpu.carry[quantity] = total % kPerMillion;
    }
    bool pmi = false;
    for (uint32_t bits = counting; bits != 0; bits &= bits - 1) {
      const uint32_t counter = static_cast<uint32_t>(__builtin_ctz(bits));
      const uint64_t counted = events[cpu.pmu.quantity(counter)];
      row.events[counter] += counted;
      if (cpu.pmu.Add(counter, counted)) {
        ++row.overflows[counter];
        pmi |= cpu.pmu.raises_pmi(counter);
      }
    }
    cycles -= step;
    cpu.time += step;
    if (pmi) DeliverPmi(cpu);
  }
}

void SimMachine::DeliverPmi(Cpu& cpu) {
  if (!cpu.pmi_routed || cpu.pmi_masked || engine_ == nullptr) return;
  // Intel's LVT masks itself on delivery; the handler re-arms it.
  if (scenario_.machine.pmu == PmuModelKind::kIntelArchV4) cpu.pmi_masked = true;
  CaptureContext(cpu);
  nmi_cpu_ = static_cast<int>(cpu.index);
  ++pmis_;
  engine_->HandlePmi(cpu.index);
  nmi_cpu_ = -1;
}

void SimMachine::DeliverTick(Cpu& cpu) {
  if (engine_ == nullptr) return;
  // As a host's timer interrupt does: the engine's handler runs with the interrupted context at
  // hand, whatever the PMI routing (the timer needs none).
  CaptureContext(cpu);
  nmi_cpu_ = static_cast<int>(cpu.index);
  ++ticks_;
  engine_->HandlePmi(cpu.index);
  nmi_cpu_ = -1;
}

void SimMachine::CaptureContext(Cpu& cpu) {
  const Function& function = *cpu.function;
  InterruptedContext& context = cpu.context;
  context = InterruptedContext{};
  const bool idle = cpu.vcpu < 0;
  const Vcpu* vcpu = idle ? nullptr : &vcpus_[cpu.vcpu];
  context.domain = idle ? kDomainIdle : cpu.domain->id;
  context.vcpu = idle ? static_cast<uint16_t>(cpu.index) : vcpu->id;
  context.type = cpu.domain->type;
  context.in_hypervisor = cpu.mode == Mode::kHypervisor;
  context.cpl = cpu.cpl;
  context.pv_kernel_mode = cpu.mode == Mode::kKernel;
  context.hvm_long_mode = true;
  context.ip = function.start + rng_.NextBelow(function.size);
  cpu.user_offset = 0;
  context.frame_pointer = function.stack.empty()
                              ? 0
                              : (context.in_hypervisor ? kHypervisorStackRegion : kStackRegion) +
                                    (uint64_t{cpu.index} << 16);
  context.pid = context.tid = ring::kNoPid;
  if (!idle && vcpu->process != kNone) {
    const Process& process = cpu.domain->processes[vcpu->process];
    context.address_space = process.address_space;
    uint32_t pid = process.pid;
    if (process.period_ns != 0) {
      // One of the program's runs alive now, each as likely: born in (now - lifetime, now].
      const uint64_t now = NsOf(cpu.time);
      const uint64_t newest = now / process.period_ns;
      const uint64_t oldest =
          now < process.lifetime_ns ? 0 : (now - process.lifetime_ns) / process.period_ns + 1;
      const uint64_t run = oldest >= newest ? newest : oldest + rng_.NextBelow(newest - oldest + 1);
      pid = process.PidOf(run);
      context.address_space = 0x100000000ULL + (uint64_t{cpu.domain->id} << 28) + (uint64_t{pid} << 12);
      if (cpu.mode == Mode::kUser) {
        cpu.user_offset = process.ChurnOffset(run);
        context.ip += cpu.user_offset;
      }
    }
    if (cpu.mode != Mode::kHypervisor) context.pid = context.tid = pid;
  }
}

}  // namespace hvprof::sim
