#include "hvprof/linux/perf_driver.h"

#include <linux/perf_event.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "hvprof/base/log.h"
#include "hvpmu/events.h"
#include "hvpmu/pmu_drivers.h"

namespace hvprof::linux_host {

using hvpmu::AmdCorePmu;
using hvpmu::CounterConfig;
using hvpmu::CpuEventTable;
using hvpmu::kLinuxSoftwareCpuType;
using hvpmu::ErrorCode;
using hvpmu::EventDef;
using hvpmu::FindEventByCode;
using hvpmu::FindEventTable;
using hvpmu::InitV2;
using hvpmu::PmuDriver;
using hvpmu::PmuKind;
using hvpmu::kMaxCounters;

using hvprof::ErrorKind;
using hvprof::MakeError;

namespace {

constexpr uint64_t kSampleType = kSampleIdentifier | kSampleIp | kSampleTid | kSampleTime |
                                 kSampleCpu | kSamplePeriod;
// The scheduler's tracepoints: who (the task running: prev, or the waker), when, where, and
// the record; the same sample_id trailer as the counters'.
constexpr uint64_t kTracepointSampleType = kSampleIdentifier | kSampleTid | kSampleTime | kSampleCpu | kSampleRaw;
// perf's callchain has room for a few context markers besides the frames.
constexpr uint32_t kCallchainMarkers = 4;

ErrorCode CodeFor(const hvprof::Error& error) {
  switch (error.kind()) {
    case ErrorKind::kNoSpace: return ErrorCode::kNoMemory;
    case ErrorKind::kBusy:
    case ErrorKind::kPermissionDenied: return ErrorCode::kBusy;
    case ErrorKind::kUnsupported: return ErrorCode::kNoPmu;
    case ErrorKind::kInvalidArgument: return ErrorCode::kUnknownEvent;
    default: return ErrorCode::kHardwareFault;
  }
}

}  // namespace

uint64_t MonotonicNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t RawEventConfig(PmuKind kind, const CounterConfig& config) {
  if (kind == PmuKind::kAmdCore || kind == PmuKind::kAmdLegacy) {
    // Event select [7:0], unit mask [15:8], event select [11:8] at [35:32]; perf sets the
    // USR/OS/INT/EN bits itself from the attr.
    return AmdCorePmu::EncodeControl(config) & 0x0000000F0000FFFFull;
  }
  return (config.event & 0xFFull) | (uint64_t{config.unit_mask} << 8);
}

PerfPmuDriver::PerfPmuDriver(PerfDriverOptions options, PmuDriver* hardware, int epoll_fd)
    : options_(std::move(options)), hardware_(hardware), epoll_fd_(epoll_fd) {
  if (options_.source == EventSource::kHardware && hardware_ == nullptr) {
    options_.source = EventSource::kSoftware;
  }
  layout_.sample_type = kSampleType;
  layout_.sample_id_all = true;
  counters_.resize(num_counters());
}

PerfPmuDriver::~PerfPmuDriver() { CloseAll(); }

const char* PerfPmuDriver::cpu_type() const {
  return options_.source == EventSource::kHardware ? hardware_->cpu_type() : kLinuxSoftwareCpuType;
}

uint32_t PerfPmuDriver::num_counters() const {
  const uint32_t count =
      options_.source == EventSource::kHardware ? hardware_->num_counters() : kSoftwareCounters;
  return std::min(count, kMaxCounters);
}

void PerfPmuDriver::Describe(InitV2* init) const {
  if (options_.source == EventSource::kHardware) {
    hardware_->Describe(init);
    init->pmu_kind = static_cast<uint32_t>(PmuKind::kExternal);
    init->num_counters = num_counters();
    return;
  }
  init->pmu_kind = static_cast<uint32_t>(PmuKind::kExternal);
  init->pmu_version = 0;
  init->num_counters = kSoftwareCounters;
  init->num_gp_counters = kSoftwareCounters;
  init->num_fixed_counters = 0;
  init->gp_counter_width = 64;
  init->fixed_counter_width = 0;
  init->max_count = kSoftwareMaxCount;
  init->flags = 0;
}

ErrorCode PerfPmuDriver::Validate(uint32_t index, const CounterConfig& config) const {
  if (options_.source == EventSource::kHardware) return hardware_->Validate(index, config);
  if (index >= kSoftwareCounters) return ErrorCode::kBadCounter;
  if (!config.enabled) return ErrorCode::kOk;
  const CpuEventTable* table = FindEventTable(kLinuxSoftwareCpuType);
  if (table == nullptr) return ErrorCode::kUnknownEvent;
  const EventDef* event = FindEventByCode(*table, config.event, config.unit_mask);
  if (event == nullptr) {
    for (uint32_t i = 0; i < table->num_events; ++i) {
      if (table->events[i].code == config.event) return ErrorCode::kBadUnitMask;
    }
    return ErrorCode::kUnknownEvent;
  }
  if (config.count == 0 || config.count < event->min_count) return ErrorCode::kCountTooSmall;
  if (config.count > kSoftwareMaxCount) return ErrorCode::kCountTooLarge;
  const double ns = config.event == kCpuClockNsEvent
                        ? static_cast<double>(config.count)
                        : static_cast<double>(config.count) * 1000.0 / options_.mhz;
  if (ns < static_cast<double>(kMinCpuClockPeriodNs)) return ErrorCode::kCountTooSmall;
  return ErrorCode::kOk;
}

ErrorCode PerfPmuDriver::Fail(const hvprof::Error& error) {
  last_error_ = error.message();
  hvprof::Log(hvprof::LogLevel::kError, "{}", last_error_);
  CloseAll();
  return CodeFor(error);
}

ErrorCode PerfPmuDriver::Reserve() {
  last_error_.clear();
  if (!options_.dry_run && !options_.cpus.empty()) {
    // The counters may have been taken since we started (another tool, a changed sysctl).
    auto probe = ProbePerf(static_cast<int>(options_.cpus.front()), true, options_.paths);
    if (!probe) return Fail(probe.error());
  }
  reserved_ = true;
  return ErrorCode::kOk;
}

void PerfPmuDriver::Release() {
  if (profiling_) Stop();
  CloseAll();
  for (Counter& counter : counters_) counter = Counter{};
  reserved_ = false;
}

void PerfPmuDriver::CloseAll() {
  for (CpuRing& ring : rings_) {
    if (epoll_fd_ >= 0 && ring.tracker.valid()) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, ring.tracker.get(), nullptr);
    }
    ring.counters.clear();
    ring.tracepoints.clear();
    ring.ring = PerfRing();
    ring.mapping.Reset();
    ring.tracker.Reset();
  }
  rings_.clear();
  ids_.clear();
  sched_ids_.clear();
  layout_.other_ids = {};
  layout_.other_sample_type = 0;
  set_up_ = false;
  profiling_ = false;
}

