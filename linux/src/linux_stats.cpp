// What the linux platform says of its sampling (PlatformStats), and its notes.
#include "machine_parts.h"

namespace hvprof::linux_host {

namespace {

// The kernel unthrottles at the next timer tick: 10 ms at HZ=100, sooner at higher HZ. A
// throttle that lasted longer spanned an idle stretch without ticks (NOHZ).
constexpr uint64_t kLongestTickNs = 10'000'000;

}  // namespace

void LinuxMachine::OnThrottle(uint32_t cpu, const PerfThrottle& record) {
  CpuRateStats& stats = StatsOf(cpu);
  ++(record.throttle ? stats.throttles : stats.unthrottles);
  const int counter = driver_->CounterOfId(record.id);
  if (counter < 0 || record.time == 0) return;
  uint64_t& since = stats.throttled_since[counter];
  if (record.throttle) {
    if (since == 0) since = record.time;
    return;
  }
  if (since == 0 || record.time < since) return;  // an UNTHROTTLE without its THROTTLE
  const uint64_t ns = record.time - since;
  since = 0;
  if (ns > kLongestTickNs) {
    // No tick came to unthrottle it: the CPU idled without one (NOHZ), and what was not taken
    // is idle time, not lost work.
    stats.idle_throttled_ns += ns;
    return;
  }
  stats.throttled_ns[counter] += ns;
}

double LinuxMachine::ThrottledSamples(const CpuRateStats& stats, uint64_t now_ns) const {
  double samples = 0;
  const auto& counters = driver_->counters();
  for (uint32_t i = 0; i < counters.size() && i < kMaxCounters; ++i) {
    uint64_t ns = stats.throttled_ns[i];
    if (stats.throttled_since[i] != 0 && now_ns > stats.throttled_since[i] &&
        now_ns - stats.throttled_since[i] <= kLongestTickNs) {
      ns += now_ns - stats.throttled_since[i];
    }
    samples += static_cast<double>(ns) * counters[i].requested_hz / 1e9;
  }
  return samples;
}


context::PlatformStats LinuxMachine::Stats() const {
  const HostPaths& paths = options_.paths;
  const double seconds = static_cast<double>(driver_->profiling_ns()) / 1e9;
  const auto& counters = driver_->counters();
  const bool software = driver_->source() == EventSource::kSoftware;
  context::PlatformStats out;
  out.platform = "linux";
  out.source = software ? "cpu-clock" : "hardware";
  out.cpu_type = driver_->cpu_type();
  out.nominal_mhz = frequency_.mhz;
  out.mhz_source = frequency_.source;
  out.max_sample_rate = ReadSysctl(paths, "kernel/perf_event_max_sample_rate").value_or(-1);
  out.max_sample_rate_at_setup = max_sample_rate_at_setup_;
  out.cpu_time_max_percent = ReadSysctl(paths, "kernel/perf_cpu_time_max_percent").value_or(-1);
  out.profiling_ns = driver_->profiling_ns();
  for (uint32_t i = 0; i < counters.size(); ++i) {
    const auto& counter = counters[i];
    if (!counter.enabled) continue;
    out.counters.push_back({.counter = i,
                            .event = counter.config.event,
                            .unit_mask = counter.config.unit_mask,
                            .count = counter.config.count,
                            .perf_event = software ? "cpu-clock" : "raw",
                            .perf_config = fmt::format("{:#x}", counter.config_bits),
                            .period = counter.period,
                            .period_unit = software ? "ns" : "events",
                            .requested_hz_per_cpu = counter.requested_hz});
  }
  double throttled = 0;
  for (uint32_t cpu : online_) {
    const CpuRateStats& stats = cpu_stats_[cpu];
    context::CpuRate& entry = out.cpus.emplace_back();
    entry.cpu = cpu;
    for (uint32_t i = 0; i < counters.size(); ++i) {
      if (!counters[i].enabled) continue;
      entry.samples += stats.samples[i];
      entry.requested_hz += counters[i].requested_hz;
      context::CpuCounterRate& c = entry.counters.emplace_back();
      c.counter = i;
      c.samples = stats.samples[i];
      c.requested_hz = counters[i].requested_hz;
      c.achieved_hz = seconds > 0 ? static_cast<double>(stats.samples[i]) / seconds : 0.0;
      if (auto times = driver_->ReadTimes(cpu, i)) {
        c.time_enabled_ns = times->enabled_ns;
        c.time_running_ns = times->running_ns;
      }
    }
    entry.achieved_hz = seconds > 0 ? static_cast<double>(entry.samples) / seconds : 0.0;
    entry.throttles = stats.throttles;
    entry.unthrottles = stats.unthrottles;
    entry.lost_records = stats.lost_records;
    entry.lost = stats.lost;
    entry.lost_samples = stats.lost_samples;
    const double not_taken = ThrottledSamples(stats, last_time_);
    for (uint64_t ns : stats.throttled_ns) entry.throttled_ns += ns;
    entry.idle_throttled_ns = stats.idle_throttled_ns;
    entry.throttled = static_cast<uint64_t>(std::llround(not_taken));
    throttled += not_taken;
    out.totals.samples += entry.samples;
    out.totals.throttles += stats.throttles;
    out.totals.lost += stats.lost;
    out.totals.lost_samples += stats.lost_samples;
  }
  out.totals.throttled = static_cast<uint64_t>(std::llround(throttled));
  out.totals.unknown_sample_ids = unknown_ids_;
  out.totals.samples_without_engine = samples_without_engine_;
  out.totals.sched_samples = sched_samples_;
  out.totals.sched_undecodable = sched_undecodable_;
  out.totals.malformed_records = parse_malformed_;
  out.totals.unknown_records = parse_unknown_;
  out.totals.corrupt_ring_reads = ring_corrupt_;
  const RouterStats& routed = router_->stats();
  out.routing = {.host_user = routed.host_user,
                 .host_kernel = routed.host_kernel,
                 .idle = routed.idle,
                 .guest_kernel = routed.guest_kernel,
                 .guest_user = routed.guest_user,
                 .unmapped_guest = routed.unmapped_guest};
  const ProcessTableStats table = processes_->stats();
  out.processes = {.entries = table.processes,
                   .mappings = table.mappings,
                   .discovered_in_samples = table.proc_discoveries,
                   .unreadable_images = table.elf_failures,
                   .context_events = table.context_events,
                   .context_dropped = table.context_dropped};
  out.throttled = out.totals.throttles > 0;
  out.notes = notes();
  return out;
}

std::vector<std::string> LinuxMachine::notes() const {
  std::vector<std::string> notes = notes_;
  const HostPaths& paths = options_.paths;
  const auto& counters = driver_->counters();
  double requested = 0;
  for (const auto& counter : counters) {
    if (counter.enabled) requested += counter.requested_hz;
  }
  const int64_t max_rate = ReadSysctl(paths, "kernel/perf_event_max_sample_rate").value_or(-1);
  if (max_sample_rate_at_setup_ > 0 && requested > static_cast<double>(max_sample_rate_at_setup_)) {
    notes.push_back(fmt::format("{:.0f} samples per second per CPU were asked for, above "
                                "kernel.perf_event_max_sample_rate={}: the kernel throttles",
                                requested, max_sample_rate_at_setup_));
  }
  const double seconds = static_cast<double>(driver_->profiling_ns()) / 1e9;
  std::vector<std::string> throttled;
  uint64_t lost = 0, lost_records = 0;
  double not_taken = 0, held = 0;
  for (uint32_t cpu : online_) {
    const CpuRateStats& stats = cpu_stats_[cpu];
    lost += stats.lost + stats.lost_samples;
    lost_records += stats.lost_records;
    if (stats.throttles == 0) continue;
    uint64_t samples = 0;
    for (uint32_t i = 0; i < counters.size(); ++i) samples += stats.samples[i];
    const double achieved = seconds > 0 ? static_cast<double>(samples) / seconds : 0.0;
    held += achieved;
    not_taken += ThrottledSamples(stats, last_time_);
    throttled.push_back(fmt::format("CPU {} {} times, {:.0f} Hz", cpu, stats.throttles, achieved));
  }
  const std::string cost =
      not_taken >= 0.5
          ? fmt::format("; the {:.0f} samples it did not take are counted as lost (throttled)", not_taken)
          : std::string();
  // cpu-clock without throttling falls short when timer interrupts come late: hrtimers skip
  // the periods they missed, typically on an idle virtual CPU whose host lets it sleep.
  std::vector<std::string> late;
  if (driver_->source() == EventSource::kSoftware && seconds >= 0.2 && requested > 0) {
    for (uint32_t cpu : online_) {
      const CpuRateStats& stats = cpu_stats_[cpu];
      uint64_t samples = 0;
      for (uint32_t i = 0; i < counters.size(); ++i) samples += stats.samples[i];
      const double achieved = static_cast<double>(samples) / seconds;
      if (stats.throttles == 0 && achieved < 0.8 * requested) {
        late.push_back(fmt::format("CPU {} ({:.0f} of {:.0f} Hz)", cpu, achieved, requested));
      }
    }
  }
  if (!late.empty()) {
    notes.push_back(fmt::format(
        "the cpu-clock timer fired less often than asked, without throttling, on {}: its "
        "interrupts came late (an idle virtual CPU the host let sleep), so that time is "
        "under-sampled",
        fmt::join(late, ", ")));
  }
  if (!throttled.empty() && max_rate > 0 && requested <= static_cast<double>(max_rate)) {
    notes.push_back(fmt::format(
        "the kernel throttled sampling below kernel.perf_event_max_sample_rate={} ({} of {:.0f} Hz "
        "asked){}: this happens on a CPU that idles without a timer tick (NOHZ), where perf counts "
        "interrupts across the missing ticks; what is lost is mostly idle time",
        max_rate, fmt::join(throttled, ", "), requested, cost));
  } else if (!throttled.empty()) {
    notes.push_back(fmt::format(
        "the kernel throttled sampling to kernel.perf_event_max_sample_rate={}: it held {:.0f} of the "
        "{:.0f} samples per second per CPU asked ({}){}; ask for fewer (-F {}, or a larger count) "
        "or raise the limit with sysctl kernel.perf_event_max_sample_rate",
        max_rate, held / static_cast<double>(throttled.size()), requested, fmt::join(throttled, ", "),
        cost, max_rate > 0 ? max_rate : 1000));
  }
  if (max_sample_rate_at_setup_ > 0 && max_rate > 0 && max_rate < max_sample_rate_at_setup_) {
    notes.push_back(fmt::format(
        "the kernel lowered kernel.perf_event_max_sample_rate from {} to {} during the run: perf's "
        "interrupts took more than kernel.perf_cpu_time_max_percent={}% of the CPU",
        max_sample_rate_at_setup_, max_rate,
        ReadSysctl(paths, "kernel/perf_cpu_time_max_percent").value_or(-1)));
  }
  if (lost != 0 || lost_records != 0) {
    notes.push_back(fmt::format("perf lost {} records in {} overflows of its {} KiB rings: they were "
                                "drained too late; use larger rings or drain more often",
                                lost, lost_records,
                                uint64_t{options_.ring_pages} * static_cast<uint64_t>(::getpagesize()) / 1024));
  }
  if (router_->stats().unmapped_guest != 0) {
    notes.push_back(fmt::format("{} KVM guest samples came from VMM processes without a domain "
                                "(map them with kvm:PID=ID); they are counted as unprofiled",
                                router_->stats().unmapped_guest));
  }
  return notes;
}

}  // namespace hvprof::linux_host
