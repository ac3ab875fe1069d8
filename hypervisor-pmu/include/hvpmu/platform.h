// The platform interface: everything the engine needs from the machine it runs on.
//
// A real hypervisor implements it with rdmsr/wrmsr, its LAPIC, its domain table and its page
// allocator; hvprof-hv implements it on the simulated machine (hosted/sim) and on Linux
// (hosted/linux); tests implement it with fakes (hosted/fake). Calls marked "NMI context" may
// run inside the sample path and must neither block nor allocate.
#pragma once

#include <cstdint>

#include "hvpmu/abi/ops.h"

namespace hvpmu {

struct CpuidResult {
  uint32_t eax;
  uint32_t ebx;
  uint32_t ecx;
  uint32_t edx;
};

enum class DomainType : uint8_t {
  kPv64,  // 64-bit PV: the guest kernel runs at CPL 3 with the kernel-mode flag set
  kPv32,  // 32-bit PV: the guest kernel runs at CPL 1
  kHvm,   // hardware-virtualized (VMX/SVM): the guest kernel runs at CPL 0 in non-root mode
};

struct DomainInfo {
  uint16_t num_vcpus;
  DomainType type;
  bool is_hardware_domain;  // dom0: may become the primary profiler
};

// The interrupted state on a CPU when its PMI arrived, as raw facts; the engine classifies
// the mode from them (ClassifyMode, engine.h).
struct InterruptedContext {
  DomainId domain;    // the domain whose vCPU is current (kDomainIdle in the idle loop)
  uint16_t vcpu;
  DomainType type;
  bool in_hypervisor;   // the frame is a hypervisor frame, not a guest frame
  uint8_t cpl;          // CS.RPL (PV) or SS.DPL (HVM) of the interrupted guest frame
  bool pv_kernel_mode;  // PV: the vCPU's kernel-mode flag
  bool hvm_real_mode;   // HVM: CR0.PE clear
  bool hvm_vm86;        // HVM: EFLAGS.VM set
  bool hvm_long_mode;   // HVM: 64-bit frames for the backtrace walk
  uint64_t ip;
  uint64_t frame_pointer;
  uint64_t address_space;  // CR3 or another tag, 0 when unknown
  uint32_t pid;            // ring::kNoPid when the platform does not know
  uint32_t tid;
};

struct SharedRegion {
  void* base = nullptr;
  uint64_t bytes = 0;
  uint64_t handle = 0;  // what the consumer needs to map it (a machine address, a memfd id)
};

class Platform {
 public:
  // --- the machine
  virtual uint32_t NumCpus() = 0;
  virtual CpuidResult Cpuid(uint32_t cpu, uint32_t leaf, uint32_t subleaf) = 0;
  // MSR access on a given CPU. Returns false if the access faulted.
  virtual bool ReadMsr(uint32_t cpu, uint32_t msr, uint64_t* value) = 0;  // NMI context
  virtual bool WriteMsr(uint32_t cpu, uint32_t msr, uint64_t value) = 0;  // NMI context
  // Routes the CPU's performance-counter interrupt as an NMI (true) or masks it (false).
  virtual void SetPmiRouting(uint32_t cpu, bool deliver_as_nmi) = 0;
  // Re-arms the PMI after handling one (Intel CPUs mask the LVT entry on delivery).
  virtual void RearmPmi(uint32_t cpu) = 0;  // NMI context
  virtual uint64_t NowNs() = 0;             // NMI context

  // --- domains
  virtual bool GetDomainInfo(DomainId domain, DomainInfo* info) = 0;
  // Keeps a listed domain from being destroyed while the engine refers to it.
  virtual bool AcquireDomain(DomainId domain) = 0;
  virtual void ReleaseDomain(DomainId domain) = 0;
  // Exclusive use of the PMU against other users (a vPMU). Returns false if it is taken.
  virtual bool ClaimPmu() = 0;
  virtual void ReleasePmu() = 0;

  // --- the sample path (NMI context)
  virtual bool GetInterruptedContext(uint32_t cpu, InterruptedContext* context) = 0;
  // Copies guest (or, for kDomainXen, hypervisor) memory without faulting. False on failure.
  virtual bool ReadGuestMemory(DomainId domain, uint16_t vcpu, uint64_t address, void* buffer,
                               uint32_t bytes) = 0;
  // Tells the consumer of ring `ring_index` of `owner`'s region that it has work.
  virtual void Notify(DomainId consumer, DomainId owner, uint32_t ring_index) = 0;

  // --- shared memory (never called from the sample path)
  // Allocates zeroed memory for `owner`'s rings.
  virtual bool AllocateShared(DomainId owner, uint64_t bytes, SharedRegion* region) = 0;
  virtual void FreeShared(SharedRegion* region) = 0;
  // Makes the region mappable by `consumer`. Returns false if it is still mapped from an
  // earlier share (the caller reports Busy).
  virtual bool ShareWith(const SharedRegion& region, DomainId consumer) = 0;
  virtual void Unshare(const SharedRegion& region, DomainId consumer) = 0;
  // Returns once no CPU is inside the sample path, so routing changes and frees are safe.
  virtual void QuiesceSamplers() = 0;

  // Whether GetInterruptedContext names the guest's task (pid, tid) where there is one: a host
  // that runs the guests' tasks itself (Linux, the simulator) does; Xen, which knows vCPUs and
  // not the guest kernel's tasks, does not (the status op says which: kStatusNamesTasks).
  virtual bool NamesTasks() { return false; }

  // --- the sampling timer (TimerSource, timer_source.h), for hosts without a usable PMU.
  // Never called from the sample path. Only a host that offers a TimerSource needs them.
  // Starts, on every CPU, an interrupt every `period_ns` of that CPU's time whose handler calls
  // Engine::HandlePmi(cpu) with the interrupted context at hand (GetInterruptedContext), as a
  // PMI would. The rate is fixed: a late tick is not made up for. Returns false if the host has
  // no such timer (the default), and then no sample ever arrives.
  virtual bool StartSampleTimer(uint64_t period_ns) {
    (void)period_ns;
    return false;
  }
  // Stops it on every CPU. A tick already under way may still call HandlePmi; the engine
  // calls QuiesceSamplers afterwards.
  virtual void StopSampleTimer() {}

 protected:
  ~Platform() = default;
};

}  // namespace hvpmu
