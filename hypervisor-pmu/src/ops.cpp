// The operation dispatcher and state machine. Legacy semantics are Xen 4.17's, except for
// the quirks docs/abi.md lists as fixed.
#include "freestanding.h"
#include "hvpmu/engine.h"

namespace hvpmu {

using detail::LoadRelaxed;
using detail::StoreRelaxed;

namespace {

// Reserved words of an extensible struct must be zero, so they can gain meaning later.
template <typename T, unsigned N>
bool AllZero(const T (&words)[N]) {
  for (const T& word : words) {
    if (word != 0) return false;
  }
  return true;
}

template <typename T>
ErrorCode CheckExtensible(const void* arg, uint32_t size) {
  if (size != sizeof(T)) return ErrorCode::kBadArgSize;
  const T* value = static_cast<const T*>(arg);
  if (value->struct_size != sizeof(T)) return ErrorCode::kBadArgSize;
  if (value->abi_version != kAbiVersion) return ErrorCode::kBadAbiVersion;
  return ErrorCode::kOk;
}

bool IsPrivileged(uint32_t op) {
  switch (op) {
    case legacy::kOpInit:
    case legacy::kOpEnableVirq:
    case legacy::kOpDisableVirq:
    case legacy::kOpGetBuffer:
    case kOpInitV2:
    case kOpStatus:
    case kOpGetBufferV2:
      return false;
    default:
      return true;
  }
}

}  // namespace

ErrorCode Engine::DoOp(DomainId caller, uint32_t op, void* arg, uint32_t arg_size) {
  if (!IsKnownOp(op)) return ErrorCode::kBadOp;
  if (arg == nullptr && arg_size != 0) return ErrorCode::kBadArgSize;
  if (IsPrivileged(op) && (primary_ == kDomainInvalid || caller != primary_)) {
    return ErrorCode::kNotPrimary;
  }
  auto no_arg = [&](ErrorCode (Engine::*handler)()) {
    return arg_size != 0 ? ErrorCode::kBadArgSize : (this->*handler)();
  };
  switch (op) {
    case legacy::kOpInit: return OpInit(caller, arg, arg_size, false);
    case kOpInitV2: return OpInit(caller, arg, arg_size, true);
    case legacy::kOpResetActiveList: return no_arg(&Engine::OpResetActiveList);
    case legacy::kOpResetPassiveList: return no_arg(&Engine::OpResetPassiveList);
    case legacy::kOpSetActive: return OpSetActive(arg, arg_size);
    case legacy::kOpSetPassive: return OpSetPassive(caller, arg, arg_size, false);
    case kOpSetPassiveV2: return OpSetPassive(caller, arg, arg_size, true);
    case legacy::kOpReserveCounters: return no_arg(&Engine::OpReserveCounters);
    case legacy::kOpCounter: return OpCounter(arg, arg_size);
    case legacy::kOpSetupEvents: return no_arg(&Engine::OpSetupEvents);
    case legacy::kOpEnableVirq: return arg_size != 0 ? ErrorCode::kBadArgSize : OpEnableVirq(caller);
    case legacy::kOpStart: return no_arg(&Engine::OpStart);
    case legacy::kOpStop: return no_arg(&Engine::OpStop);
    case legacy::kOpDisableVirq:
      return arg_size != 0 ? ErrorCode::kBadArgSize : OpDisableVirq(caller);
    case legacy::kOpReleaseCounters: return no_arg(&Engine::OpReleaseCounters);
    case legacy::kOpShutdown: return no_arg(&Engine::OpShutdown);
    case legacy::kOpGetBuffer: return OpGetBuffer(caller, arg, arg_size, false);
    case kOpGetBufferV2: return OpGetBuffer(caller, arg, arg_size, true);
    case legacy::kOpSetBacktrace: return OpSetBacktrace(arg, arg_size);
    case legacy::kOpGetIbsCaps:
      return arg_size != 0 ? ErrorCode::kBadArgSize : ErrorCode::kNotSupported;
    case legacy::kOpIbsCounter:
      return arg_size != sizeof(legacy::IbsCounter) ? ErrorCode::kBadArgSize
                                                     : ErrorCode::kNotSupported;
    case kOpStatus: return OpStatus(caller, arg, arg_size);
    default: return ErrorCode::kBadOp;
  }
}

ErrorCode Engine::OpInit(DomainId caller, void* arg, uint32_t size, bool v2) {
  if (v2) {
    if (ErrorCode error = CheckExtensible<InitV2>(arg, size); error != ErrorCode::kOk) {
      return error;
    }
    if (!AllZero(static_cast<InitV2*>(arg)->reserved)) return ErrorCode::kReservedNotZero;
  } else if (size != sizeof(legacy::Init)) {
    return ErrorCode::kBadArgSize;
  }
  if (driver_ == nullptr) return ErrorCode::kNoPmu;
  DomainInfo info{};
  if (!platform_.GetDomainInfo(caller, &info)) return ErrorCode::kNoSuchDomain;

  const bool primary = caller == primary_ || (primary_ == kDomainInvalid && info.is_hardware_domain);
  if (primary) {
    // Xen re-initialises from any state, leaving counters running; hvprof refuses.
    if (state_ == EngineState::kProfiling) return ErrorCode::kProfiling;
    if (state_ != EngineState::kIdle && state_ != EngineState::kInitialized) {
      return ErrorCode::kBadState;
    }
    primary_ = caller;
    state_ = EngineState::kInitialized;
  }

  if (v2) {
    auto* init = static_cast<InitV2*>(arg);
    driver_->Describe(init);
    init->abi_version = kAbiVersion;
    init->is_primary = primary;
    init->caller_domain = caller;
    init->num_pcpus = num_cpus_;
    detail::StrCopy(init->cpu_type, driver_->cpu_type(), sizeof init->cpu_type);
  } else {
    auto* init = static_cast<legacy::Init*>(arg);
    init->num_events = static_cast<int32_t>(driver_->num_counters());
    init->is_primary = primary;
    detail::StrCopy(init->cpu_type, driver_->cpu_type(), sizeof init->cpu_type);
  }
  return ErrorCode::kOk;
}

ErrorCode Engine::OpResetActiveList() {
  if (state_ == EngineState::kProfiling) return ErrorCode::kProfiling;
  // Xen leaks the reference of every listed domain that never called enable_virq; here every
  // entry is released.
  for (DomainSlot& slot : TakenSlots()) {
    if (slot.in_use && slot.role == DomainRole::kActive) RemoveFromActiveList(&slot);
  }
  return ErrorCode::kOk;
}

ErrorCode Engine::OpResetPassiveList() {
  if (state_ == EngineState::kProfiling) return ErrorCode::kProfiling;
  for (DomainSlot& slot : TakenSlots()) {
    if (slot.in_use && slot.role == DomainRole::kPassive) RemoveFromPassiveList(&slot);
  }
  return ErrorCode::kOk;
}

ErrorCode Engine::OpSetActive(void* arg, uint32_t size) {
  if (size != sizeof(legacy::DomainIdArg)) return ErrorCode::kBadArgSize;
  if (state_ != EngineState::kInitialized) return ErrorCode::kBadState;
  const DomainId domain = *static_cast<const legacy::DomainIdArg*>(arg);
  DomainInfo info{};
  if (domain > kMaxDomainId || !platform_.GetDomainInfo(domain, &info)) {
    return ErrorCode::kNoSuchDomain;
  }
  DomainSlot* slot = FindSlot(domain);
  if (slot != nullptr && slot->role == DomainRole::kActive) return ErrorCode::kAlreadyListed;
  if (slot != nullptr && slot->role == DomainRole::kPassive) return ErrorCode::kActiveAndPassive;
  if (CountListed(DomainRole::kActive) + CountListed(DomainRole::kPassive) >= kMaxListedDomains) {
    return ErrorCode::kTooManyDomains;
  }
  slot = FindOrCreateSlot(domain);
  if (slot == nullptr) return ErrorCode::kTooManyDomains;
  if (!platform_.AcquireDomain(domain)) {
    MaybeFreeSlot(slot);
    return ErrorCode::kNoSuchDomain;
  }
  slot->holds_ref = true;
  slot->role = DomainRole::kActive;
  slot->activated = false;
  return ErrorCode::kOk;
}

ErrorCode Engine::OpSetPassive(DomainId caller, void* arg, uint32_t size, bool v2) {
  DomainId domain;
  uint32_t capacity;
  uint32_t watermark = 0;
  if (v2) {
    if (ErrorCode error = CheckExtensible<BufferV2>(arg, size); error != ErrorCode::kOk) {
      return error;
    }
    const auto* request = static_cast<const BufferV2*>(arg);
    if (!AllZero(request->reserved)) return ErrorCode::kReservedNotZero;
    domain = request->domain;
    capacity = request->capacity;
    watermark = request->watermark;
  } else {
    if (size != sizeof(legacy::Passive)) return ErrorCode::kBadArgSize;
    const auto* request = static_cast<const legacy::Passive*>(arg);
    domain = request->domain_id;
    capacity = static_cast<uint32_t>(request->max_samples);
  }
  if (state_ != EngineState::kInitialized) return ErrorCode::kBadState;
  DomainInfo info{};
  if (domain > kMaxDomainId || !platform_.GetDomainInfo(domain, &info)) {
    return ErrorCode::kNoSuchDomain;
  }
  if (domain == primary_) return ErrorCode::kActiveAndPassive;  // the primary is always active
  DomainSlot* slot = FindSlot(domain);
  if (slot != nullptr && slot->role == DomainRole::kPassive) return ErrorCode::kAlreadyListed;
  if (slot != nullptr && slot->role == DomainRole::kActive) return ErrorCode::kActiveAndPassive;
  if (slot != nullptr && slot->shared) return ErrorCode::kBusy;  // its own rings are mapped
  if (CountListed(DomainRole::kActive) + CountListed(DomainRole::kPassive) >= kMaxListedDomains) {
    return ErrorCode::kTooManyDomains;
  }
  slot = FindOrCreateSlot(domain);
  if (slot == nullptr) return ErrorCode::kTooManyDomains;
  FreeRings(slot);  // rings the domain allocated for itself and no longer maps
  if (!platform_.AcquireDomain(domain)) {
    MaybeFreeSlot(slot);
    return ErrorCode::kNoSuchDomain;
  }
  slot->holds_ref = true;
  ErrorCode error = AllocateRings(slot, v2 ? RingFormat::kV2 : RingFormat::kLegacy, capacity,
                                  watermark, false, false, caller);
  if (error == ErrorCode::kOk) error = ShareRings(slot, caller);
  if (error != ErrorCode::kOk) {
    FreeRings(slot);
    platform_.ReleaseDomain(domain);
    slot->holds_ref = false;
    MaybeFreeSlot(slot);
    return error;
  }
  slot->role = DomainRole::kPassive;
  PublishRouting(slot);

  if (v2) {
    auto* reply = static_cast<BufferV2*>(arg);
    reply->capacity = slot->capacity;
    reply->watermark = slot->watermark;
    reply->nbuf = slot->nbuf;
    reply->nbuf_vcpu = slot->nbuf_vcpu;
    reply->flags = 0;
    reply->ring_bytes = slot->ring_bytes;
    reply->region_bytes = slot->region.bytes;
    reply->region_handle = slot->region.handle;
  } else {
    auto* reply = static_cast<legacy::Passive*>(arg);
    reply->nbuf = static_cast<int32_t>(slot->nbuf);
    reply->bufsize = static_cast<int32_t>(slot->ring_bytes);
    reply->buf_gmaddr = slot->region.handle;
  }
  return ErrorCode::kOk;
}

ErrorCode Engine::OpReserveCounters() {
  if (state_ != EngineState::kInitialized) {
    return state_ == EngineState::kProfiling ? ErrorCode::kProfiling : ErrorCode::kBadState;
  }
  if (driver_ == nullptr) return ErrorCode::kNoPmu;
  if (ErrorCode error = driver_->Reserve(); error != ErrorCode::kOk) return error;
  for (CounterConfig& counter : counters_) counter = CounterConfig{};
  state_ = EngineState::kCountersReserved;
  return ErrorCode::kOk;
}

ErrorCode Engine::OpCounter(void* arg, uint32_t size) {
  if (size != sizeof(legacy::Counter)) return ErrorCode::kBadArgSize;
  if (state_ != EngineState::kCountersReserved) return ErrorCode::kBadState;
  if (CountListed(DomainRole::kActive) == 0) return ErrorCode::kNoActiveDomains;
  const auto* request = static_cast<const legacy::Counter*>(arg);
  if (request->ind >= driver_->num_counters() || request->ind >= kMaxCounters) {
    return ErrorCode::kBadCounter;
  }
  if (request->event > 0xFFFF) return ErrorCode::kUnknownEvent;
  if (request->unit_mask > 0xFF) return ErrorCode::kBadUnitMask;
  CounterConfig config;
  config.enabled = request->enabled != 0;
  config.event = static_cast<uint16_t>(request->event);
  config.unit_mask = static_cast<uint8_t>(request->unit_mask);
  config.kernel = request->kernel != 0;
  config.user = request->user != 0;
  config.count = request->count;
  if (ErrorCode error = driver_->Validate(request->ind, config); error != ErrorCode::kOk) {
    return error;
  }
  counters_[request->ind] = config;
  return ErrorCode::kOk;
}

ErrorCode Engine::OpSetupEvents() {
  if (state_ != EngineState::kCountersReserved) return ErrorCode::kBadState;
  bool any = false;
  for (const CounterConfig& counter : counters_) any |= counter.enabled;
  if (!any) return ErrorCode::kNoCounters;
  if (ErrorCode error = driver_->Setup(counters_, kMaxCounters); error != ErrorCode::kOk) {
    return error;
  }
  for (uint32_t i = 0; i < kMaxCounters; ++i) {
    StoreRelaxed(&periods_[i], counters_[i].enabled ? counters_[i].count : uint64_t{0});
  }
  state_ = EngineState::kReady;
  return ErrorCode::kOk;
}

ErrorCode Engine::OpEnableVirq(DomainId caller) {
  if (caller == primary_) {
    if (state_ != EngineState::kReady) {
      return state_ == EngineState::kProfiling ? ErrorCode::kProfiling : ErrorCode::kBadState;
    }
  }
  DomainSlot* slot = FindSlot(caller);
  if (slot == nullptr || slot->role != DomainRole::kActive) return ErrorCode::kNotListed;
  if (slot->format == RingFormat::kNone || !slot->shared) return ErrorCode::kNoBuffer;
  // Xen counts a second enable_virq twice, after which start can never succeed.
  if (slot->activated) return ErrorCode::kAlreadyActivated;

  if (caller == primary_) {
    for (DomainSlot& other : TakenSlots()) {
      if (other.in_use && other.role == DomainRole::kPassive) ResetRings(&other);
    }
    for (CpuStats& stats : cpu_stats_) {
      StoreRelaxed(&stats.samples, uint64_t{0});
      StoreRelaxed(&stats.idle_samples, uint64_t{0});
      for (uint64_t& lost : stats.lost) StoreRelaxed(&lost, uint64_t{0});
    }
  }
  ResetRings(slot);
  slot->activated = true;
  PublishRouting(slot);
  return ErrorCode::kOk;
}

ErrorCode Engine::OpStart() {
  if (state_ != EngineState::kReady) {
    return state_ == EngineState::kProfiling ? ErrorCode::kProfiling : ErrorCode::kBadState;
  }
  if (CountActivated() != CountListed(DomainRole::kActive)) return ErrorCode::kNotActivated;
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) platform_.SetPmiRouting(cpu, true);
  driver_->Start();
  state_ = EngineState::kProfiling;
  if (num_sched_rings_ != 0) detail::StoreRelease(&sched_routing_, uint8_t{1});
  return ErrorCode::kOk;
}

