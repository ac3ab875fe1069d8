#include "hvprof/linux/linux_machine.h"

#include <limits>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>

#include <dirent.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/probes.h"
#include "hvpmu/pmu_drivers.h"

HVPROF_PROBE_SEMAPHORE(perf__throttle);
HVPROF_PROBE_SEMAPHORE(perf__lost);

namespace hvprof::linux_host {

using hvpmu::CpuidResult;
using hvpmu::DomainId;
using hvpmu::DomainInfo;
using hvpmu::DomainType;
using hvpmu::PmuDriver;
using hvpmu::PmuDrivers;
using hvpmu::kDomainInvalid;
using hvpmu::kMaxCpus;
using hvpmu::kMaxVcpus;
namespace ring = hvpmu::ring;

using hvprof::ErrorKind;
using hvprof::MakeError;
using Json = nlohmann::json;

namespace {

constexpr uint32_t kWakeToken = std::numeric_limits<uint32_t>::max();  // beyond any CPU's
constexpr uint64_t kPruneAfterNs = 2'000'000'000;
// The kernel unthrottles at the next timer tick: 10 ms at HZ=100, sooner at higher HZ. A
// throttle that lasted longer spanned an idle stretch without ticks (NOHZ).
constexpr uint64_t kLongestTickNs = 10'000'000;

uint16_t CountVcpuThreads(const HostPaths& paths, uint32_t pid) {
  const std::string dir_path = fmt::format("{}/{}/task", paths.proc, pid);
  DIR* dir = ::opendir(dir_path.c_str());
  if (dir == nullptr) return 0;
  int32_t highest = -1;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    auto comm = hvprof::ReadFileToString(dir_path + "/" + entry->d_name + "/comm");
    if (comm) highest = std::max(highest, ProcessTable::ParseVcpuName(comm.value()));
  }
  ::closedir(dir);
  return static_cast<uint16_t>(highest + 1);
}

bool CgroupExists(const HostPaths& paths, const std::string& cgroup) {
  struct stat st {};
  const std::string root = paths.sys + "/fs/cgroup";
  if (::stat((root + cgroup).c_str(), &st) == 0) return true;
  DIR* dir = ::opendir(root.c_str());  // cgroup v1: one directory per hierarchy
  if (dir == nullptr) return false;
  bool found = false;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    if (::stat((root + "/" + entry->d_name + cgroup).c_str(), &st) == 0) found = true;
  }
  ::closedir(dir);
  return found;
}

}  // namespace

// ---- the platform

CpuidResult LinuxPlatform::Cpuid(uint32_t, uint32_t leaf, uint32_t subleaf) {
  CpuidResult result{};
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid_count(leaf, subleaf, eax, ebx, ecx, edx);
  result = {eax, ebx, ecx, edx};
#else
  (void)leaf;
  (void)subleaf;
#endif
  return result;
}

uint64_t LinuxPlatform::NowNs() { return in_sample_ ? sample_time_ : MonotonicNs(); }

bool LinuxPlatform::GetDomainInfo(DomainId domain, DomainInfo* info) {
  const DomainDesc* desc = domains_.Find(domain);
  if (desc == nullptr) return false;
  info->num_vcpus = static_cast<uint16_t>(
      std::clamp<uint32_t>(desc->vcpus, 1, kMaxVcpus));
  info->type = desc->guest ? DomainType::kHvm : DomainType::kPv64;
  info->is_hardware_domain = domain == 0;
  return true;
}

void LinuxPlatform::BeginSample(uint64_t time_ns, std::span<const uint64_t> frames) {
  in_sample_ = true;
  sample_time_ = time_ns;
  frames_ = frames;
}

void LinuxPlatform::EndSample() {
  in_sample_ = false;
  frames_ = {};
}

bool LinuxPlatform::ReadGuestMemory(DomainId, uint16_t, uint64_t address, void* buffer,
                                    uint32_t bytes) {
  if (!in_sample_ || bytes != 16 || address < kFrameBase || (address - kFrameBase) % 16 != 0) {
    return false;
  }
  const uint64_t index = (address - kFrameBase) / 16;
  if (index >= frames_.size()) return false;
  const uint64_t words[2] = {index + 1 < frames_.size() ? address + 16 : 0, frames_[index]};
  std::memcpy(buffer, words, sizeof words);
  return true;
}

// ---- the machine

LinuxMachine::LinuxMachine(const LinuxOptions& options) : options_(options) {}

LinuxMachine::~LinuxMachine() {
  // The perf events go first: they are registered in epoll_ and call back into this machine.
  if (driver_) {
    driver_->set_on_stop({});
    driver_->set_on_setup({});
  }
  driver_.reset();
}

PmuDriver* LinuxMachine::driver() { return driver_.get(); }

uint64_t LinuxMachine::now_ns() const { return MonotonicNs(); }

