// Turns one perf sample into the InterruptedContext the engine's sample path expects, so that
// ClassifyMode and the routing give Xen's answers for a Linux/KVM host:
//
//   perf cpumode        domain                              context                 mode
//   kernel, pid 0       idle (kDomainIdle)                  in_hypervisor           hypervisor
//   kernel / hv         the process's domain, or for a      in_hypervisor           hypervisor
//                       vCPU thread of a VMM its guest's
//   user                the process's domain                kPv64, CPL 3, not PV    user
//                                                           kernel mode
//   guest kernel        the VMM's guest domain              kHvm, CPL 0, long mode  kernel
//   guest user          the VMM's guest domain              kHvm, CPL 3, long mode  user
//
// The host kernel plays the hypervisor, and like Xen's, its samples are charged to the domain
// that was running (KVM's exit handling in a vCPU thread belongs to that guest). Host
// domains have one vCPU per host CPU (vcpu = the CPU); a guest's vCPU is its thread's
// ("CPU 3/KVM" is vCPU 3). Guest samples of a VMM with no domain go to kDomainInvalid, which
// the engine counts as an unprofiled-domain loss; their pid/tid are unknown (kNoPid), since
// the host's pid says nothing about the guest's processes.
#pragma once

#include <cstdint>
#include <span>

#include "hvpmu/platform.h"
#include "hvprof/facts/sample.h"
#include "hvprof/linux/domain_map.h"
#include "hvprof/linux/perf_records.h"
#include "hvprof/linux/process_table.h"

namespace hvprof::linux_host {

using hvpmu::InterruptedContext;

struct RoutedSample {
  InterruptedContext context{};
  // Return addresses of the sample's own context (kernel or user), innermost first, without
  // the interrupted ip; points into the sample's callchain.
  std::span<const uint64_t> frames;
};

// Whom a scheduler tracepoint names, in the engine's terms: the idle task of a CPU (tid 0) is
// that pCPU's idle vCPU; a VMM's vCPU thread is its guest's vCPU; any other thread is a task
// (pid and tid) of its process's domain.
struct SchedSubject {
  hvpmu::DomainId domain = 0;
  uint16_t vcpu = 0;
  uint32_t pid = kNoPid;  // unless `task`
  uint32_t tid = kNoTid;
  bool task = false;
};

struct RouterStats {
  uint64_t host_user = 0;
  uint64_t host_kernel = 0;  // hypervisor mode, idle excluded
  uint64_t idle = 0;
  uint64_t guest_kernel = 0;
  uint64_t guest_user = 0;
  uint64_t unmapped_guest = 0;  // guest samples of a VMM without a domain
};

class SampleRouter {
 public:
  SampleRouter(ProcessTable& processes, DomainRegistry& domains, uint16_t host_vcpus)
      : processes_(processes), domains_(domains), host_vcpus_(host_vcpus ? host_vcpus : 1) {}

  RoutedSample Route(const PerfSample& sample, uint32_t cpu);
  // Thread `tid` of process `pid` (kNoTask: look it up) as seen on `cpu`.
  SchedSubject RouteTask(uint32_t tid, uint32_t pid, uint32_t cpu);
  const RouterStats& stats() const { return stats_; }

  // The frames of the first context block of a perf callchain, without the leading ip.
  static std::span<const uint64_t> OwnFrames(std::span<const uint64_t> callchain, uint64_t ip);

 private:
  ProcessTable& processes_;
  DomainRegistry& domains_;
  uint16_t host_vcpus_;
  RouterStats stats_;
};

}  // namespace hvprof::linux_host
