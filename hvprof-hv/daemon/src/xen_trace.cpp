#include "xen_trace.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "hvprof/base/log.h"

namespace hvprof::hv {

namespace {

// The frame number of the memfd's first page: any value a real machine could have; the fake
// maps frame f at (f - kFirstMfn) pages into the memfd.
constexpr uint64_t kFirstMfn = 0x12340;
// Xen's calculate_tbuf_size lowers a larger request so that the offsets fit; the sim's limit.
constexpr uint32_t kMaxPages = 1024;

}  // namespace

SimXenTrace::SimXenTrace(sim::SimMachine& machine) : machine_(machine) {}

SimXenTrace::~SimXenTrace() { machine_.SetSchedSink({}); }

Result<void> SimXenTrace::Allocate(uint32_t pages) {
  layout_ = sim::XenTraceLayout::For(machine_.scenario().machine.cpus, std::min(pages, kMaxPages), kFirstMfn);
  ScopedFd memory(::memfd_create("hvprof-xen-tbuf", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memory.valid()) return ErrnoError(errno, "memfd_create for Xen's trace buffers");
  if (::ftruncate(memory.get(), static_cast<off_t>(layout_.bytes())) != 0) {
    return ErrnoError(errno, "sizing Xen's trace buffers");
  }
  ::fcntl(memory.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  HVPROF_TRY(mapping, ScopedMmap::MapShared(memory.get(), layout_.bytes(), PROT_READ | PROT_WRITE));
  ScopedFd notify(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!notify.valid()) return ErrnoError(errno, "eventfd for VIRQ_TBUF");
  auto* base = static_cast<uint8_t*>(mapping.data());
  layout_.Format(base);
  memory_ = std::move(memory);
  mapping_ = std::move(mapping);
  notify_ = std::move(notify);
  writer_ = std::make_unique<sim::XenTraceWriter>(base, layout_);
  writer_->set_event_mask(event_mask_);
  writer_->set_cpu_mask(cpu_mask_);
  machine_.SetSchedSink([this](uint32_t cpu, uint64_t tsc, const hvpmu::ring::SchedRecord& record) {
    if (writer_->TraceSched(cpu, tsc, record)) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(notify_.get(), &one, sizeof one);  // VIRQ_TBUF
    }
  });
  Log(LogLevel::kInfo, "Xen trace buffers: {} pages on each of {} CPUs", layout_.pages_per_cpu, layout_.cpus);
  return Ok();
}

XenTraceReply SimXenTrace::Info() const {
  XenTraceReply reply{};
  reply.evt_mask = event_mask_;
  reply.num_cpus = machine_.scenario().machine.cpus;
  reply.cpu_khz = machine_.scenario().machine.mhz * 1000;
  if (writer_) {
    reply.tbuf_pages = layout_.pages_per_cpu;
    reply.t_info_mfn = layout_.first_mfn;
    reply.t_info_pages = layout_.t_info_pages;
    reply.first_mfn = layout_.first_mfn;
    reply.bytes = layout_.bytes();
    reply.enabled = writer_->enabled() ? 1 : 0;
  }
  return reply;
}

XenTraceReply SimXenTrace::Command(const XenTraceRequest& request) {
  int xen_errno = 0;
  switch (static_cast<XenTraceCommand>(request.command)) {
    case XenTraceCommand::kGetInfo:
      break;
    case XenTraceCommand::kSetCpuMask:
      cpu_mask_ = request.argument;
      if (writer_) writer_->set_cpu_mask(cpu_mask_);
      break;
    case XenTraceCommand::kSetEvtMask:
      event_mask_ = static_cast<uint32_t>(request.argument);
      if (writer_) writer_->set_event_mask(event_mask_);
      break;
    case XenTraceCommand::kSetSize:
      // One-shot: buffers are never freed nor resized (another size: EINVAL; the same: EBUSY).
      if (writer_) {
        xen_errno = request.argument == layout_.pages_per_cpu ? EBUSY : EINVAL;
      } else if (request.argument == 0) {
        xen_errno = EINVAL;
      } else if (auto allocated = Allocate(static_cast<uint32_t>(std::min<uint64_t>(request.argument, kMaxPages)));
                 !allocated) {
        Log(LogLevel::kError, "{}", allocated.error().message());
        xen_errno = ENOMEM;
      } else {
        writer_->set_enabled(true);  // alloc_trace_bufs sets tb_init_done
      }
      break;
    case XenTraceCommand::kEnable:
      if (!writer_) {
        xen_errno = EINVAL;  // no size yet
      } else {
        writer_->set_enabled(true);
      }
      break;
    case XenTraceCommand::kDisable:
      if (writer_) writer_->set_enabled(false);
      break;
    default:
      xen_errno = EINVAL;
      break;
  }
  XenTraceReply reply = Info();
  reply.xen_errno = xen_errno;
  return reply;
}

}  // namespace hvprof::hv
