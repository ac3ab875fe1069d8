#include <cstdlib>

#include "hvprof/base/files.h"
#include "hvprof/xen/xen_link.h"

namespace hvprof::xen {

std::string TrimmedLine(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

std::string XenRoot(const std::string& root) {
  if (!root.empty()) return root;
  const char* from_environment = std::getenv("HVPROF_XEN_ROOT");
  return from_environment != nullptr ? from_environment : "";
}

XenHost DetectXen(const std::string& root_or_empty) {
  const std::string root = XenRoot(root_or_empty);
  XenHost host;
  auto type = ReadFileToString(root + "/sys/hypervisor/type");
  if (!type) {
    host.reason = "no /sys/hypervisor/type: this kernel does not run on a hypervisor it recognises";
    return host;
  }
  const std::string name = TrimmedLine(type.value());
  if (name != "xen") {
    host.reason = fmt::format("/sys/hypervisor/type says '{}', not xen", name);
    return host;
  }
  host.is_xen = true;
  auto capabilities = ReadFileToString(root + "/proc/xen/capabilities");
  host.control_domain = capabilities && capabilities.value().find("control_d") != std::string::npos;
  return host;
}

}  // namespace hvprof::xen
