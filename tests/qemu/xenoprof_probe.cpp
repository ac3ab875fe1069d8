// xenoprof_probe: runs one scenario of raw xenoprof ops and prints what the hypervisor answers,
// to pin down how Xen 4.17 behaves where docs/xen.md says the fake Xen (tests/xen-fake) may
// differ. It talks to libxencall and libxenforeignmemory directly, with no hvprof code between,
// so the answers are Xen's own (or the fake's, with tests/xen-fake preloaded).
//
//   xenoprof_probe SCENARIO      (as root in a PV dom0)
//
// Each line is one step: "LABEL: RC NAME [key=value...]" where RC is 0 or -errno (NAME is
// OK or the errno's name), or a line of facts: "ringN: head=.. tail=.. size=.. vcpu=.. xen=..
// kernel=.. user=.. lost=..". A child process's lines come with "[NAME]" in front. Scenarios:
//
//   recovery-fresh          the dom0 agent's unwind on a profiler nobody has used since boot
//   disable-virq-active     what disable_virq does to dom0's place on the active list
//   duplicate-set-active    set_active(0) twice, and what that does to start
//   counters-across-buffers ring headers across get_buffer, in this process and a new one
//   recovery                the unwind after a process was killed after init, after
//                           reserve_counters, and while profiling (there also without its
//                           set_active(0)); then a new setup
//   duplicate-enable-virq   enable_virq twice, and what that does to start
//   guest-init              in a PV guest whose agent has joined: xen_version and init
//   guest-refusals          in a PV guest whose agent has joined: init, get_buffer, the ops
//                           only dom0 may run, and a mapping of dom0's memory
//   hypercall-loop          not a probe: a workload of hypercalls (xen_version, as tightly as it
//                           can) for 3 s of wall time; prints how many it made
//
// tests/qemu/xenoprof_probe_test.cpp runs all of them in one boot and asserts the answers.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

// The Xen library headers have no extern "C" of their own.
extern "C" {
#include <xencall.h>
#include <xenforeignmemory.h>
#include <xen/version.h>
#include <xen/xen.h>
}

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hvpmu/abi/xenoprof_legacy.h"

namespace {

namespace legacy = hvpmu::legacy;

constexpr uint32_t kDomidSelf = 0x7FF0;  // DOMID_SELF
constexpr uint64_t kPage = 4096;

std::string g_prefix;  // "[child] " in a child process

__attribute__((format(printf, 1, 2))) void Line(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char text[512];
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  std::printf("%s%s\n", g_prefix.c_str(), text);
  std::fflush(stdout);
}

const char* ErrnoName(int errnum) {
  switch (errnum) {
    case 0: return "OK";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case ENOSYS: return "ENOSYS";
    case ENODEV: return "ENODEV";
    case E2BIG: return "E2BIG";
    case EALREADY: return "EALREADY";
    case EACCES: return "EACCES";
    case EIO: return "EIO";
    default: return "E?";
  }
}

// One process's handles on Xen, and its mapping of its own buffer.
class Xen {
 public:
  Xen() {
    call_ = xencall_open(nullptr, 0);
    memory_ = xenforeignmemory_open(nullptr, 0);
    if (call_ == nullptr || memory_ == nullptr) {
      Line("open: %d %s (xencall_open/xenforeignmemory_open: run as root in a PV dom0)", -errno, ErrnoName(errno));
      std::exit(2);
    }
  }
  ~Xen() {
    Unmap(false);
    xenforeignmemory_close(memory_);
    xencall_close(call_);
  }
  // The buffer an earlier process had, so that get_buffer can say whether this is the same.
  void Remember(uint64_t gmaddr, int32_t nbuf, int32_t bufsize) {
    gmaddr_ = gmaddr;
    nbuf_ = nbuf;
    bufsize_ = bufsize;
  }
  uint64_t gmaddr() const { return gmaddr_; }
  int32_t nbuf() const { return nbuf_; }
  int32_t bufsize() const { return bufsize_; }

  Xen(const Xen&) = delete;
  Xen& operator=(const Xen&) = delete;