void PerfPmuDriver::FillAttr(const Counter& counter, perf_event_attr* attr) const {
  *attr = perf_event_attr{};
  attr->type = counter.type;
  attr->config = counter.config_bits;
  attr->sample_period = counter.period;
  attr->sample_type = layout_.sample_type;
  attr->read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  attr->disabled = 1;
  attr->exclude_kernel = counter.config.kernel ? 0 : 1;
  attr->exclude_user = counter.config.user ? 0 : 1;
  attr->exclude_hv = 1;
  attr->sample_id_all = 1;
  attr->use_clockid = 1;
  attr->clockid = CLOCK_MONOTONIC;
  if (options_.callchain_depth != 0) {
    attr->sample_type |= PERF_SAMPLE_CALLCHAIN;
    attr->sample_max_stack = static_cast<uint16_t>(options_.callchain_depth + kCallchainMarkers);
  }
}

hvprof::Result<void> PerfPmuDriver::OpenAll() {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t data_bytes = uint64_t{options_.ring_pages} * page;
  uint64_t next_dry_id = 1;
  for (uint32_t cpu : options_.cpus) {
    CpuRing ring;
    ring.cpu = cpu;
    auto add_id = [&](int fd, int counter) -> hvprof::Result<void> {
      uint64_t id = 0;
      if (options_.dry_run) {
        id = next_dry_id++;
      } else if (::ioctl(fd, PERF_EVENT_IOC_ID, &id) != 0) {
        return hvprof::ErrnoError(errno, fmt::format("PERF_EVENT_IOC_ID on CPU {}", cpu));
      }
      ids_.push_back(IdEntry{id, counter, cpu});
      return hvprof::Ok();
    };
    if (!options_.dry_run) {
      // The tracker: side band only, enabled from now on.
      perf_event_attr attr{};
      attr.type = PERF_TYPE_SOFTWARE;
      attr.config = PERF_COUNT_SW_DUMMY;
      attr.sample_period = 1;
      attr.sample_type = layout_.sample_type;
      attr.sample_id_all = 1;
      attr.mmap = 1;
      attr.mmap2 = 1;
      attr.comm = 1;
      attr.comm_exec = 1;
      attr.task = 1;
      attr.build_id = 1;
      attr.use_clockid = 1;
      attr.clockid = CLOCK_MONOTONIC;
      attr.exclude_hv = 1;
      attr.watermark = 1;
      attr.wakeup_watermark = static_cast<uint32_t>(data_bytes / 4);
      if (options_.callchain_depth != 0) {
        attr.sample_type |= PERF_SAMPLE_CALLCHAIN;
        attr.sample_max_stack = static_cast<uint16_t>(options_.callchain_depth + kCallchainMarkers);
      }
      HVPROF_TRY(tracker, OpenPerfEvent(attr, static_cast<int>(cpu), "the process tracker",
                                        options_.paths));
      ring.tracker = std::move(tracker);
      const uint64_t bytes = page + data_bytes;
      void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ring.tracker.get(), 0);
      if (base == MAP_FAILED) return PerfMmapError(errno, data_bytes, static_cast<int>(cpu), options_.paths);
      ring.mapping = hvprof::ScopedMmap(base, bytes);
      HVPROF_TRY(attached, PerfRing::Attach(base, bytes, page));
      ring.ring = attached;
      HVPROF_TRYV(add_id(ring.tracker.get(), -1));
      if (epoll_fd_ >= 0) {
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.u32 = cpu;
        if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, ring.tracker.get(), &event) != 0) {
          return hvprof::ErrnoError(errno, "epoll_ctl on a perf ring");
        }
      }
    } else {
      HVPROF_TRYV(add_id(-1, -1));
    }
    for (uint32_t index = 0; index < counters_.size(); ++index) {
      const Counter& counter = counters_[index];
      if (!counter.enabled) continue;
      hvprof::ScopedFd fd;
      if (!options_.dry_run) {
        perf_event_attr attr;
        FillAttr(counter, &attr);
        const std::string what =
            counter.type == PERF_TYPE_RAW
                ? fmt::format("raw event {:#x} (counter {})", counter.config_bits, index)
                : fmt::format("cpu-clock every {} ns (counter {})", counter.period, index);
        HVPROF_TRY(opened, OpenPerfEvent(attr, static_cast<int>(cpu), what, options_.paths));
        fd = std::move(opened);
        if (::ioctl(fd.get(), PERF_EVENT_IOC_SET_OUTPUT, ring.tracker.get()) != 0) {
          return hvprof::ErrnoError(errno, fmt::format("PERF_EVENT_IOC_SET_OUTPUT on CPU {}", cpu));
        }
      }
      HVPROF_TRYV(add_id(fd.get(), static_cast<int>(index)));
      ring.counters.emplace_back(index, std::move(fd));
    }
    for (uint32_t k = 0; sched_ && k < kSchedTracepoints; ++k) {
      const auto kind = static_cast<SchedTracepoint>(k);
      if (sched_->id(kind) == 0) continue;  // not on this kernel
      hvprof::ScopedFd fd;
      if (!options_.dry_run) {
        perf_event_attr attr{};
        attr.type = PERF_TYPE_TRACEPOINT;
        attr.config = sched_->id(kind);
        attr.sample_period = 1;  // every event: tracepoints are not throttled at period 1
        attr.sample_type = kTracepointSampleType;
        attr.disabled = 1;
        attr.sample_id_all = 1;
        attr.use_clockid = 1;
        attr.clockid = CLOCK_MONOTONIC;
        HVPROF_TRY(opened, OpenPerfEvent(attr, static_cast<int>(cpu),
                                         fmt::format("the {} tracepoint (--sched)", sched_->name(kind)),
                                         options_.paths));
        fd = std::move(opened);
        if (::ioctl(fd.get(), PERF_EVENT_IOC_SET_OUTPUT, ring.tracker.get()) != 0) {
          return hvprof::ErrnoError(errno, fmt::format("PERF_EVENT_IOC_SET_OUTPUT on CPU {}", cpu));
        }
      }
      HVPROF_TRYV(add_id(fd.get(), TracepointCounter(kind)));
      ring.tracepoints.emplace_back(kind, std::move(fd));
    }
    rings_.push_back(std::move(ring));
  }
  for (const IdEntry& entry : ids_) {
    if (TracepointOf(entry.counter)) sched_ids_.push_back(entry.id);
  }
  std::sort(sched_ids_.begin(), sched_ids_.end());
  layout_.other_ids = sched_ids_;
  layout_.other_sample_type = sched_ids_.empty() ? 0 : kTracepointSampleType;
  return hvprof::Ok();
}

