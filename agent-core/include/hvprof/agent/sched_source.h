// Scheduling records that do not come through hvprof's rings: where the hypervisor records
// scheduling its own way (Xen's trace buffers, as xentrace reads them), the link hands the
// agent a SchedSource (HypervisorLink::OpenSchedSource). Where the engine records them, they come
// in its scheduling rings instead and there is no source.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hvpmu/abi/ring.h"
#include "hvprof/base/result.h"

namespace hvprof::agent {

struct SchedSourceStats {
  uint64_t records = 0;       // scheduling records handed on
  uint64_t platform_lost = 0; // records the platform says it lost (Xen's TRC_LOST_RECORDS)
  uint64_t malformed = 0;     // records cut short or unreadable
  uint64_t unknown = 0;       // records of ids this hvprof does not know
  uint64_t inconsistent = 0;  // state changes that disagree with what was read before
};

class SchedSource {
 public:
  virtual ~SchedSource() = default;
  // What records them, for session.json's sched.source ("xentrace").
  virtual std::string name() const = 0;
  // Starts recording; Stop stops it (what was recorded stays to be drained).
  virtual Result<void> Start() = 0;
  virtual Result<void> Stop() = 0;
  // Hands on every record recorded since the last drain.
  virtual void Drain(const std::function<void(const hvpmu::ring::SchedRecord&)>& on_sched) = 0;
  // Readable when records wait (-1: none; the agent's poll timer drains anyway); cleared by Drain.
  virtual int NotificationFd() const = 0;
  virtual SchedSourceStats stats() const = 0;
  // What the user should know of how it records (shared settings it changed...).
  virtual std::vector<std::string> notes() const = 0;
};

}  // namespace hvprof::agent