  // The hypercall: 0 or -errno.
  int Raw(uint32_t op, void* argument, size_t size) {
    void* buffer = nullptr;
    if (size != 0) {
      buffer = xencall_alloc_buffer(call_, size);
      if (buffer == nullptr) return -ENOMEM;
      std::memcpy(buffer, argument, size);
    }
    int rc = xencall2(call_, legacy::kHypercallXenoprofOp, op, reinterpret_cast<uint64_t>(buffer));
    const int errnum = errno;
    if (rc >= 0 && size != 0) std::memcpy(argument, buffer, size);
    if (buffer != nullptr) xencall_free_buffer(call_, buffer);
    return rc < 0 ? -errnum : rc;
  }

  // Runs `op` and prints "LABEL: RC NAME EXTRA".
  int Op(const char* label, uint32_t op, void* argument = nullptr, size_t size = 0) {
    const int rc = Raw(op, argument, size);
    Line("%s: %d %s", label, rc, ErrnoName(rc < 0 ? -rc : 0));
    return rc;
  }

  int Init() {
    legacy::Init init{};
    const int rc = Raw(legacy::kOpInit, &init, sizeof init);
    init.cpu_type[legacy::kCpuTypeSize - 1] = '\0';
    if (rc == 0) {
      cpu_type_ = init.cpu_type;
      Line("init: 0 OK primary=%d events=%d cpu=%s", init.is_primary, init.num_events, init.cpu_type);
    } else {
      Line("init: %d %s", rc, ErrnoName(-rc));
    }
    return rc;
  }
  int GetBuffer(int32_t max_samples, const char* label = "get_buffer") {
    legacy::GetBuffer request{};
    request.max_samples = max_samples;
    const int rc = Raw(legacy::kOpGetBuffer, &request, sizeof request);
    if (rc != 0) {
      Line("%s: %d %s", label, rc, ErrnoName(-rc));
      return rc;
    }
    const bool first = gmaddr_ == 0;
    const bool same = request.buf_gmaddr == gmaddr_ && request.nbuf == nbuf_ && request.bufsize == bufsize_;
    gmaddr_ = request.buf_gmaddr;
    nbuf_ = request.nbuf;
    bufsize_ = request.bufsize;
    Line("%s: 0 OK max_samples=%d nbuf=%d bufsize=%d%s", label, max_samples, nbuf_, bufsize_,
         first ? "" : same ? " same-buffer=yes" : " same-buffer=no");
    return rc;
  }
  int SetActive(uint16_t domain, const char* label = "set_active(0)") {
    legacy::DomainIdArg id = domain;
    return Op(label, legacy::kOpSetActive, &id, sizeof id);
  }
  int Counter() {
    legacy::Counter counter{};
    counter.ind = 0;
    counter.count = 1'000'000;
    counter.enabled = 1;
    // CPU_CLK_UNHALTED. Xen checks nothing of it; hvprof's engine (the fake Xen) does.
    counter.event = cpu_type_.rfind("i386/", 0) == 0 ? 0x3C : 0x76;
    counter.kernel = 1;
    counter.user = 1;
    return Op("counter(0)", legacy::kOpCounter, &counter, sizeof counter);
  }

  // The last get_buffer's buffer, as the agents map it.
  bool Map() {
    if (gmaddr_ == 0) return false;
    Unmap(false);
    pages_ = (uint64_t(nbuf_) * uint64_t(bufsize_) + kPage - 1) / kPage;
    std::vector<xen_pfn_t> frames(pages_);
    std::vector<int> errors(pages_, 0);
    for (size_t i = 0; i < pages_; ++i) frames[i] = static_cast<xen_pfn_t>(gmaddr_ / kPage + i);
    mapped_ = static_cast<uint8_t*>(xenforeignmemory_map(memory_, kDomidSelf, PROT_READ | PROT_WRITE, pages_,
                                                         frames.data(), errors.data()));
    int failed = mapped_ == nullptr ? errno : 0;
    for (size_t i = 0; mapped_ != nullptr && i < pages_; ++i) {
      if (errors[i] != 0) failed = -errors[i];
    }
    if (failed != 0 && mapped_ != nullptr) {
      xenforeignmemory_unmap(memory_, mapped_, pages_);
      mapped_ = nullptr;
    }
    Line("map: %d %s pages=%zu", -failed, ErrnoName(failed), pages_);
    return mapped_ != nullptr;
  }
  // xen_version(XENVER_version), which Xen answers any domain: whether hypercalls get through.
  void Version() {
    const int rc = xencall2(call_, __HYPERVISOR_xen_version, XENVER_version, 0);
    if (rc < 0) {
      Line("xen_version: %d %s", -errno, ErrnoName(errno));
    } else {
      Line("xen_version: 0 OK %d.%d", rc >> 16, rc & 0xFFFF);
    }
  }

