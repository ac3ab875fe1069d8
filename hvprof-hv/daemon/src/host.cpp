#include "host.h"

#include <array>

#include "linux_host.h"
#include "sim_host.h"

namespace hvprof::hv {

namespace {

template <typename Kind>
hvprof::Result<std::unique_ptr<Host>> Make(const DaemonOptions& options, MachineLock& lock) {
  HVPROF_TRY(host, Kind::Create(options, lock));
  return std::unique_ptr<Host>(std::move(host));
}

struct HostKind {
  std::string_view platform;
  hvprof::Result<std::unique_ptr<Host>> (*make)(const DaemonOptions&, MachineLock&);
};

// The platforms hvprof-hv hosts: the one place that knows them by name.
constexpr std::array kHosts{
    HostKind{"sim", &Make<SimHost>},
    HostKind{"linux", &Make<LinuxHost>},
};

}  // namespace

hvprof::Result<std::unique_ptr<Host>> Host::Create(const DaemonOptions& options, MachineLock& lock) {
  for (const HostKind& kind : kHosts) {
    if (kind.platform == options.platform) return kind.make(options, lock);
  }
  return hvprof::MakeError(hvprof::ErrorKind::kUnsupported,
                           "platform '{}' is not one hvprof-hv hosts: use --platform=sim (a simulated machine) or "
                           "--platform=linux (this host, through perf_event_open)",
                           options.platform);
}

}  // namespace hvprof::hv
