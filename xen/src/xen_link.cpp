#include "hvprof/xen/xen_link.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

// The Xen library headers have no extern "C" of their own.
extern "C" {
#include <xencall.h>
#include <xenevtchn.h>
#include <xenforeignmemory.h>
#include <xenstore.h>
#include <xen/version.h>
#include <xen/xen.h>
}

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/linux/task_tracker.h"
#include "trace_buffers.h"
#include "xen_handles.h"
#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/xenoprof_legacy.h"

namespace hvprof::xen {

namespace legacy = hvpmu::legacy;
using hvpmu::ErrorCode;

namespace {

constexpr uint32_t kDomidSelf = 0x7FF0;  // DOMID_SELF
constexpr uint64_t kPage = 4096;

struct CallClose {
  void operator()(xencall_handle* h) const { xencall_close(h); }
};
struct StoreClose {
  void operator()(xs_handle* h) const { xs_close(h); }
};
struct FreeWithFree {
  void operator()(void* memory) const { std::free(memory); }
};

// One xenstore value, or nothing where the node is absent or unreadable.
std::optional<std::string> StoreRead(xs_handle* store, const std::string& path) {
  if (store == nullptr) return std::nullopt;
  unsigned int length = 0;
  std::unique_ptr<void, FreeWithFree> value(xs_read(store, XBT_NULL, path.c_str(), &length));
  if (!value) return std::nullopt;
  return std::string(static_cast<const char*>(value.get()), length);
}

// The names under a xenstore directory.
std::vector<std::string> StoreList(xs_handle* store, const std::string& path) {
  std::vector<std::string> names;
  if (store == nullptr) return names;
  unsigned int count = 0;
  std::unique_ptr<char*, FreeWithFree> entries(xs_directory(store, XBT_NULL, path.c_str(), &count));
  if (!entries) return names;
  for (unsigned int i = 0; i < count; ++i) names.emplace_back(entries.get()[i]);
  return names;
}

// The hypercall buffer of one op: memory Xen may read and write, freed with the handle.
class HypercallBuffer {
 public:
  HypercallBuffer(xencall_handle* handle, size_t bytes)
      : handle_(handle), data_(bytes == 0 ? nullptr : xencall_alloc_buffer(handle, bytes)) {}
  ~HypercallBuffer() {
    if (data_ != nullptr) xencall_free_buffer(handle_, data_);
  }
  HypercallBuffer(const HypercallBuffer&) = delete;
  HypercallBuffer& operator=(const HypercallBuffer&) = delete;
  void* data() const { return data_; }