  // One page of another domain, read-only: what a guest must never get.
  int MapForeign(const char* label, uint16_t domain, uint64_t frame) {
    xen_pfn_t pfn = static_cast<xen_pfn_t>(frame);
    int error = 0;
    void* page = xenforeignmemory_map(memory_, domain, PROT_READ, 1, &pfn, &error);
    const int failed = page == nullptr ? errno : -error;  // err[] holds -errno
    if (page != nullptr) xenforeignmemory_unmap(memory_, page, 1);
    Line("%s: %d %s", label, -failed, ErrnoName(failed));
    return -failed;
  }

  void Unmap(bool print = true) {
    if (mapped_ == nullptr) return;
    const int rc = xenforeignmemory_unmap(memory_, mapped_, pages_);
    mapped_ = nullptr;
    if (print) Line("unmap: %d %s", rc < 0 ? -errno : 0, ErrnoName(rc < 0 ? errno : 0));
  }

  legacy::XenoprofBuf* Ring(int i) {
    return reinterpret_cast<legacy::XenoprofBuf*>(mapped_ + size_t(i) * size_t(bufsize_));
  }
  void PrintRings() {
    if (mapped_ == nullptr) return;
    for (int i = 0; i < nbuf_; ++i) {
      const legacy::XenoprofBuf* ring = Ring(i);
      Line("ring%d: head=%u tail=%u size=%u vcpu=%u xen=%llu kernel=%llu user=%llu lost=%llu", i,
           ring->event_head, ring->event_tail, ring->event_size, ring->vcpu_id,
           static_cast<unsigned long long>(ring->xen_samples), static_cast<unsigned long long>(ring->kernel_samples),
           static_cast<unsigned long long>(ring->user_samples), static_cast<unsigned long long>(ring->lost_samples));
    }
  }
  // What no TCG counter can produce: indices and counts of our own, to see what Xen resets.
  void Scribble(uint32_t head, uint32_t tail) {
    if (mapped_ == nullptr) return;
    for (int i = 0; i < nbuf_; ++i) {
      legacy::XenoprofBuf* ring = Ring(i);
      ring->event_head = head;
      ring->event_tail = tail;
      ring->xen_samples = 100 + i * 10 + 1;
      ring->kernel_samples = 100 + i * 10 + 2;
      ring->user_samples = 100 + i * 10 + 3;
      ring->lost_samples = 100 + i * 10 + 4;
    }
    Line("write: head=%u tail=%u xen=10N+101 kernel=10N+102 user=10N+103 lost=10N+104 in every ringN", head, tail);
  }

 private:
  xencall_handle* call_ = nullptr;
  xenforeignmemory_handle* memory_ = nullptr;
  std::string cpu_type_;
  uint64_t gmaddr_ = 0;
  int32_t nbuf_ = 0;
  int32_t bufsize_ = 0;
  uint8_t* mapped_ = nullptr;
  size_t pages_ = 0;
};

// Runs `body` in a child process (its own handles, as another program would have) and says how
// the child ended.
void InChild(const char* name, const std::function<void()>& body) {
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) {
    Line("fork: %d %s", -errno, ErrnoName(errno));
    std::exit(2);
  }
  if (child == 0) {
    g_prefix = std::string("[") + name + "] ";
    body();
    std::fflush(stdout);
    std::_Exit(0);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    Line("[%s] ended: killed by signal %d", name, WTERMSIG(status));
  } else {
    Line("[%s] ended: exit %d", name, WEXITSTATUS(status));
  }
}