ErrorCode Engine::OpStop() {
  if (state_ != EngineState::kProfiling) return ErrorCode::kBadState;
  driver_->Stop();
  // Unlike Xen, no busy wait: the LVT entry is restored as it is.
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) platform_.SetPmiRouting(cpu, false);
  detail::StoreRelease(&sched_routing_, uint8_t{0});
  platform_.QuiesceSamplers();
  state_ = EngineState::kReady;
  NotifyAllConsumers();  // the final flush: every consumer drains what is left
  return ErrorCode::kOk;
}

ErrorCode Engine::OpDisableVirq(DomainId caller) {
  DomainSlot* slot = FindSlot(caller);
  if (slot == nullptr || slot->role == DomainRole::kPassive ||
      (!slot->activated && slot->format == RingFormat::kNone)) {
    return ErrorCode::kNotActive;
  }
  if (state_ == EngineState::kProfiling && slot->activated) return ErrorCode::kProfiling;
  if (slot->activated) Deactivate(slot);
  // Unshare and free: the next get_buffer allocates afresh, and PMU ownership is dropped per
  // domain (Xen's first disable_virq releases it for everybody).
  FreeRings(slot);
  MaybeFreeSlot(slot);
  return ErrorCode::kOk;
}

ErrorCode Engine::OpReleaseCounters() {
  if (state_ == EngineState::kProfiling) return ErrorCode::kProfiling;
  if (state_ != EngineState::kCountersReserved && state_ != EngineState::kReady) {
    return ErrorCode::kBadState;
  }
  driver_->Release();
  for (CounterConfig& counter : counters_) counter = CounterConfig{};
  for (uint64_t& period : periods_) StoreRelaxed(&period, uint64_t{0});
  state_ = EngineState::kInitialized;
  OpResetPassiveList();
  return ErrorCode::kOk;
}

