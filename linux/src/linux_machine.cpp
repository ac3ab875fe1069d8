// The machine: its domains, perf set up on every CPU, the drain thread's wait and wake.
#include "machine_parts.h"

namespace hvprof::linux_host {

namespace {

constexpr uint32_t kWakeToken = std::numeric_limits<uint32_t>::max();  // beyond any CPU's

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


bool LinuxMachine::SettleImages(std::chrono::milliseconds timeout) { return processes_->SettleImages(timeout); }

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

}  // namespace hvprof::linux_host