// dom0-agent/src/agent.cpp UnwindXenoprof, step by step.
void Unwind(Xen& xen) {
  xen.Op("stop", legacy::kOpStop);
  xen.Op("release_counters", legacy::kOpReleaseCounters);
  xen.Op("shutdown", legacy::kOpShutdown);
  xen.Init();
  xen.SetActive(0);
  xen.Op("disable_virq", legacy::kOpDisableVirq);
  xen.Op("reset_passive_list", legacy::kOpResetPassiveList);
  xen.Op("reset_active_list", legacy::kOpResetActiveList);
  xen.Op("shutdown", legacy::kOpShutdown);
}

// The agent's own setup up to `start` (dom0-agent/src/agent.cpp SetUp), stopping after `last`.
enum class Point { kInit, kReserved, kStarted };
void SetUpTo(Xen& xen, Point last) {
  xen.Init();
  if (xen.GetBuffer(64) == 0) xen.Map();
  if (last == Point::kInit) return;
  xen.Op("reset_active_list", legacy::kOpResetActiveList);
  xen.SetActive(0);
  xen.Op("reset_passive_list", legacy::kOpResetPassiveList);
  xen.Op("reserve_counters", legacy::kOpReserveCounters);
  xen.Counter();
  if (last == Point::kReserved) return;
  xen.Op("setup_events", legacy::kOpSetupEvents);
  xen.Op("enable_virq", legacy::kOpEnableVirq);
  xen.Op("start", legacy::kOpStart);
}

// A fresh setup works (get_buffer is not refused), and is given back cleanly.
void CheckUsable(Xen& xen) {
  xen.Init();
  if (xen.GetBuffer(64) == 0) xen.Map();
  xen.SetActive(0);
  xen.Op("disable_virq", legacy::kOpDisableVirq);
  xen.Unmap();
  xen.Op("reset_active_list", legacy::kOpResetActiveList);
  xen.Op("shutdown", legacy::kOpShutdown);
}

void RecoveryFresh() {
  Xen xen;
  Unwind(xen);
}

void DisableVirqActive() {
  Xen xen;
  xen.Init();
  if (xen.GetBuffer(64) == 0) xen.Map();
  xen.SetActive(0);
  xen.Op("reserve_counters", legacy::kOpReserveCounters);
  xen.Counter();
  xen.Op("setup_events", legacy::kOpSetupEvents);
  xen.Op("enable_virq", legacy::kOpEnableVirq);
  xen.Op("start", legacy::kOpStart);
  xen.Op("disable_virq@profiling", legacy::kOpDisableVirq);
  xen.Op("stop", legacy::kOpStop);
  xen.Op("disable_virq", legacy::kOpDisableVirq);
  // Is dom0 still on the active list? Each of these needs it there (or the list empty).
  xen.Op("disable_virq@again", legacy::kOpDisableVirq);
  xen.Op("enable_virq@again", legacy::kOpEnableVirq);
  xen.Op("start@again", legacy::kOpStart);
  xen.Op("stop@again", legacy::kOpStop);
  xen.SetActive(0, "set_active(0)@ready");
  xen.Op("release_counters", legacy::kOpReleaseCounters);
  xen.Op("reserve_counters", legacy::kOpReserveCounters);
  xen.Counter();  // refused while the active list is empty
  xen.Op("release_counters", legacy::kOpReleaseCounters);
  xen.SetActive(0, "set_active(0)@initialized");
  xen.Op("reset_active_list", legacy::kOpResetActiveList);
  xen.Op("shutdown", legacy::kOpShutdown);
  xen.Unmap();
}

void DuplicateSetActive() {
  Xen xen;
  xen.Init();
  if (xen.GetBuffer(64) == 0) xen.Map();
  xen.SetActive(0);
  xen.SetActive(0, "set_active(0)@duplicate");
  xen.Op("reserve_counters", legacy::kOpReserveCounters);
  xen.Counter();
  xen.Op("setup_events", legacy::kOpSetupEvents);
  xen.Op("enable_virq", legacy::kOpEnableVirq);
  xen.Op("start", legacy::kOpStart);
  xen.Op("disable_virq", legacy::kOpDisableVirq);
  xen.Op("disable_virq@again", legacy::kOpDisableVirq);
  xen.Op("release_counters", legacy::kOpReleaseCounters);
  xen.Op("reset_active_list", legacy::kOpResetActiveList);
  xen.Op("shutdown", legacy::kOpShutdown);
  xen.Unmap();
}

