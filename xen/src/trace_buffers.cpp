#include "trace_buffers.h"

#include <poll.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "hvprof/xen/trace_decoder.h"
#include "xen_handles.h"
#include "hvprof/xen/xenctrl_subset.h"
#include "hvpmu/abi/xen_trace.h"

namespace hvprof::xen {

namespace xt = hvpmu::xentrace;

namespace {

// Pages per CPU asked for when Xen has no buffers yet (xentrace's default is 32): 256 KiB, about
// 16000 scheduling records a CPU between two drains.
constexpr unsigned long kPagesPerCpu = 64;

struct InterfaceClose {
  void operator()(xc_interface* h) const { xc_interface_close(h); }
};

// One foreign mapping of `pages` frames, unmapped when it goes.
class ForeignMapping {
 public:
  ForeignMapping(xenforeignmemory_handle* handle, void* address, size_t pages)
      : handle_(handle), address_(address), pages_(pages) {}
  ~ForeignMapping() {
    if (address_ != nullptr) xenforeignmemory_unmap(handle_, address_, pages_);
  }
  ForeignMapping(const ForeignMapping&) = delete;
  ForeignMapping& operator=(const ForeignMapping&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(address_); }

 private:
  xenforeignmemory_handle* handle_;
  void* address_;
  size_t pages_;
};

Result<std::unique_ptr<ForeignMapping>> MapFrames(xenforeignmemory_handle* handle, int prot,
                                                  const std::vector<xen_pfn_t>& frames, const char* what) {
  std::vector<int> errors(frames.size(), 0);
  void* address = xenforeignmemory_map(handle, xt::kDomidXen, prot, frames.size(), frames.data(), errors.data());
  if (address == nullptr) {
    return ErrnoError(errno, fmt::format("mapping {} (xenforeignmemory_map of {} of Xen's frames)", what, frames.size()));
  }
  auto mapping = std::make_unique<ForeignMapping>(handle, address, frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    if (errors[i] != 0) {
      return ErrnoError(-errors[i], fmt::format("mapping {}: frame {:#x} (page {})", what, frames[i], i));
    }
  }
  return mapping;
}

class XenTraceBuffers final : public agent::SchedSource {
 public:
  XenTraceBuffers(std::unique_ptr<xc_interface, InterfaceClose> xc,
                  MemoryHandle memory,
                  EvtchnHandle events, const HvprofXenPhysinfo& info)
      : xc_(std::move(xc)), memory_(std::move(memory)), events_(std::move(events)), cpus_(info.max_cpu_id + 1),
        cpu_khz_(info.cpu_khz), decoder_(info.cpu_khz) {}
  ~XenTraceBuffers() override {
    if (enabled_) xc_tbuf_disable(xc_.get());
    if (bound_) xenevtchn_unbind(events_.get(), port_);
    buffers_.clear();
    t_info_.reset();
  }

  std::string name() const override { return "xentrace"; }

  Result<void> Start() override {
    // The mask first: Xen starts tracing as soon as it allocates the buffers.
    if (xc_tbuf_set_evt_mask(xc_.get(), xt::kHvprofEventMask) != 0) {
      return Refused("xc_tbuf_set_evt_mask", errno);
    }
    const int map_bytes = xc_get_cpumap_size(xc_.get());
    if (map_bytes > 0) {
      std::unique_ptr<uint8_t, decltype(&std::free)> map(xc_cpumap_alloc(xc_.get()), &std::free);
      if (map) {
        std::memset(map.get(), 0xFF, static_cast<size_t>(map_bytes));
        if (xc_tbuf_set_cpu_mask(xc_.get(), map.get()) != 0) return Refused("xc_tbuf_set_cpu_mask", errno);
      }
    }
    unsigned long t_info_mfn = 0;
    unsigned long t_info_bytes = 0;  // libxenctrl says size; it is t_info's, in bytes
    if (xc_tbuf_enable(xc_.get(), kPagesPerCpu, &t_info_mfn, &t_info_bytes) != 0) {
      return Refused("xc_tbuf_enable", errno);
    }
    enabled_ = true;
    if (!t_info_) HVPROF_TRYV(MapBuffers(t_info_mfn, t_info_bytes));
    // What an earlier reader left in the buffers is not this session's.
    for (Buffer& buffer : buffers_) {
      std::vector<uint8_t> stale;
      if (auto cons = CopyTraceWindow(buffer.mapping->data(), data_size_, &stale)) {
        ReleaseTraceWindow(buffer.mapping->data(), *cons);
      }
    }
    if (!bound_) {
      const xenevtchn_port_or_error_t port = xenevtchn_bind_virq(events_.get(), xt::kVirqTbuf);
      if (port < 0) return ErrnoError(errno, "xenevtchn_bind_virq(VIRQ_TBUF)");
      port_ = static_cast<evtchn_port_t>(port);
      bound_ = true;
    }
    return Ok();
  }

