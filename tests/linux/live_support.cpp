#include "live_support.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <optional>
#include <thread>

#include <catch2/catch.hpp>

#include "hvprof/linux/tracepoints.h"
#include "skip.h"

namespace hvprof::testing {

using namespace hvpmu;
using hvprof::linux_host::LinuxMachine;
using hvprof::linux_host::LinuxOptions;

namespace {

void Must(ErrorCode code, const char* what) {
  INFO(what);
  REQUIRE(std::string(ErrorName(code)) == "Ok");
}

BufferV2 BufferRequest(DomainId domain, uint32_t capacity) {
  BufferV2 buffer{};
  buffer.struct_size = sizeof buffer;
  buffer.abi_version = kAbiVersion;
  buffer.domain = domain;
  buffer.capacity = capacity;
  return buffer;
}

}  // namespace

EngineSession::EngineSession(LinuxMachine& machine, SessionOptions options) : machine_(machine) {
  engine_ = std::make_unique<Engine>(machine.platform(), machine.driver());
  machine.AttachEngine(engine_.get());
  Engine& e = *engine_;
  legacy::Init init{};
  Must(e.DoOp(0, legacy::kOpInit, &init, sizeof init), "init");
  BufferV2 own = BufferRequest(0, options.capacity);
  if (options.sched) own.flags = kBufferSchedRings;
  Must(e.DoOp(0, kOpGetBufferV2, &own, sizeof own), "get_buffer_v2");
  if (options.sched) REQUIRE(own.nbuf_sched != 0);
  MapRegion(0, own);
  Must(e.DoOp(0, legacy::kOpResetActiveList, nullptr, 0), "reset_active_list");
  legacy::DomainIdArg dom0 = 0;
  Must(e.DoOp(0, legacy::kOpSetActive, &dom0, sizeof dom0), "set_active");
  for (DomainId id : options.passive) {
    BufferV2 buffer = BufferRequest(id, options.capacity);
    Must(e.DoOp(0, kOpSetPassiveV2, &buffer, sizeof buffer), "set_passive_v2");
    MapRegion(id, buffer);
  }
  legacy::BacktraceDepthArg depth = options.backtrace_depth;
  Must(e.DoOp(0, legacy::kOpSetBacktrace, &depth, sizeof depth), "set_backtrace");
  Must(e.DoOp(0, legacy::kOpReserveCounters, nullptr, 0), "reserve_counters");
  legacy::Counter counter{};
  counter.ind = 0;
  counter.count = options.count;
  counter.enabled = 1;
  counter.event = options.event;
  counter.kernel = 1;
  counter.user = 1;
  Must(e.DoOp(0, legacy::kOpCounter, &counter, sizeof counter), "counter");
  {
    const ErrorCode setup = e.DoOp(0, legacy::kOpSetupEvents, nullptr, 0);
    INFO(machine.last_error());
    Must(setup, "setup_events");
  }
  Must(e.DoOp(0, legacy::kOpEnableVirq, nullptr, 0), "enable_virq");
}

EngineSession::~EngineSession() {
  if (started_) engine_->DoOp(0, legacy::kOpStop, nullptr, 0);
  engine_->DoOp(0, legacy::kOpReleaseCounters, nullptr, 0);
  machine_.AttachEngine(nullptr);
}

void EngineSession::MapRegion(DomainId owner, const BufferV2& buffer) {
  auto region = std::make_unique<Region>();
  region->owner = owner;
  region->buffer = buffer;
  uint64_t bytes = 0;
  auto fd = machine_.platform().RegionFd(buffer.region_handle, 0, &bytes);
  REQUIRE(fd.has_value());
  auto map = hvprof::ScopedMmap::MapShared(fd.value(), bytes, PROT_READ | PROT_WRITE);
  REQUIRE(map.has_value());
  region->map = std::move(map).value();
  auto* base = static_cast<uint8_t*>(region->map.data());
  for (uint32_t i = 0; i < buffer.nbuf; ++i) {
    auto reader = agent::RingReader::Attach(base + i * buffer.ring_bytes, buffer.ring_bytes,
                                            buffer.capacity);
    REQUIRE(reader.has_value());
    region->readers.push_back(std::move(reader).value());
  }
  regions_.push_back(std::move(region));
}

void EngineSession::Start() {
  Must(engine_->DoOp(0, legacy::kOpStart, nullptr, 0), "start");
  started_ = true;
}

void EngineSession::Stop() {
  Must(engine_->DoOp(0, legacy::kOpStop, nullptr, 0), "stop");
  started_ = false;
  DrainRings();
}

void EngineSession::DrainRings() {
  for (auto& region : regions_) {
    for (uint32_t i = 0; i < region->readers.size(); ++i) {
      const agent::DrainStats stats = region->readers[i].DrainRecords(
          [&](const ring::SampleRecord& record, std::span<const uint64_t> frames) {
            samples_.push_back({region->owner, i, record, {frames.begin(), frames.end()}});
          },
          [&](const ring::SchedRecord& record) { sched_.push_back(record); });
      CHECK(stats.malformed == 0);
    }
  }
}

void EngineSession::Pump(std::chrono::milliseconds duration, const std::function<bool()>& done) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
    auto ready = machine_.WaitForSamples(std::chrono::milliseconds(20));
    REQUIRE(ready.has_value());
    machine_.DrainSamples();
    DrainRings();
    if (done && done()) break;
  }
}