void CountersAcrossBuffers() {
  uint64_t gmaddr = 0;
  int32_t nbuf = 0;
  int32_t bufsize = 0;
  {
    Xen xen;
    xen.Init();
    if (xen.GetBuffer(64) == 0 && xen.Map()) xen.PrintRings();
    xen.Scribble(5, 3);
    xen.GetBuffer(64, "get_buffer@mapped");
    xen.Unmap();
    xen.GetBuffer(64, "get_buffer@shared");
    if (xen.Map()) xen.PrintRings();
    // enable_virq, which the agent calls last in its setup.
    xen.SetActive(0);
    xen.Op("reserve_counters", legacy::kOpReserveCounters);
    xen.Counter();
    xen.Op("setup_events", legacy::kOpSetupEvents);
    xen.Op("enable_virq", legacy::kOpEnableVirq);
    xen.PrintRings();
    xen.Scribble(5, 3);
    xen.Op("release_counters", legacy::kOpReleaseCounters);
    xen.Op("disable_virq", legacy::kOpDisableVirq);
    xen.PrintRings();
    xen.Unmap();
    xen.Op("shutdown", legacy::kOpShutdown);
    // A new buffer in the same process, with a smaller request.
    xen.Init();
    if (xen.GetBuffer(16) == 0 && xen.Map()) xen.PrintRings();
    xen.Scribble(7, 6);
    xen.SetActive(0);
    xen.Op("disable_virq", legacy::kOpDisableVirq);
    xen.Unmap();
    xen.Op("reset_active_list", legacy::kOpResetActiveList);
    xen.Op("shutdown", legacy::kOpShutdown);
    gmaddr = xen.gmaddr();
    nbuf = xen.nbuf();
    bufsize = xen.bufsize();
  }
  // And in a new process.
  InChild("new-process", [&] {
    Xen xen;
    xen.Remember(gmaddr, nbuf, bufsize);
    xen.Init();
    if (xen.GetBuffer(8) == 0 && xen.Map()) xen.PrintRings();
    xen.SetActive(0);
    xen.Op("disable_virq", legacy::kOpDisableVirq);
    xen.Unmap();
    xen.Op("reset_active_list", legacy::kOpResetActiveList);
    xen.Op("shutdown", legacy::kOpShutdown);
  });
}

void Recovery() {
  const struct {
    const char* name;
    Point point;
  } leftovers[] = {{"killed-after-init", Point::kInit},
                   {"killed-after-reserve", Point::kReserved},
                   {"killed-while-profiling", Point::kStarted}};
  for (const auto& leftover : leftovers) {
    InChild(leftover.name, [&] {
      Xen xen;
      SetUpTo(xen, leftover.point);
      std::fflush(stdout);
      ::raise(SIGKILL);  // no cleanup at all: the mapping goes with the process
    });
    if (leftover.point == Point::kStarted) {
      // The same unwind without set_active(0): shutdown emptied the active list, so Xen
      // refuses disable_virq, and dom0's buffer stays shared.
      InChild("unwind-without-set-active", [] {
        Xen xen;
        xen.Op("stop", legacy::kOpStop);
        xen.Op("release_counters", legacy::kOpReleaseCounters);
        xen.Op("shutdown", legacy::kOpShutdown);
        xen.Init();
        xen.Op("disable_virq", legacy::kOpDisableVirq);
        xen.Op("reset_passive_list", legacy::kOpResetPassiveList);
        xen.Op("reset_active_list", legacy::kOpResetActiveList);
        xen.Op("shutdown", legacy::kOpShutdown);
      });
      InChild("still-shared", [] {
        Xen xen;
        xen.Init();
        xen.GetBuffer(64);
        xen.Op("shutdown", legacy::kOpShutdown);
      });
    }
    InChild("unwind", [] {
      Xen xen;
      Unwind(xen);
    });
    InChild("after", [] {
      Xen xen;
      CheckUsable(xen);
    });
  }
}