  Result<void> Stop() override {
    if (!enabled_) return Ok();
    enabled_ = false;
    if (xc_tbuf_disable(xc_.get()) != 0) return Refused("xc_tbuf_disable", errno);
    return Ok();
  }

  void Drain(const std::function<void(const hvpmu::ring::SchedRecord&)>& on_sched) override {
    ClearNotification();
    for (Buffer& buffer : buffers_) {
      window_.clear();
      const std::optional<uint32_t> cons = CopyTraceWindow(buffer.mapping->data(), data_size_, &window_);
      if (!cons) {
        ++bogus_;  // never written back: Xen would stop tracing
        continue;
      }
      if (window_.empty()) continue;
      // A record cut short would be Xen's bug: counted, and the window is given back whole.
      (void)decoder_.Decode(buffer.cpu, window_);
      ReleaseTraceWindow(buffer.mapping->data(), *cons);
    }
    decoder_.Flush([&](const hvpmu::ring::SchedRecord& record) {
      ++records_;
      on_sched(record);
    });
  }

  int NotificationFd() const override { return bound_ ? xenevtchn_fd(events_.get()) : -1; }

  agent::SchedSourceStats stats() const override {
    const TraceDecodeStats& decoded = decoder_.stats();
    agent::SchedSourceStats out;
    out.records = records_;
    out.platform_lost = decoded.lost_records;
    out.malformed = decoded.truncated + bogus_;
    out.unknown = decoded.unknown;
    out.inconsistent = decoded.inconsistent;
    return out;
  }

  std::vector<std::string> notes() const override {
    std::vector<std::string> out;
    out.push_back(fmt::format(
        "--sched: hvprof read Xen's trace buffers ({} pages on each of {} CPUs) and set Xen's global trace event "
        "mask to {:#010x} (scheduling) and its CPU mask to every CPU; Xen keeps them after hvprof stops. A xentrace "
        "running meanwhile competes for the same buffers (each record reaches one reader only), and changes the mask",
        tbuf_pages_, buffers_.size(), xt::kHvprofEventMask));
    out.push_back(fmt::format("--sched: scheduling times are Xen's TSC at {} kHz, not the samples' clock", cpu_khz_));
    return out;
  }

 private:
  struct Buffer {
    uint16_t cpu;
    std::unique_ptr<ForeignMapping> mapping;
  };

  Error Refused(const char* call, int errnum) const {
    const char* advice = errnum == EPERM || errnum == EACCES
                             ? "only dom0's root may drive Xen's trace buffers"
                             : errnum == EINVAL ? "Xen has no trace buffers and could not make them (boot Xen with "
                                                  "tbuf_size=PAGES, or see xl dmesg)"
                                                : "see docs/xen.md, Scheduling";
    return MakeError(errnum == EPERM || errnum == EACCES ? ErrorKind::kPermissionDenied : ErrorKind::kUnsupported,
                     "--sched: Xen refused {} ({}): {}", call, std::strerror(errnum), advice);
  }