ErrorCode Engine::OpShutdown() {
  if (state_ != EngineState::kInitialized) {
    return state_ == EngineState::kProfiling ? ErrorCode::kProfiling : ErrorCode::kBadState;
  }
  OpResetActiveList();
  OpResetPassiveList();
  StoreRelaxed(&backtrace_depth_, uint32_t{0});
  primary_ = kDomainInvalid;
  state_ = EngineState::kIdle;  // Xen stays INITIALIZED with no primary
  return ErrorCode::kOk;
}

ErrorCode Engine::OpGetBuffer(DomainId caller, void* arg, uint32_t size, bool v2) {
  uint32_t capacity;
  uint32_t watermark = 0;
  bool want_sched = false;
  if (v2) {
    if (ErrorCode error = CheckExtensible<BufferV2>(arg, size); error != ErrorCode::kOk) {
      return error;
    }
    const auto* request = static_cast<const BufferV2*>(arg);
    if (!AllZero(request->reserved)) return ErrorCode::kReservedNotZero;
    capacity = request->capacity;
    watermark = request->watermark;
    want_sched = (request->flags & kBufferSchedRings) != 0;
  } else {
    if (size != sizeof(legacy::GetBuffer)) return ErrorCode::kBadArgSize;
    capacity = static_cast<uint32_t>(static_cast<const legacy::GetBuffer*>(arg)->max_samples);
  }
  DomainInfo info{};
  if (!platform_.GetDomainInfo(caller, &info)) return ErrorCode::kNoSuchDomain;
  DomainSlot* slot = FindOrCreateSlot(caller);
  if (slot == nullptr) return ErrorCode::kTooManyDomains;
  if (slot->role == DomainRole::kPassive) return ErrorCode::kBusy;  // shared with the primary
  if (slot->activated) {
    return state_ == EngineState::kProfiling ? ErrorCode::kProfiling : ErrorCode::kBusy;
  }

  const RingFormat format = v2 ? RingFormat::kV2 : RingFormat::kLegacy;
  const bool with_pcpu_rings = v2 && caller == primary_;
  // Scheduling is the whole host's: only the primary records it.
  if (want_sched && !with_pcpu_rings) return ErrorCode::kNotPrimary;
  FreeRings(slot);  // a fresh allocation each time: new size and format, nothing stale
  ErrorCode error =
      AllocateRings(slot, format, capacity, watermark, with_pcpu_rings, want_sched, caller);
  if (error == ErrorCode::kOk) error = ShareRings(slot, caller);
  if (error != ErrorCode::kOk) {
    FreeRings(slot);
    MaybeFreeSlot(slot);
    return error;
  }

  if (v2) {
    auto* reply = static_cast<BufferV2*>(arg);
    reply->domain = caller;
    reply->capacity = slot->capacity;
    reply->watermark = slot->watermark;
    reply->nbuf = slot->nbuf;
    reply->nbuf_vcpu = slot->nbuf_vcpu;
    reply->flags = (slot->nbuf > slot->nbuf_vcpu ? kBufferHasPcpuRings : 0) |
                   (want_sched ? kBufferSchedRings : 0);
    reply->nbuf_sched = want_sched ? num_sched_rings_ : 0;
    reply->ring_bytes = slot->ring_bytes;
    reply->region_bytes = slot->region.bytes;
    reply->region_handle = slot->region.handle;
  } else {
    auto* reply = static_cast<legacy::GetBuffer*>(arg);
    reply->nbuf = static_cast<int32_t>(slot->nbuf);
    reply->bufsize = static_cast<int32_t>(slot->ring_bytes);
    reply->buf_gmaddr = slot->region.handle;
  }
  return ErrorCode::kOk;
}

