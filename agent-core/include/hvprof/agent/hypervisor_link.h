// How an agent reaches the hypervisor: the profiling operations, ring mapping and
// notifications. Two implementations: `hosted` (hvprof-hv's per-domain socket, here) and `xen`
// (Xen 4.17's xenoprof through libxencall/libxenforeignmemory/libxenevtchn).
#pragma once

#include <chrono>
#include <optional>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hvpmu/abi/errors.h"
#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"
#include "hvprof/agent/sched_source.h"
#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/context/context_event.h"
#include "hvprof/context/domains.h"
#include "hvprof/context/ground_truth.h"
#include "hvprof/context/platform_stats.h"

namespace hvprof::agent {

// A mapped shared region; the mapping lives as long as any copy of `owner` (an mmap, or a
// foreign mapping of Xen's pages).
struct MappedRegion {
  std::shared_ptr<void> owner;
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint8_t* base() const { return data; }
};

// A profile a guest published for dom0's whole-host report, as the hypervisor handed it on.
struct PublishedProfile {
  hvpmu::DomainId domain = 0;  // the publisher, as the hypervisor knows it
  uint64_t sequence = 0;       // increases with every publication
  std::string bytes;           // the guest's document: untrusted input
};

// The simulated machine's Xen trace buffers (hvprof-hv's kXenTrace), as the fake Xen libraries
// drive them for the tests: the answer to one XEN_SYSCTL_tbuf_op command, and once the buffers
// exist their memory and VIRQ_TBUF's eventfd.
struct SimTraceBuffers {
  int xen_errno = 0;  // what Xen would refuse the command with
  uint32_t evt_mask = 0;
  uint32_t tbuf_pages = 0;
  uint64_t t_info_mfn = 0;
  uint32_t t_info_pages = 0;
  uint32_t num_cpus = 0;
  uint64_t first_mfn = 0;  // frame f is at (f - first_mfn) * 4096 in `memory`
  uint64_t bytes = 0;
  uint32_t cpu_khz = 0;
  bool enabled = false;
  ScopedFd memory;  // with bytes != 0
  ScopedFd notify;
};

struct SimClock {
  uint64_t sim_time_ns = 0;
  uint64_t pmis = 0;
  bool halted = false;
};

class HypervisorLink {
 public:
  virtual ~HypervisorLink() = default;

  // Who the hypervisor believes we are, and what it runs on.
  virtual hvpmu::DomainId domain() const = 0;
  virtual std::string platform_name() const = 0;
  virtual std::string machine_name() const = 0;
  virtual uint32_t num_cpus() const = 0;

  // True where the hypervisor speaks only Xen 4.17's xenoprof ABI (ops 0-17, legacy rings, no
  // status op); false for hvprof's engine, which speaks the v2 ops as well.
  virtual bool legacy_only() const { return false; }
  // A file this domain's agent must hold locked while it drives the profiler: neither Xen nor
  // hvprof-hv tells two agents of one domain apart. Empty where the hypervisor can.
  virtual std::string ExclusiveLockPath() const { return {}; }
  // A descriptor that reports a hangup (poll's POLLHUP or POLLRDHUP) when the hypervisor side
  // goes away, or -1 where it cannot go away without the machine (Xen).
  virtual int HangupFd() const { return -1; }

  // Runs one profiling operation with `argument` read and written in place. The engine's answer
  // (kOk or a refusal) is the value; an Error means the link itself failed.
  virtual Result<hvpmu::ErrorCode> Op(uint32_t op, std::span<std::byte> argument) = 0;
  // The error for the hypervisor's refusal of `op`, in the platform's words and with its advice.
  virtual Error DescribeRefusal(uint32_t op, hvpmu::ErrorCode code) const;
  // Maps a region the hypervisor shared with this domain (region_handle / buf_gmaddr): its
  // first `bytes`, or all of it when 0 (where the hypervisor can say how large it is).
  virtual Result<MappedRegion> MapRegion(uint64_t handle, uint64_t bytes = 0) = 0;
  // One pollable descriptor per ring, readable when that ring has work.
  virtual Result<std::vector<ScopedFd>> NotificationFds(uint64_t handle, uint32_t first,
                                                        uint32_t count) = 0;
  // The images this domain runs, as the platform knows them (the hypervisor's for dom0, and
  // its kernel); empty where it does not (Xen).
  virtual Result<context::DomainImages> Images() = 0;
  // The domains this caller may know of: every domain for dom0, itself for a guest.
  virtual Result<std::vector<context::DomainInfo>> Domains() = 0;

