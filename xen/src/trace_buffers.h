// Xen's trace buffers as an agent::SchedSource (docs/xen.md, Scheduling): libxenctrl's
// xc_tbuf_* set them up, libxenforeignmemory maps them (DOMID_XEN's frames), VIRQ_TBUF on an
// event channel of its own says when one is half full, and the agent drains them as xentrace
// does, through the pure decoder of trace_decoder.h.
#pragma once

#include <memory>

#include "hvprof/agent/sched_source.h"
#include "hvprof/base/result.h"

namespace hvprof::xen {

Result<std::unique_ptr<agent::SchedSource>> OpenXenTraceBuffers();

}  // namespace hvprof::xen