ErrorCode Engine::OpSetBacktrace(void* arg, uint32_t size) {
  if (size != sizeof(legacy::BacktraceDepthArg)) return ErrorCode::kBadArgSize;
  const uint64_t depth = *static_cast<const legacy::BacktraceDepthArg*>(arg);
  if (depth > ring::kMaxBacktraceDepth) return ErrorCode::kBadBacktraceDepth;
  StoreRelaxed(&backtrace_depth_, static_cast<uint32_t>(depth));
  return ErrorCode::kOk;
}

ErrorCode Engine::OpStatus(DomainId caller, void* arg, uint32_t size) {
  if (ErrorCode error = CheckExtensible<Status>(arg, size); error != ErrorCode::kOk) return error;
  auto* status = static_cast<Status*>(arg);
  const bool privileged = caller == primary_;
  const uint32_t struct_size = status->struct_size;
  const uint32_t from_domain = status->from_domain;
  detail::Zero(status, sizeof *status);
  status->struct_size = struct_size;
  status->from_domain = from_domain;
  status->abi_version = kAbiVersion;
  status->state = static_cast<uint32_t>(state_);
  status->primary = primary_;
  status->caller = caller;
  status->num_pcpus = num_cpus_;
  status->now_ns = platform_.NowNs();
  status->flags = platform_.NamesTasks() ? kStatusNamesTasks : 0u;
  status->backtrace_depth = LoadRelaxed(&backtrace_depth_);
  if (driver_ != nullptr) {
    status->pmu_kind = static_cast<uint32_t>(driver_->kind());
    status->num_counters = driver_->num_counters();
    detail::StrCopy(status->cpu_type, driver_->cpu_type(), sizeof status->cpu_type);
  }
  for (uint32_t i = 0; i < kMaxCounters; ++i) {
    if (!counters_[i].enabled || state_ < EngineState::kReady) continue;
    status->enabled_counters |= 1u << i;
    CounterStatus& counter = status->counters[i];
    counter.enabled = 1;
    counter.event = counters_[i].event;
    counter.unit_mask = counters_[i].unit_mask;
    counter.kernel = counters_[i].kernel;
    counter.user = counters_[i].user;
    counter.count = counters_[i].count;
  }
  status->num_active = CountListed(DomainRole::kActive);
  status->num_activated = CountActivated();
  status->num_passive = CountListed(DomainRole::kPassive);
  if (privileged) {
    for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) {
      const CpuStats& stats = cpu_stats_[cpu];
      status->total_samples += LoadRelaxed(&stats.samples);
      status->idle_samples += LoadRelaxed(&stats.idle_samples);
      for (uint32_t r = 0; r < ring::kLossSlots; ++r) status->lost[r] += LoadRelaxed(&stats.lost[r]);
    }
  }

  // In domain id order, a page at a time: a host can list more domains than one call holds.
  for (uint32_t id = from_domain; id <= kMaxDomainId; ++id) {
    const uint16_t index = slot_of_domain_[id];
    if (index == 0) continue;
    const DomainSlot& slot = slots_[index - 1];
    if (!slot.in_use || (!privileged && slot.id != caller)) continue;
    ++status->total_domains;
    if (status->num_domains == kStatusMaxDomains) continue;
    DomainStatus& entry = status->domains[status->num_domains++];
    entry.domain = slot.id;
    entry.num_rings = static_cast<uint16_t>(slot.nbuf);
    entry.role = static_cast<uint32_t>(slot.role);
    entry.activated = slot.activated;
    entry.ring_format = static_cast<uint32_t>(slot.format);
    entry.capacity = slot.capacity;
    entry.shared = slot.shared;
    // The primary's pCPU rings hold idle samples, counted in idle_samples, not in its own.
    auto add_ring = [&entry](const RingWriter& writer, bool own_samples) {
      const RingStats& stats = writer.stats();
      for (uint32_t m = 0; own_samples && m < ring::kModeCount; ++m) entry.samples[m] += LoadRelaxed(&stats.samples[m]);
      for (uint32_t r = 0; r < ring::kLossSlots; ++r) entry.lost[r] += LoadRelaxed(&stats.lost[r]);
      entry.max_fill = detail::Max(entry.max_fill, LoadRelaxed(&stats.max_fill));
    };
    for (uint32_t i = 0; i < slot.nbuf_vcpu; ++i) add_ring(slot.rings[i], true);
    if (slot.id == primary_) {
      for (uint32_t cpu = 0; cpu < num_pcpu_rings_; ++cpu) add_ring(pcpu_rings_[cpu], false);
    }
    entry.lost[static_cast<uint32_t>(ring::LossReason::kNoRing)] += LoadRelaxed(&slot.no_ring_losses);
  }
  return ErrorCode::kOk;
}

}  // namespace hvpmu
