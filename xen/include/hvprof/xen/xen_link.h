// The `xen` HypervisorLink: Xen 4.17's built-in xenoprof, reached from user space through
// libxencall (the hypercall), libxenforeignmemory (the shared rings) and libxenevtchn
// (VIRQ_XENOPROF). See docs/xen.md.
//
// The library is linked against the real Xen libraries in the programs and against a fake of
// them (tests/xen-fake) in the tests, so its targets name neither.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "hvprof/agent/hypervisor_link.h"

namespace hvprof::xen {

// What this machine is, as far as profiling through Xen goes.
struct XenHost {
  bool is_xen = false;             // /sys/hypervisor/type says "xen"
  bool control_domain = false;     // /proc/xen/capabilities has "control_d" (dom0)
  std::string reason;              // why not, in words, when !is_xen
};

// Reads ROOT/sys/hypervisor/type and ROOT/proc/xen/capabilities. ROOT empty: $HVPROF_XEN_ROOT
// (for tests) if set, else the real ones. Needs none of the Xen libraries.
XenHost DetectXen(const std::string& root = "");
std::string XenRoot(const std::string& root);
// `text` without its trailing newline and spaces.
std::string TrimmedLine(std::string text);

// Checks that this is Xen (under `root`, as DetectXen; empty: $HVPROF_XEN_ROOT, else /) and
// opens the Xen libraries. The caller's domain id is 0 in dom0 and xenstore's "domid" in a
// guest; `domain`, where given, must agree with what Xen says.
Result<std::unique_ptr<agent::HypervisorLink>> ConnectXen(std::optional<hvpmu::DomainId> domain,
                                                          const std::string& root = "");

// An Error for Xen's refusal (errno `errnum`) of profiling op `op`, with what to do about it.
Error XenoprofRefusal(uint32_t op, int errnum);

// Xen's errno as the engine's refusal code, for the refusals the agents work around (EBUSY,
// EPERM, EEXIST, E2BIG, ENOMEM, EALREADY); nullopt for the rest (ENOSYS, ENODEV, ...), which
// end the operation with XenoprofRefusal's advice.
std::optional<hvpmu::ErrorCode> ErrorCodeOfErrno(int errnum);

}  // namespace hvprof::xen