hvprof::Result<std::unique_ptr<LinuxMachine>> LinuxMachine::Create(const LinuxOptions& options) {
  if (options.ring_pages == 0 || (options.ring_pages & (options.ring_pages - 1)) != 0 ||
      options.ring_pages > (1u << 16)) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "perf ring of {} pages: give a power of two from 1 to 65536",
                     options.ring_pages);
  }
  if (options.callchain_depth > ring::kMaxBacktraceDepth) {
    return MakeError(ErrorKind::kInvalidArgument, "callchain depth {} is above the maximum of {}",
                     options.callchain_depth, ring::kMaxBacktraceDepth);
  }
  std::unique_ptr<LinuxMachine> machine(new LinuxMachine(options));
  HVPROF_TRYV(machine->Init());
  return machine;
}

// Domains: the map's, checked against the running system, then running VMMs (KVM guests), each
// named and given its vCPUs.
hvprof::Result<void> LinuxMachine::InitDomains(uint16_t host_vcpus) {
  const HostPaths& paths = options_.paths;
  for (const DomainMapEntry& entry : options_.domain_map.entries) {
    struct stat st {};
    if (entry.kind != DomainMapEntry::Kind::kCgroup &&
        ::stat(fmt::format("{}/{}", paths.proc, entry.pid).c_str(), &st) != 0) {
      return MakeError(ErrorKind::kNotFound,
                       "--domain-map: '{}': no process {} is running; a {} entry names a running "
                       "process (start it first, or map its cgroup)",
                       entry.text, entry.pid,
                       entry.kind == DomainMapEntry::Kind::kPid ? "pid:" : "kvm:");
    }
    if (entry.kind == DomainMapEntry::Kind::kCgroup && !CgroupExists(paths, entry.cgroup)) {
      notes_.push_back(fmt::format("--domain-map: cgroup {} does not exist (yet); processes are "
                                   "matched when first seen",
                                   entry.cgroup));
    }
  }
  domains_ = std::make_unique<DomainRegistry>(options_.domain_map, host_vcpus,
                                              options_.auto_kvm_domains);
  processes_ = std::make_unique<ProcessTable>(
      *domains_, ProcessTable::Options{paths.proc, options_.read_elf});
  std::set<uint32_t> vmms;
  for (const DomainMapEntry& entry : options_.domain_map.entries) {
    if (entry.kind == DomainMapEntry::Kind::kKvm) vmms.insert(entry.pid);
  }
  for (uint32_t pid : processes_->FindVmmProcesses()) {
    if (vmms.count(pid) != 0) continue;
    vmms.insert(pid);
    const DomainId id = domains_->GuestDomainFor(pid, true);
    if (id == kDomainInvalid) {
      notes_.push_back(fmt::format("KVM guest of process {} has no domain (map it with kvm:{}=ID); "
                                   "its samples are counted as unprofiled",
                                   pid, pid));
      continue;
    }
    auto comm = hvprof::ReadFileToString(fmt::format("{}/{}/comm", paths.proc, pid));
    std::string name = comm ? comm.value() : std::string();
    while (!name.empty() && name.back() == '\n') name.pop_back();
    domains_->NameGuest(id, name);
    notes_.push_back(fmt::format("KVM guest of process {} ({}) is domain {}", pid, name, id));
  }
  for (uint32_t pid : vmms) {
    const DomainId id = domains_->GuestDomainFor(pid, false);
    const uint16_t vcpus = CountVcpuThreads(paths, pid);
    if (id != kDomainInvalid && vcpus != 0) domains_->NoteGuestVcpus(id, vcpus);
  }
  return hvprof::Ok();
}

