#include "hvprof/linux/sample_router.h"

#include <algorithm>

#include "hvpmu/abi/ring.h"

namespace hvprof::linux_host {

using hvpmu::DomainId;
using hvpmu::DomainType;
using hvpmu::InterruptedContext;
using hvpmu::kDomainIdle;
using hvpmu::kDomainInvalid;
namespace ring = hvpmu::ring;

namespace {
constexpr uint64_t kKernelHalf = 0xFFFF800000000000ull;
}

std::span<const uint64_t> SampleRouter::OwnFrames(std::span<const uint64_t> callchain,
                                                  uint64_t ip) {
  size_t begin = 0;
  if (begin < callchain.size() && callchain[begin] >= kContextMax) ++begin;  // the context
  size_t end = begin;
  while (end < callchain.size() && callchain[end] < kContextMax) ++end;
  if (begin < end && callchain[begin] == ip) ++begin;
  return callchain.subspan(begin, end - begin);
}

RoutedSample SampleRouter::Route(const PerfSample& sample, uint32_t cpu) {
  RoutedSample routed;
  InterruptedContext& context = routed.context;
  context.ip = sample.ip;
  context.pid = sample.pid;
  context.tid = sample.tid;
  context.type = DomainType::kPv64;
  const uint16_t cpumode = sample.misc & kMiscCpumodeMask;

  if (cpumode == kMiscGuestKernel || cpumode == kMiscGuestUser) {
    const bool kernel = cpumode == kMiscGuestKernel;
    context.type = DomainType::kHvm;
    context.in_hypervisor = false;
    context.cpl = kernel ? 0 : 3;
    context.hvm_long_mode = true;
    context.pid = ring::kNoPid;
    context.tid = ring::kNoPid;
    context.domain = domains_.GuestDomainFor(sample.pid, true);
    if (context.domain == kDomainInvalid) {
      ++stats_.unmapped_guest;
    } else {
      context.vcpu = processes_.VcpuOf(sample.pid, sample.tid);
      domains_.NoteGuestVcpus(context.domain, static_cast<uint16_t>(context.vcpu + 1));
    }
    ++(kernel ? stats_.guest_kernel : stats_.guest_user);
    routed.frames = OwnFrames(sample.callchain, sample.ip);
    return routed;
  }

  const bool kernel = cpumode == kMiscKernel || cpumode == kMiscHypervisor ||
                      (cpumode == kMiscCpumodeUnknown && sample.ip >= kKernelHalf);
  // The host kernel is the kernel of the process's domain (dom0 for the host's own), in the
  // terms the engine classifies modes by: a 64-bit PV kernel, which runs in ring 3 with its
  // vCPU's kernel flag set. Two exceptions, where it does the hypervisor's work: the idle task,
  // and a KVM guest's vCPU thread (below).
  context.in_hypervisor = false;
  context.cpl = 3;
  context.pv_kernel_mode = kernel;
  if (kernel && sample.pid == 0) {
    context.domain = kDomainIdle;
    context.vcpu = static_cast<uint16_t>(cpu % host_vcpus_);
    context.in_hypervisor = true;
    ++stats_.idle;
  } else {
    Process& process = processes_.Get(sample.pid);
    context.domain = process.domain;
    context.vcpu = static_cast<uint16_t>(cpu % host_vcpus_);
    context.address_space = sample.pid;
    if (kernel) {
      ++stats_.host_kernel;
      const DomainId guest = domains_.GuestDomainFor(sample.pid, false);
      if (guest != kDomainInvalid && processes_.IsVcpuThread(sample.pid, sample.tid)) {
        // KVM running the guest (exits, emulation): the guest's hypervisor time, as Xen's.
        context.domain = guest;
        context.type = DomainType::kHvm;
        context.in_hypervisor = true;
        context.cpl = 0;
        context.vcpu = processes_.VcpuOf(sample.pid, sample.tid);
        domains_.NoteGuestVcpus(guest, static_cast<uint16_t>(context.vcpu + 1));
      }
    } else {
      ++stats_.host_user;
    }
  }
  routed.frames = OwnFrames(sample.callchain, sample.ip);
  return routed;
}

SchedSubject SampleRouter::RouteTask(uint32_t tid, uint32_t pid, uint32_t cpu) {
  SchedSubject subject;
  if (tid == 0) {  // the CPU's idle task (every CPU's is pid 0)
    subject.domain = kDomainIdle;
    subject.vcpu = static_cast<uint16_t>(cpu);
    return subject;
  }
  if (pid == kNoTask || pid == 0) pid = processes_.TgidOf(tid);
  const DomainId guest = domains_.GuestDomainFor(pid, false);
  if (guest != kDomainInvalid && processes_.IsVcpuThread(pid, tid)) {
    subject.domain = guest;
    subject.vcpu = processes_.VcpuOf(pid, tid);
    domains_.NoteGuestVcpus(guest, static_cast<uint16_t>(subject.vcpu + 1));
    return subject;
  }
  subject.domain = processes_.Get(pid).domain;
  subject.vcpu = static_cast<uint16_t>(cpu % host_vcpus_);
  subject.pid = pid;
  subject.tid = tid;
  subject.task = true;
  processes_.NoteTask(pid, tid);
  return subject;
}

}  // namespace hvprof::linux_host