  // What the platform learned of the processes of the domains this caller may know of since
  // event `from` (0: what is alive, then every event it still keeps), as context events
  // (hvprof/context/context_event.h), and where to ask from next. Platforms that know no processes
  // (Xen) have none. `settle`: the session is closing; the platform first waits (briefly) for
  // what it is still finding out of mappings it told (hv::kContextEventsSettle).
  using ContextEvents = context::ContextEventBatch;
  virtual Result<ContextEvents> FetchContextEvents(uint64_t from, bool settle);

  // Where the hypervisor's samples of this domain carry no task (Xen knows vCPUs, not the guest
  // kernel's tasks) and the link can find them itself: BeginTaskLookups before each drain of
  // the rings (the link reads what it learned of its tasks since), then LookUpTask for each
  // such sample of this domain fills record.pid and record.tid with the task its vCPU ran at
  // record.time_ns, and sets ring::kFlagPidValid. False where it cannot tell (the default: no
  // such link).
  virtual void BeginTaskLookups() {}
  virtual bool LookUpTask(hvpmu::ring::SampleRecord& record) {
    (void)record;
    return false;
  }

  // dom0: what the platform says of itself: its sampling statistics, notes, last error and clock.
  virtual Result<context::PlatformInfo> PlatformInfo();

  // A guest hands its profile to dom0 (this is its consent to appear in dom0's reports).
  virtual Result<void> Publish(std::span<const std::byte> profile);
  // dom0: the profiles guests published after `after_sequence`, the latest per domain.
  virtual Result<std::vector<PublishedProfile>> FetchPublished(uint64_t after_sequence);

  // Scheduling records the hypervisor keeps its own way (Xen's trace buffers); kUnsupported
  // where it has none (hosted: they come in the engine's scheduling rings).
  virtual Result<std::unique_ptr<SchedSource>> OpenSchedSource();

  // Simulated machines only.
  virtual Result<SimClock> SimQuery();
  virtual Result<SimClock> SimRunFor(uint64_t ns);
  // What the machine really did (context/ground_truth.h); `reset` starts it again from now.
  virtual Result<context::GroundTruth> GroundTruth(bool reset);
  // The machine's Xen trace buffers: one command (hv::XenTraceCommand) and its argument.
  virtual Result<SimTraceBuffers> SimXenTrace(uint32_t command, uint64_t argument);
};

// Connects to hvprof-hv's socket for one domain and says hello. With `hello_timeout`, an
// hvprof-hv that does not answer the hello within it (stopped, wedged, or not one at all) is an
// error (kBusy); the link's later calls wait as long as they take.
Result<std::unique_ptr<HypervisorLink>> ConnectHosted(
    const std::string& socket_path, std::optional<std::chrono::milliseconds> hello_timeout = std::nullopt);
// The same for `domain`'s socket in `run_dir` (empty: hvprof-hv's default run directory).
Result<std::unique_ptr<HypervisorLink>> ConnectHostedDomain(
    const std::string& run_dir, hvpmu::DomainId domain,
    std::optional<std::chrono::milliseconds> hello_timeout = std::nullopt);

// Typed helpers: run an op on a struct, or with no argument.
template <typename T>
Result<hvpmu::ErrorCode> RunOp(HypervisorLink& link, uint32_t op, T* argument) {
  return link.Op(op, std::as_writable_bytes(std::span(argument, 1)));
}
inline Result<hvpmu::ErrorCode> RunOp(HypervisorLink& link, uint32_t op) {
  return link.Op(op, {});
}

// The extension ops' arguments, built in one place each: zeroed (the engine refuses reserved
// words that are not), with their size and the ABI version this side speaks (docs/abi.md,
// "Operations").
hvpmu::InitV2 InitRequest();
// get_buffer_v2 (`domain` is then the engine's answer) and set_passive_v2: `capacity` slots per
// ring.
hvpmu::BufferV2 BufferRequest(hvpmu::DomainId domain, uint32_t capacity);
// The status op's argument, from `from_domain` on (a page of the domain list). Status is large
// (its domain list): it lives on the heap, and StatusRequest re-arms one for another call.
std::unique_ptr<hvpmu::Status> StatusRequest(uint32_t from_domain = 0);
void StatusRequest(hvpmu::Status* status, uint32_t from_domain = 0);

// "get_buffer", "enable_virq"... for messages.
const char* OpName(uint32_t op);
// An Error describing the engine's refusal of `op`, e.g.
// "start refused: some active domains have not called enable_virq (NotActivated)".
Error RefusalError(uint32_t op, hvpmu::ErrorCode code);

}  // namespace hvprof::agent