hvprof::Result<void> LinuxMachine::Init() {
  const HostPaths& paths = options_.paths;
  host_kernel_ = options_.kernel_image.empty() ? std::string("/proc/kallsyms") : options_.kernel_image;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) machine_name_ = host;

  for (uint32_t cpu : OnlineCpus(paths)) {
    if (cpu < kMaxCpus) online_.push_back(cpu);
  }
  if (online_.empty()) return MakeError(ErrorKind::kUnsupported, "no online CPU found");
  num_cpus_ = std::min(PossibleCpus(paths), kMaxCpus);
  if (online_.size() != OnlineCpus(paths).size()) {
    notes_.push_back(fmt::format("only the first {} CPUs are sampled (the engine's limit)", kMaxCpus));
  }

  frequency_ = options_.mhz > 0 ? CpuFrequency{options_.mhz, "given"} : NominalFrequency(paths);
  if (!options_.dry_run) {
    HVPROF_TRY(probe, ProbePerf(static_cast<int>(online_.front()), options_.force_software, paths));
    probe_ = probe;
  } else {
    probe_.reason = "dry run: no perf events are opened";
  }

  // Domains: the map's, checked against the running system, then running VMMs.
  const uint16_t host_vcpus = static_cast<uint16_t>(std::min(num_cpus_, kMaxVcpus));
  HVPROF_TRYV(InitDomains(host_vcpus));

  platform_ = std::make_unique<LinuxPlatform>(num_cpus_, *domains_);
  PmuDriver* hardware = nullptr;
  if (probe_.source == EventSource::kHardware) {
    hardware_drivers_ = std::make_unique<PmuDrivers>(*platform_);
    hardware = hardware_drivers_->Detect();
    if (hardware == nullptr) {
      probe_.source = EventSource::kSoftware;
      probe_.reason = "the hardware PMU counts cycles, but hvprof has no event table for this "
                      "CPU: sampling with the cpu-clock software timer";
    }
  }

  epoll_ = hvprof::ScopedFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return hvprof::ErrnoError(errno, "epoll_create1");
  wake_ = hvprof::ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return hvprof::ErrnoError(errno, "eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u32 = kWakeToken;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &event) != 0) {
    return hvprof::ErrnoError(errno, "epoll_ctl");
  }

  PerfDriverOptions driver_options;
  driver_options.source = probe_.source;
  driver_options.mhz = frequency_.mhz;
  driver_options.ring_pages = options_.ring_pages;
  driver_options.callchain_depth = options_.callchain_depth;
  driver_options.cpus = online_;
  driver_options.paths = paths;
  driver_options.dry_run = options_.dry_run;
  driver_ = std::make_unique<PerfPmuDriver>(driver_options, hardware, epoll_.get());
  driver_->set_on_stop([this] { DrainSamples(); });
  driver_->set_on_setup([this] { OnSetup(); });
  driver_->set_sched_wanted([this] { return engine_ != nullptr && engine_->sched_rings() != 0; });
  router_ = std::make_unique<SampleRouter>(*processes_, *domains_, host_vcpus);
  cpu_stats_.resize(num_cpus_);
  for (uint32_t cpu = 0; cpu < num_cpus_; ++cpu) cpu_stats_[cpu].cpu = cpu;

  notes_.insert(notes_.begin(), probe_.reason);
  if (driver_->source() == EventSource::kSoftware) {
    notes_.push_back(fmt::format(
        "cycles are timed: a CPU_CLK_UNHALTED count of N cycles is a cpu-clock period of "
        "N / {:.1f} us (nominal {:.1f} MHz, from {}); CPU_CLOCK counts are in ns",
        frequency_.mhz, frequency_.mhz, frequency_.source));
  }
  if (auto rate = ReadSysctl(paths, "kernel/perf_event_max_sample_rate")) {
    notes_.push_back(fmt::format("the kernel allows at most {} samples per second per CPU "
                                 "(kernel.perf_event_max_sample_rate)",
                                 *rate));
  }
  return hvprof::Ok();
}

void LinuxMachine::OnSetup() {
  last_id_known_ = false;  // new events (a dry run numbers them afresh)
  for (CpuRateStats& stats : cpu_stats_) {
    CpuRateStats fresh;
    fresh.cpu = stats.cpu;
    stats = fresh;
  }
  max_sample_rate_at_setup_ =
      ReadSysctl(options_.paths, "kernel/perf_event_max_sample_rate").value_or(-1);
  // The trackers follow every fork, exec and mmap from here on; /proc tells what came before.
  if (options_.scan_proc) processes_->ScanProc();
}

hvprof::Result<bool> LinuxMachine::WaitForSamples(std::chrono::milliseconds timeout) {
  epoll_event events[16];
  const int n = ::epoll_wait(epoll_.get(), events, 16,
                             static_cast<int>(std::clamp<int64_t>(timeout.count(), 0, 60000)));
  if (n < 0) {
    if (errno == EINTR) return false;
    return hvprof::ErrnoError(errno, "epoll_wait on the perf rings");
  }
  bool ready = false;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u32 == kWakeToken) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t got = ::read(wake_.get(), &count, sizeof count);
    } else {
      ready = true;
    }
  }
  return ready;
}

void LinuxMachine::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

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

bool LinuxMachine::SettleImages(std::chrono::milliseconds timeout) {
  const bool settled = processes_->WaitForImages(timeout);
  processes_->TakeImages();
  return settled;
}

context::DomainImages LinuxMachine::Images(DomainId domain) const {
  context::DomainImages images;
  const DomainDesc* desc = domains_->Find(domain);
  // The host kernel runs every host domain's processes; guests' kernels are unknown here.
  if (desc != nullptr && !desc->guest) images.kernel = host_kernel_;
  if (domain == 0) images.hypervisor = host_kernel_;
  return images;
}

std::vector<context::DomainInfo> LinuxMachine::Domains() const {
  std::vector<context::DomainInfo> list;
  for (const DomainDesc& desc : domains_->domains()) {
    list.push_back({.id = desc.id,
                    .name = desc.name,
                    .type = desc.guest ? "hvm" : "host",
                    .vcpus = static_cast<uint16_t>(std::clamp<uint32_t>(desc.vcpus, 1, kMaxVcpus)),
                    .kernel = desc.guest ? std::string() : host_kernel_});
  }
  return list;
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
