#include <unistd.h>

#include <cstdlib>

#include "hvpmu/hosted/protocol.h"

namespace hvpmu::hosted {

std::string DefaultRunDir() {
  if (::geteuid() == 0) return "/run/hvprof";
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime) {
    return std::string(runtime) + "/hvprof";
  }
  return "/tmp/hvprof-" + std::to_string(::geteuid());
}

std::string DomainSocketPath(const std::string& run_dir, DomainId domain) {
  return (run_dir.empty() ? DefaultRunDir() : run_dir) + "/domain-" + std::to_string(domain) + ".sock";
}

}  // namespace hvpmu::hosted