ErrorCode PerfPmuDriver::Setup(const CounterConfig* configs, uint32_t count) {
  last_error_.clear();
  CloseAll();
  accumulated_ns_ = 0;  // rates are per setup
  layout_.sample_type = kSampleType | (options_.callchain_depth != 0 ? kSampleCallchain : 0);
  sched_.reset();
  if (sched_wanted_ && sched_wanted_()) {
    auto points = SchedTracepoints::Read(options_.paths);
    if (!points) return Fail(points.error());
    sched_ = std::move(points.value());
  }
  for (uint32_t index = 0; index < counters_.size(); ++index) {
    Counter& counter = counters_[index];
    counter = Counter{};
    if (index >= count || !configs[index].enabled) continue;
    counter.enabled = true;
    counter.config = configs[index];
    if (options_.source == EventSource::kHardware) {
      counter.type = PERF_TYPE_RAW;
      counter.config_bits = RawEventConfig(hardware_->kind(), counter.config);
      counter.period = counter.config.count;
      counter.requested_hz = options_.mhz * 1e6 / static_cast<double>(counter.config.count);
    } else {
      counter.type = PERF_TYPE_SOFTWARE;
      counter.config_bits = PERF_COUNT_SW_CPU_CLOCK;
      const double ns = counter.config.event == kCpuClockNsEvent
                            ? static_cast<double>(counter.config.count)
                            : static_cast<double>(counter.config.count) * 1000.0 / options_.mhz;
      counter.period = std::max<uint64_t>(kMinCpuClockPeriodNs, std::llround(ns));
      counter.requested_hz = 1e9 / static_cast<double>(counter.period);
    }
  }
  if (auto opened = OpenAll(); !opened) return Fail(opened.error());
  set_up_ = true;
  if (on_setup_) on_setup_();
  return ErrorCode::kOk;
}