  Result<void> MapBuffers(unsigned long t_info_mfn, unsigned long t_info_bytes) {
    const size_t t_info_pages = (t_info_bytes + xt::kPageSize - 1) / xt::kPageSize;
    if (t_info_pages == 0) return MakeError(ErrorKind::kProtocol, "--sched: Xen says its trace buffers' t_info is empty");
    std::vector<xen_pfn_t> frames(t_info_pages);
    for (size_t i = 0; i < t_info_pages; ++i) frames[i] = static_cast<xen_pfn_t>(t_info_mfn + i);
    HVPROF_TRY(t_info, MapFrames(memory_.get(), PROT_READ, frames, "Xen's trace buffer index (t_info)"));
    const uint8_t* index = t_info->data();
    const size_t words = t_info_pages * xt::kPageSize / 4;
    uint16_t pages = 0;
    std::memcpy(&pages, index, sizeof pages);
    if (pages == 0 || 2ull * xt::DataSize(pages) > UINT32_MAX) {
      return MakeError(ErrorKind::kProtocol, "--sched: Xen's trace buffers say {} pages a CPU", pages);
    }
    tbuf_pages_ = pages;
    data_size_ = xt::DataSize(pages);
    for (uint32_t cpu = 0; cpu < cpus_ && 2 + 2 * size_t{cpu} + 2 <= t_info_pages * xt::kPageSize; ++cpu) {
      uint16_t offset = 0;
      std::memcpy(&offset, index + 2 + 2 * size_t{cpu}, sizeof offset);
      if (offset == 0) continue;  // no buffer: an offline CPU
      if (size_t{offset} + pages > words) {
        return MakeError(ErrorKind::kProtocol, "--sched: CPU {}'s frame list runs past Xen's t_info", cpu);
      }
      std::vector<xen_pfn_t> list(pages);
      for (uint32_t page = 0; page < pages; ++page) {
        uint32_t mfn = 0;  // u32 words, whatever trace.h's comment says
        std::memcpy(&mfn, index + 4 * (size_t{offset} + page), sizeof mfn);
        list[page] = mfn;
      }
      HVPROF_TRY(mapping, MapFrames(memory_.get(), PROT_READ | PROT_WRITE, list,
                                    fmt::format("CPU {}'s trace buffer", cpu).c_str()));
      buffers_.push_back({static_cast<uint16_t>(cpu), std::move(mapping)});
    }
    if (buffers_.empty()) return MakeError(ErrorKind::kProtocol, "--sched: Xen's trace buffers list no CPU");
    t_info_ = std::move(t_info);
    return Ok();
  }

  void ClearNotification() {
    if (!bound_) return;
    pollfd fd{xenevtchn_fd(events_.get()), POLLIN, 0};
    while (::poll(&fd, 1, 0) > 0 && (fd.revents & POLLIN) != 0) {
      const xenevtchn_port_or_error_t port = xenevtchn_pending(events_.get());
      if (port < 0) break;
      xenevtchn_unmask(events_.get(), static_cast<evtchn_port_t>(port));
    }
  }

  std::unique_ptr<xc_interface, InterfaceClose> xc_;
  MemoryHandle memory_;
  EvtchnHandle events_;
  uint32_t cpus_;
  uint32_t cpu_khz_;
  TraceDecoder decoder_;
  std::unique_ptr<ForeignMapping> t_info_;
  std::vector<Buffer> buffers_;
  uint32_t tbuf_pages_ = 0;
  uint32_t data_size_ = 0;
  bool enabled_ = false;
  bool bound_ = false;
  evtchn_port_t port_ = 0;
  uint64_t records_ = 0;
  uint64_t bogus_ = 0;
  std::vector<uint8_t> window_;
};

}  // namespace

Result<std::unique_ptr<agent::SchedSource>> OpenXenTraceBuffers() {
  std::unique_ptr<xc_interface, InterfaceClose> xc(xc_interface_open(nullptr, nullptr, 0));
  if (!xc) return ErrnoError(errno, "--sched: xc_interface_open (/dev/xen/privcmd): run as root in dom0");
  HvprofXenPhysinfo info{};
  if (xc_physinfo(xc.get(), &info) != 0) return ErrnoError(errno, "--sched: xc_physinfo");
  if (info.cpu_khz == 0) return MakeError(ErrorKind::kProtocol, "--sched: Xen says its TSC runs at 0 kHz");
  MemoryHandle memory(xenforeignmemory_open(nullptr, 0));
  if (!memory) return ErrnoError(errno, "--sched: xenforeignmemory_open");
  EvtchnHandle events(xenevtchn_open(nullptr, 0));
  if (!events) return ErrnoError(errno, "--sched: xenevtchn_open (/dev/xen/evtchn)");
  return std::unique_ptr<agent::SchedSource>(
      std::make_unique<XenTraceBuffers>(std::move(xc), std::move(memory), std::move(events), info));
}

}  // namespace hvprof::xen