Status EngineSession::Status() {
  auto status = std::make_unique<hvpmu::Status>();
  std::memset(status.get(), 0, sizeof *status);
  status->struct_size = sizeof(hvpmu::Status);
  status->abi_version = kAbiVersion;
  Must(engine_->DoOp(0, kOpStatus, status.get(), sizeof *status), "status");
  return *status;
}

std::optional<std::string> PerfUnusable() {
  // The cpu-clock software event, system-wide on CPU 0, opened directly: what every live test
  // needs, asked of the kernel without hvprof's code in between.
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.sample_period = 1000000;
  attr.disabled = 1;
  const long fd = ::syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd >= 0) {
    ::close(static_cast<int>(fd));
    return std::nullopt;
  }
  const int error = errno;
  switch (error) {
    case ENOSYS:
      return std::string("perf_event_open is not available here (ENOSYS: a kernel without perf events, "
                         "or a seccomp filter)");
    case EACCES:
    case EPERM:
      return std::string("system-wide perf events are not allowed here (") + std::strerror(error) +
             "; needs root or kernel.perf_event_paranoid <= 0)";
    default:
      return std::nullopt;  // anything else is for the code under test to report, and fail on
  }
}

std::optional<std::string> KvmUnusable() {
  const int kvm = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (kvm < 0) return std::string("no usable /dev/kvm (") + std::strerror(errno) + ")";
  const int vm = ::ioctl(kvm, KVM_CREATE_VM, 0);
  const int error = errno;
  ::close(kvm);
  if (vm < 0) return std::string("KVM cannot create a guest here (KVM_CREATE_VM: ") + std::strerror(error) + ")";
  ::close(vm);
  return std::nullopt;
}

double CpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool PerfUsable() {
  if (auto why = PerfUnusable()) return !SkipTest(*why);
  return true;
}

std::unique_ptr<LinuxMachine> LiveMachine(LinuxOptions options) {
  auto machine = LinuxMachine::Create(options);
  INFO("perf_event_open works here (PerfUnusable() said so), so the machine must be created");
  if (!machine) FAIL(machine.error().message());
  return std::move(machine).value();
}

Child::Child(const std::vector<std::string>& args, bool hold) {
  int in[2] = {-1, -1}, out[2] = {-1, -1};
  if (hold) REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    if (hold) ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (hold) {
    ::close(in[0]);
    stdin_ = hvprof::ScopedFd(in[1]);
  }
  ::close(out[1]);
  stdout_ = hvprof::ScopedFd(out[0]);
  ::fcntl(stdout_.get(), F_SETFL, O_NONBLOCK);
}

Child::~Child() {
  if (pid_ > 0 && status_ == -1) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void Child::Go() {
  const char byte = 'g';
  REQUIRE(::write(stdin_.get(), &byte, 1) == 1);
  stdin_.Reset();
}

bool Child::Exited() {
  if (status_ != -1) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    status_ = status;
    return true;
  }
  return false;
}

int Child::Wait() {
  if (status_ == -1) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    status_ = status;
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

void Child::Stop() {
  if (status_ == -1) ::kill(pid_, SIGTERM);
  Wait();
}

std::string Child::Output() {
  char buffer[256];
  ssize_t n;
  while ((n = ::read(stdout_.get(), buffer, sizeof buffer)) > 0) output_.append(buffer, static_cast<size_t>(n));
  return output_;
}

void KvmGuestRunning(Child& guest) {
  // The fixture waits up to 60 s for its guest's first instructions, however busy the host.
  while (guest.Output().find("running") == std::string::npos && !guest.Exited()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (guest.Output().find("running") != std::string::npos) return;
  INFO("KVM works here (KvmUnusable() said so); the fixture's status tells why its guest did not run "
       "(3: the vCPU failed or ran no guest code in 60 s; its stderr is the test's)");
  FAIL("the KVM fixture exited with status " << guest.Wait() << " before its guest ran");
}

DomainId GuestDomainOf(LinuxMachine& machine, pid_t vmm) {
  DomainId domain = kDomainInvalid;
  for (const linux_host::DomainDesc& desc : machine.domains().domains()) {
    if (desc.guest && desc.vmm_pid == static_cast<uint32_t>(vmm)) domain = desc.id;
  }
  REQUIRE(domain != kDomainInvalid);
  return domain;
}

std::optional<std::string> TracepointsUnusable() {
  auto points = linux_host::SchedTracepoints::Read({});
  if (points) return std::nullopt;
  const auto kind = points.error().kind();
  if (kind == ErrorKind::kUnsupported || kind == ErrorKind::kPermissionDenied) return points.error().message();
  return std::nullopt;
}

}  // namespace hvprof::testing