void PerfPmuDriver::Start() {
  if (!set_up_ || profiling_) return;
  for (CpuRing& ring : rings_) {
    for (auto& [index, fd] : ring.counters) {
      if (fd.valid() && ::ioctl(fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0) {
        hvprof::Log(hvprof::LogLevel::kError, "cannot enable counter {} on CPU {}: {}", index,
                    ring.cpu, std::strerror(errno));
      }
    }
    for (auto& [kind, fd] : ring.tracepoints) {
      if (fd.valid() && ::ioctl(fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0) {
        hvprof::Log(hvprof::LogLevel::kError, "cannot enable the {} tracepoint on CPU {}: {}",
                    sched_->name(kind), ring.cpu, std::strerror(errno));
      }
    }
  }
  profiling_ = true;
  started_ns_ = MonotonicNs();
}

void PerfPmuDriver::Stop() {
  if (!profiling_) return;
  for (CpuRing& ring : rings_) {
    for (auto& [index, fd] : ring.counters) {
      if (fd.valid()) ::ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);
    }
    for (auto& [kind, fd] : ring.tracepoints) {
      if (fd.valid()) ::ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);
    }
  }
  profiling_ = false;
  accumulated_ns_ += MonotonicNs() - started_ns_;
  // What the counters wrote before they stopped belongs to this run: drain it now, so that
  // the engine's final notification covers it.
  if (on_stop_) on_stop_();
}

uint64_t PerfPmuDriver::profiling_ns() const {
  return accumulated_ns_ + (profiling_ ? MonotonicNs() - started_ns_ : 0);
}

int PerfPmuDriver::CounterOfId(uint64_t id) const {
  for (const IdEntry& entry : ids_) {
    if (entry.id == id) return entry.counter;
  }
  return kTrackerId;
}

uint64_t PerfPmuDriver::IdOf(uint32_t cpu, uint32_t counter) const {
  for (const IdEntry& entry : ids_) {
    if (entry.cpu == cpu && entry.counter == static_cast<int>(counter)) return entry.id;
  }
  return 0;
}

uint64_t PerfPmuDriver::TracepointIdOf(uint32_t cpu, SchedTracepoint kind) const {
  for (const IdEntry& entry : ids_) {
    if (entry.cpu == cpu && entry.counter == TracepointCounter(kind)) return entry.id;
  }
  return 0;
}

uint64_t PerfPmuDriver::EnginePeriod(uint32_t counter, uint64_t perf_period) const {
  if (counter >= counters_.size()) return perf_period;
  const Counter& info = counters_[counter];
  if (options_.source == EventSource::kHardware || info.config.event == kCpuClockNsEvent) {
    return perf_period;
  }
  if (perf_period == info.period) return info.config.count;  // the usual case, exactly
  return static_cast<uint64_t>(std::llround(static_cast<double>(perf_period) * options_.mhz / 1000.0));
}

std::optional<PerfPmuDriver::TimeReading> PerfPmuDriver::ReadTimes(uint32_t cpu,
                                                                   uint32_t counter) const {
  for (const CpuRing& ring : rings_) {
    if (ring.cpu != cpu) continue;
    for (const auto& [index, fd] : ring.counters) {
      if (index != counter || !fd.valid()) continue;
      uint64_t values[3] = {};  // value, time_enabled, time_running
      if (::read(fd.get(), values, sizeof values) != static_cast<ssize_t>(sizeof values)) {
        return std::nullopt;
      }
      return TimeReading{values[1], values[2]};
    }
  }
  return std::nullopt;
}

}  // namespace hvprof::linux_host