// Xen counts a second enable_virq of one domain twice (the fake's engine refuses it).
void DuplicateEnableVirq() {
  Xen xen;
  xen.Init();
  if (xen.GetBuffer(64) == 0) xen.Map();
  xen.SetActive(0);
  xen.Op("reserve_counters", legacy::kOpReserveCounters);
  xen.Counter();
  xen.Op("setup_events", legacy::kOpSetupEvents);
  xen.Op("enable_virq", legacy::kOpEnableVirq);
  xen.Op("enable_virq@again", legacy::kOpEnableVirq);
  xen.Op("start", legacy::kOpStart);
  xen.Op("disable_virq", legacy::kOpDisableVirq);
  xen.Op("start@after-disable", legacy::kOpStart);
  xen.Op("stop", legacy::kOpStop);
  xen.Op("disable_virq@again", legacy::kOpDisableVirq);
  xen.Op("release_counters", legacy::kOpReleaseCounters);
  xen.Op("reset_active_list", legacy::kOpResetActiveList);
  xen.Op("shutdown", legacy::kOpShutdown);
  xen.Unmap();
}

// In a PV guest whose agent has joined: what another process's init does (nothing, it seems;
// qemu_xen_guest checks with a disable_virq after it).
void GuestInit() {
  Xen xen;
  xen.Version();
  xen.Init();
}

// In a PV guest whose agent has joined (its buffer mapped, enable_virq done): every op that only
// the primary profiler (dom0) may run, and a mapping of dom0's memory. Changes nothing if all
// are refused; the guest's own buffer stays its agent's.
void GuestRefusals() {
  Xen xen;
  xen.Version();
  xen.Init();
  xen.GetBuffer(64, "get_buffer@agent-holds-it");
  xen.SetActive(0, "set_active(0)");
  legacy::Passive dom0{};
  dom0.domain_id = 0;
  dom0.max_samples = 64;
  xen.Op("set_passive(0)", legacy::kOpSetPassive, &dom0, sizeof dom0);
  xen.Counter();
  const std::pair<const char*, uint32_t> without_argument[] = {
      {"reset_active_list", legacy::kOpResetActiveList}, {"reset_passive_list", legacy::kOpResetPassiveList},
      {"reserve_counters", legacy::kOpReserveCounters},  {"setup_events", legacy::kOpSetupEvents},
      {"start", legacy::kOpStart},                       {"stop", legacy::kOpStop},
      {"release_counters", legacy::kOpReleaseCounters},  {"shutdown", legacy::kOpShutdown}};
  for (const auto& [label, op] : without_argument) xen.Op(label, op);
  legacy::BacktraceDepthArg depth = 4;
  xen.Op("set_backtrace", legacy::kOpSetBacktrace, &depth, sizeof depth);
  xen.MapForeign("map-dom0-page", 0, 0x100);
}

// A workload whose time in Xen is the hypercall path: xen_version, the cheapest hypercall, in a
// tight loop for 3 s of wall time.
void HypercallLoop() {
  xencall_handle* call = xencall_open(nullptr, 0);
  if (call == nullptr) {
    Line("xencall_open: %d %s", -errno, std::strerror(errno));
    return;
  }
  uint64_t made = 0, failed = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 1000; ++i) failed += xencall2(call, __HYPERVISOR_xen_version, XENVER_version, 0) < 0 ? 1 : 0;
    made += 1000;
  }
  xencall_close(call);
  Line("hypercall-loop: %llu hypercalls, %llu failed", static_cast<unsigned long long>(made),
       static_cast<unsigned long long>(failed));
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::pair<std::string, void (*)()>> scenarios = {
      {"recovery-fresh", RecoveryFresh},
      {"disable-virq-active", DisableVirqActive},
      {"duplicate-set-active", DuplicateSetActive},
      {"counters-across-buffers", CountersAcrossBuffers},
      {"recovery", Recovery},
      {"duplicate-enable-virq", DuplicateEnableVirq},
      {"guest-init", GuestInit},
      {"guest-refusals", GuestRefusals},
      {"hypercall-loop", HypercallLoop},
  };
  if (argc == 2) {
    for (const auto& [name, run] : scenarios) {
      if (name == argv[1]) {
        Line("scenario %s", argv[1]);
        run();
        return 0;
      }
    }
  }
  std::fprintf(stderr, "usage: xenoprof_probe SCENARIO\nscenarios:");
  for (const auto& [name, run] : scenarios) std::fprintf(stderr, " %s", name.c_str());
  std::fprintf(stderr, "\n");
  return 2;
}
