// The simulated machine's Xen 4.17 trace buffers (kXenTrace): what Xen's tb_control and
// alloc_trace_bufs keep (the size, once; the masks; on or off), the memory in a memfd laid out
// as Xen shares it (sim/xen_trace_writer.h), and VIRQ_TBUF as an eventfd. The machine's
// scheduling records reach the producer through SimMachine::SetSchedSink while the buffers
// exist. Called with the machine stopped (the daemon's machine lock held).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "hvprof/base/result.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/hv/protocol.h"
#include "hvprof/sim/machine.h"
#include "hvprof/sim/xen_trace_writer.h"

namespace hvprof::hv {

class SimXenTrace {
 public:
  explicit SimXenTrace(sim::SimMachine& machine);
  ~SimXenTrace();
  SimXenTrace(const SimXenTrace&) = delete;
  SimXenTrace& operator=(const SimXenTrace&) = delete;

  // One XEN_SYSCTL_tbuf_op; the reply says what Xen would (xen_errno) and where the buffers are.
  XenTraceReply Command(const XenTraceRequest& request);
  // The memfd and the eventfd, once the buffers exist; -1 before.
  int memory_fd() const { return memory_.valid() ? memory_.get() : -1; }
  int notify_fd() const { return notify_.valid() ? notify_.get() : -1; }

 private:
  Result<void> Allocate(uint32_t pages);
  XenTraceReply Info() const;

  sim::SimMachine& machine_;
  sim::XenTraceLayout layout_{};
  ScopedFd memory_;
  ScopedMmap mapping_;
  ScopedFd notify_;
  std::unique_ptr<sim::XenTraceWriter> writer_;
  uint32_t event_mask_ = 0x0FFFF000;  // TRC_ALL, as Xen boots
  uint64_t cpu_mask_ = ~uint64_t{0};
};

}  // namespace hvprof::hv
