#include <unistd.h>

#include <cstdlib>

#include "hvprof/hv/protocol.h"

namespace hvprof::hv {

using hvpmu::DomainId;

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

std::string AgentLockPath(const std::string& socket_path) { return socket_path + ".agent.lock"; }

}  // namespace hvprof::hv