 private:
  xencall_handle* handle_;
  void* data_;
};

// The three library handles, shared with every mapping that outlives a call.
struct Handles {
  std::unique_ptr<xencall_handle, CallClose> call;
  MemoryHandle memory;
  EvtchnHandle events;
  std::unique_ptr<xs_handle, StoreClose> store;  // optional: domain names and ids
};

// VIRQ_XENOPROF, turned into an eventfd the agents poll like any other notification. Xen
// lets user space bind it on vCPU 0 only (docs/xen.md), so one descriptor stands for every
// ring; the agents' poll timer covers the rest.
class VirqForwarder {
 public:
  static Result<std::unique_ptr<VirqForwarder>> Start(std::shared_ptr<Handles> handles) {
    auto forwarder = std::unique_ptr<VirqForwarder>(new VirqForwarder(std::move(handles)));
    const xenevtchn_port_or_error_t port = xenevtchn_bind_virq(forwarder->handles_->events.get(),
                                                               legacy::kVirqXenoprof);
    if (port < 0) return ErrnoError(errno, "xenevtchn_bind_virq(VIRQ_XENOPROF)");
    forwarder->port_ = static_cast<evtchn_port_t>(port);
    forwarder->bound_ = true;
    forwarder->notify_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    forwarder->stop_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!forwarder->notify_.valid() || !forwarder->stop_.valid()) return ErrnoError(errno, "eventfd");
    forwarder->thread_ = std::thread([raw = forwarder.get()] { raw->Run(); });
    return forwarder;
  }
  ~VirqForwarder() {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(stop_.get(), &one, sizeof one);
      thread_.join();
    }
    if (bound_) xenevtchn_unbind(handles_->events.get(), port_);
  }
  Result<ScopedFd> Descriptor() const {
    const int copy = ::fcntl(notify_.get(), F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return ErrnoError(errno, "dup of the notification eventfd");
    return ScopedFd(copy);
  }

 private:
  explicit VirqForwarder(std::shared_ptr<Handles> handles) : handles_(std::move(handles)) {}
  void Run() {
    pollfd fds[2] = {{xenevtchn_fd(handles_->events.get()), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    while (true) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      if (fds[0].revents == 0) continue;
      const xenevtchn_port_or_error_t port = xenevtchn_pending(handles_->events.get());
      if (port < 0) continue;
      xenevtchn_unmask(handles_->events.get(), static_cast<evtchn_port_t>(port));
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(notify_.get(), &one, sizeof one);
    }
  }

  std::shared_ptr<Handles> handles_;
  evtchn_port_t port_ = 0;
  bool bound_ = false;
  ScopedFd notify_;
  ScopedFd stop_;
  std::thread thread_;
};

class XenLink final : public agent::HypervisorLink {
 public:
  XenLink(std::shared_ptr<Handles> handles, hvpmu::DomainId domain, std::string version, std::string root)
      : handles_(std::move(handles)), domain_(domain), version_(std::move(version)), root_(std::move(root)) {
    // Who serves hypercall 31: hvprof's engine answers its status op (any caller; nothing
    // changes); Xen 4.17's xenoprof refuses every op above 17 (EINVAL), a Xen without a
    // profiler every op (ENOSYS).
    std::unique_ptr<hvpmu::Status> status = agent::StatusRequest();
    auto answer = Op(hvpmu::kOpStatus, std::as_writable_bytes(std::span(status.get(), 1)));
    engine_ = answer && answer.value() == ErrorCode::kOk;
    // The engine's samples carry this domain's vCPU and a time, and Xen names no task: this
    // domain's kernel tells which task each vCPU ran when (linux/task_tracker.h). Xenoprof's
    // samples have no time to look up.
    if (engine_ && (status->flags & hvpmu::kStatusNamesTasks) == 0) {
      linux_host::TaskTracker::Options options;
      options.domain = domain_;
      options.paths.proc = root_ + "/proc";
      options.paths.sys = root_ + "/sys";
      auto tracker = linux_host::TaskTracker::Open(options);
      if (tracker) {
        tasks_ = std::move(tracker).value();
        status_ = std::move(status);
      } else {
        Log(LogLevel::kWarning, "this domain's tasks cannot be followed ({}): its user samples are shown by "
            "address, without their processes", tracker.error().message());
      }
    }
  }

  hvpmu::DomainId domain() const override { return domain_; }
  // Xen 4.17's xenoprof speaks ops 0-17 only; a Xen built with hvprof's engine (xen-engine/)
  // answers the v2 ops too: rings with times, CPUs and call chains, and a status op.
  bool legacy_only() const override { return !engine_; }
  // Xen knows a domain, not a process: one agent per domain (dom0: one per host).
  std::string ExclusiveLockPath() const override { return root_ + "/run/hvprof/xenoprof.lock"; }
  std::string platform_name() const override { return "xen"; }
  std::string machine_name() const override {
    return "Xen " + version_ + (engine_ ? " with hvprof's engine" : "");
  }
  uint32_t num_cpus() const override {
    const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 ? static_cast<uint32_t>(cpus) : 1;
  }

  Result<ErrorCode> Op(uint32_t op, std::span<std::byte> argument) override {
    HypercallBuffer buffer(handles_->call.get(), argument.size());
    if (!argument.empty() && buffer.data() == nullptr) return ErrnoError(errno, "xencall_alloc_buffer");
    if (!argument.empty()) std::memcpy(buffer.data(), argument.data(), argument.size());
    const int rc = xencall2(handles_->call.get(), legacy::kHypercallXenoprofOp, op,
                            reinterpret_cast<uint64_t>(buffer.data()));
    if (rc < 0) {
      const int errnum = errno;
      const std::optional<ErrorCode> code = ErrorCodeOfErrno(errnum);
      if (!code) return XenoprofRefusal(op, errnum);  // nothing an agent works around
      return *code;
    }
    if (!argument.empty()) std::memcpy(argument.data(), buffer.data(), argument.size());
    return ErrorCode::kOk;
  }

  // Every code the link returns stands for exactly one errno (ErrorCodeOfErrno).
  Error DescribeRefusal(uint32_t op, ErrorCode code) const override {
    return XenoprofRefusal(op, hvpmu::ErrorErrno(code));
  }

  // `bytes` is nbuf * bufsize from get_buffer or set_passive: Xen's frames carry no size.
  Result<agent::MappedRegion> MapRegion(uint64_t handle, uint64_t bytes) override {
    if (bytes == 0) {
      return MakeError(ErrorKind::kInvalidArgument, "mapping Xen's buffer at {:#x} needs its size", handle);
    }
    const size_t pages = static_cast<size_t>((bytes + kPage - 1) / kPage);
    std::vector<xen_pfn_t> frames(pages);
    std::vector<int> errors(pages, 0);
    for (size_t i = 0; i < pages; ++i) frames[i] = static_cast<xen_pfn_t>(handle / kPage + i);
    void* address = xenforeignmemory_map(handles_->memory.get(), kDomidSelf, PROT_READ | PROT_WRITE, pages,
                                         frames.data(), errors.data());
    if (address == nullptr) return ErrnoError(errno, fmt::format("xenforeignmemory_map of {} pages at {:#x}", pages, handle));
    for (size_t i = 0; i < pages; ++i) {
      if (errors[i] != 0) {
        xenforeignmemory_unmap(handles_->memory.get(), address, pages);
        return ErrnoError(-errors[i], fmt::format("xenforeignmemory_map: page {} of the buffer at {:#x}", i, handle));
      }
    }
    agent::MappedRegion region;
    region.data = static_cast<uint8_t*>(address);
    region.bytes = bytes;
    region.owner = std::shared_ptr<void>(address, [handles = handles_, pages](void* mapped) {
      xenforeignmemory_unmap(handles->memory.get(), mapped, pages);
    });
    return region;
  }

  Result<std::vector<ScopedFd>> NotificationFds(uint64_t, uint32_t first, uint32_t) override {
    std::vector<ScopedFd> fds;
    if (first != 0) return fds;
    std::lock_guard lock(mutex_);
    if (!virq_) {
      HVPROF_TRY(forwarder, VirqForwarder::Start(handles_));
      virq_ = std::move(forwarder);
    }
    HVPROF_TRY(fd, virq_->Descriptor());
    fds.push_back(std::move(fd));
    return fds;
  }

  // Xen's trace buffers, for dom0 (docs/xen.md, Scheduling).
  Result<std::unique_ptr<agent::SchedSource>> OpenSchedSource() override {
    if (domain_ != 0) {
      return MakeError(ErrorKind::kPermissionDenied, "--sched: only dom0 can read Xen's trace buffers");
    }
    return OpenXenTraceBuffers();
  }

  // This domain's processes, from its own kernel (with hvprof's engine; xenoprof's samples
  // cannot be matched to them): what is alive first, then every fork, exec, mmap and exit.
  Result<ContextEvents> FetchContextEvents(uint64_t from, bool settle) override {
    std::lock_guard lock(tasks_mutex_);
    if (!tasks_) return ContextEvents{};
    tasks_->Drain();
    // The answers that come meanwhile become events now (Drain took those before it).
    if (settle) tasks_->processes().SettleImages(std::chrono::seconds(2));
    tasks_->Acknowledge(from);  // this domain's only agent has what came before
    auto taken = tasks_->TakeEvents(from, 4096);
    // On the samples' clock, the engine's: a sample is looked up among the processes by time.
    if (!clock_known_) SyncClock();
    for (context::ContextEvent& event : taken.events) {
      if (event.time_ns != 0) event.time_ns = static_cast<uint64_t>(static_cast<int64_t>(event.time_ns) + engine_minus_tracker_);
    }
    return taken;
  }

  void BeginTaskLookups() override {
    std::lock_guard lock(tasks_mutex_);
    if (!tasks_) return;
    tasks_->Drain();
    SyncClock();
  }

  bool LookUpTask(hvpmu::ring::SampleRecord& record) override {
    std::lock_guard lock(tasks_mutex_);
    if (!tasks_ || !clock_known_ || record.time_ns == 0) return false;
    const auto task = tasks_->TaskAt(record.vcpu, static_cast<uint64_t>(static_cast<int64_t>(record.time_ns) -
                                                                        engine_minus_tracker_));
    if (!task || task->pid == 0) return false;  // unknown, or the idle task
    record.pid = task->pid;
    record.tid = task->tid;
    record.flags |= hvpmu::ring::kFlagPidValid;
    return true;
  }

  // Xen tells nothing of the images a domain runs: --xen and --vmlinux name them.
  Result<context::DomainImages> Images() override { return context::DomainImages{}; }
  // From xenstore: every domain under /local/domain with its name and vCPUs for dom0, only
  // itself for a guest (a guest sees no other domain's nodes).
  Result<std::vector<context::DomainInfo>> Domains() override {
    std::vector<context::DomainInfo> list;
    xs_handle* store = handles_->store.get();
    std::vector<std::string> ids;
    if (domain_ == 0) ids = StoreList(store, "/local/domain");
    if (ids.empty()) ids.push_back(std::to_string(domain_));
    for (const std::string& id : ids) {
      char* end = nullptr;
      const unsigned long number = std::strtoul(id.c_str(), &end, 10);
      if (end == id.c_str() || *end != '\0' || number >= 0x7FF0) continue;
      const std::string home = "/local/domain/" + id;
      std::string name = StoreRead(store, home + "/name").value_or(number == 0 ? "Domain-0" : "");
      const auto vcpus = static_cast<uint16_t>(std::min<size_t>(StoreList(store, home + "/cpu").size(), UINT16_MAX));
      list.push_back({.id = static_cast<uint16_t>(number), .name = std::move(name), .type = "", .vcpus = vcpus, .kernel = ""});
    }
    return list;
  }

 private:
  // With tasks_mutex_ held.
  void SyncClock() {
    // The engine's clock (Xen's system time) against the tracker's: the status op, bracketed by
    // two readings of the tracker's clock, three times; the narrowest bracket counts. Its error
    // is at most half its width (microseconds): a sample that close to a context switch may be
    // given the task on its other side.
    uint64_t best_width = UINT64_MAX;
    for (int attempt = 0; attempt < 3; ++attempt) {
      agent::StatusRequest(status_.get());
      const uint64_t before = tasks_->Now();
      auto answer = Op(hvpmu::kOpStatus, std::as_writable_bytes(std::span(status_.get(), 1)));
      const uint64_t after = tasks_->Now();
      if (!answer || answer.value() != ErrorCode::kOk || status_->now_ns == 0) continue;
      if (after - before < best_width) {
        best_width = after - before;
        engine_minus_tracker_ = static_cast<int64_t>(status_->now_ns - (before + (after - before) / 2));
        clock_known_ = true;
      }
    }
  }


  std::shared_ptr<Handles> handles_;
  hvpmu::DomainId domain_;
  std::string version_;
  std::string root_;  // where /sys, /proc and /run are ("" outside tests)
  bool engine_ = false;
  // With hvprof's engine: this domain's tasks, and the engine's clock against theirs.
  std::mutex tasks_mutex_;
  std::unique_ptr<linux_host::TaskTracker> tasks_;
  std::unique_ptr<hvpmu::Status> status_;  // the status op's argument, for the clock
  int64_t engine_minus_tracker_ = 0;
  bool clock_known_ = false;
  std::mutex mutex_;
  std::unique_ptr<VirqForwarder> virq_;
};

}  // namespace

std::optional<ErrorCode> ErrorCodeOfErrno(int errnum) {
  // Each code's errno (hvpmu::ErrorErrno) is the errno it came from.
  switch (errnum) {
    case EBUSY: return ErrorCode::kBusy;
    case EPERM: return ErrorCode::kBadState;
    case EEXIST: return ErrorCode::kAlreadyListed;
    case E2BIG: return ErrorCode::kTooManyDomains;
    case ENOMEM: return ErrorCode::kNoMemory;
    case EALREADY: return ErrorCode::kAlreadyActivated;
    default: return std::nullopt;
  }
}

Error XenoprofRefusal(uint32_t op, int errnum) {
  const char* name = agent::OpName(op);
  const char* advice = "";
  ErrorKind kind = ErrorKind::kUnsupported;
  switch (errnum) {
    case ENOSYS:
      advice = "this Xen has no profiler (Xen 4.18 and later build xenoprof only with CONFIG_XENOPROF, off by "
               "default, and 4.22 removed it), or this domain is PVH or HVM, which cannot call it. Boot a Xen "
               "built with hvprof's engine (xen-engine/build-xen.sh; docs/xen.md), or in dom0 use "
               "`hvprof --platform=linux` (dom0 only); an HVM or PVH guest is profiled from dom0 with "
               "--passive-domains";
      break;
    case ENODEV:
      advice = "Xen found no PMU it can drive: xenoprof knows Intel's architectural perfmon and AMD "
               "before Zen, not AMD family 17h and later. Use `hvprof --platform=linux` in dom0";
      break;
    case EBUSY:
      advice = "the PMU is Xen's vPMU's (boot Xen with vpmu=off), or Xen still shares an earlier session's "
               "buffer (see docs/xen.md, Recovery)";
      kind = ErrorKind::kBusy;
      break;
    case EPERM:
    case EACCES:
      advice = "only the primary profiler (the first domain to call init: dom0, as root) may do "
               "this, and only in xenoprof's order (docs/xen.md); a guest may only run its own ops";
      kind = ErrorKind::kPermissionDenied;
      break;
    default:
      advice = "see docs/xen.md";
      kind = ErrorKind::kInvalidArgument;
      break;
  }
  return MakeError(kind, "Xen refused {} ({}): {}", name, std::strerror(errnum), advice);
}

Result<std::unique_ptr<agent::HypervisorLink>> ConnectXen(std::optional<hvpmu::DomainId> domain,
                                                          const std::string& root_or_empty) {
  const std::string root = XenRoot(root_or_empty);
  const XenHost host = DetectXen(root);
  if (!host.is_xen) {
    return MakeError(ErrorKind::kUnsupported, "--platform=xen: this machine does not run on Xen ({}); use "
                                              "--platform=linux, or hvprof-hv", host.reason);
  }
  auto handles = std::make_shared<Handles>();
  handles->call.reset(xencall_open(nullptr, 0));
  if (!handles->call) {
    return ErrnoError(errno, "xencall_open (/dev/xen/privcmd): run as root in dom0 or a PV guest");
  }
  // Since the fix for XSA-482 (Debian 12's 6.1.0-56 kernel has it), Linux's privcmd in an
  // unprivileged guest passes no hypercall unless xen_privcmd.unrestricted=1: every op would then
  // fail with EPERM and read as Xen's refusal. xen_version is refused to no domain, so an EPERM
  // for it comes from the guest's kernel.
  if (!host.control_domain && xencall2(handles->call.get(), __HYPERVISOR_xen_version, XENVER_version, 0) < 0 &&
      errno == EPERM) {
    return MakeError(ErrorKind::kPermissionDenied,
                     "this guest's kernel lets no hypercall through /dev/xen/privcmd (Linux restricts it in "
                     "unprivileged guests since XSA-482; the kernel log says 'No target domain found, blocking "
                     "all hypercalls'): boot the guest with xen_privcmd.unrestricted=1 on its kernel command line, "
                     "or reload the module: `umount /proc/xen; modprobe -r xenfs xen-privcmd; modprobe xen-privcmd "
                     "unrestricted=1; modprobe xenfs; mount -t xenfs xenfs /proc/xen`. A kernel locked down by "
                     "Secure Boot refuses that; then profile this guest from dom0 (--passive-domains)");
  }
  handles->memory.reset(xenforeignmemory_open(nullptr, 0));
  if (!handles->memory) return ErrnoError(errno, "xenforeignmemory_open");
  handles->events.reset(xenevtchn_open(nullptr, 0));
  if (!handles->events) return ErrnoError(errno, "xenevtchn_open (/dev/xen/evtchn)");
  handles->store.reset(xs_open(0));
  // Which domain this is: dom0 where /proc/xen/capabilities says so, else xenstore's "domid".
  std::optional<hvpmu::DomainId> said;
  if (host.control_domain) {
    said = 0;
  } else if (const std::optional<std::string> domid = StoreRead(handles->store.get(), "domid")) {
    said = static_cast<hvpmu::DomainId>(std::strtoul(domid->c_str(), nullptr, 10));
  }
  if (!said && !domain) {
    return MakeError(ErrorKind::kNotFound, "this Xen guest cannot read its domain id from xenstore ('domid'); "
                                           "give it with --domain=ID (`xl domid NAME` in dom0 prints it)");
  }
  if (said && domain && *said != *domain) {
    return MakeError(ErrorKind::kInvalidArgument, "--domain={}, but Xen says this is domain {}", *domain, *said);
  }
  const hvpmu::DomainId self = said ? *said : *domain;
  std::string version = "?";
  auto major = ReadFileToString(root + "/sys/hypervisor/version/major");
  auto minor = ReadFileToString(root + "/sys/hypervisor/version/minor");
  if (major && minor) version = TrimmedLine(major.value()) + "." + TrimmedLine(minor.value());
  return std::unique_ptr<agent::HypervisorLink>(std::make_unique<XenLink>(std::move(handles), self, version, root));
}

}  // namespace hvprof::xen
