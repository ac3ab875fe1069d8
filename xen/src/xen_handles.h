// Owners of the Xen libraries' handles, shared by the xenoprof link (xen_link.cpp) and the
// trace buffers (trace_buffers.cpp).
#pragma once

#include <memory>

// The Xen library headers have no extern "C" of their own.
extern "C" {
#include <xenevtchn.h>
#include <xenforeignmemory.h>
}

namespace hvprof::xen {

struct MemoryClose {
  void operator()(xenforeignmemory_handle* h) const { xenforeignmemory_close(h); }
};
struct EvtchnClose {
  void operator()(xenevtchn_handle* h) const { xenevtchn_close(h); }
};
using MemoryHandle = std::unique_ptr<xenforeignmemory_handle, MemoryClose>;
using EvtchnHandle = std::unique_ptr<xenevtchn_handle, EvtchnClose>;

}  // namespace hvprof::xen
