// The hvprof-hv that the sim and linux platforms need (xen has its own hypervisor): found
// serving a run directory, or started by hvprof, either for one `hvprof run` (it ends with the
// run) or for a daemon of `hvprof --start-daemon` (it ends at `hvprof --shutdown`).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "hvprof/base/result.h"
#include "hvprof/store/session.h"

namespace hvprof::control {

// Whether `platform` runs under hvprof-hv (sim, linux) rather than a real hypervisor (xen).
bool NeedsHostedHypervisor(std::string_view platform);

// `run_dir`, or hvprof-hv's default run directory when it is empty.
std::string RunDirOrDefault(const std::string& run_dir);

// The platform of the hvprof-hv serving `run_dir` (empty: its default) to `domain`, or empty
// when none answers there.
std::string ServingPlatform(const std::string& run_dir, uint16_t domain = 0);

// The session directory of the hvprofd that drives the profiler of `domain` on the hvprof-hv
// serving `run_dir` (it holds that domain's agent lock), or empty when none does.
std::string ProfilerDriver(const std::string& run_dir, uint16_t domain = 0);

// --platform when none is given: the platform of the hvprof-hv serving `run_dir`, else xen on a
// Xen host, else linux (this host). `why` says how it was chosen, in words for the user.
struct PlatformChoice {
  std::string platform;
  std::string why;
};
PlatformChoice ChoosePlatform(const std::string& run_dir, uint16_t domain, bool xen_host);

// What an hvprof-hv of hvprof's own runs.
struct HypervisorSpec {
  std::string hv_path;          // the hvprof-hv program
  std::string platform;         // sim or linux
  std::string scenario;         // sim: a file or a scenario's name (hvprof-hv --scenario); empty: its default
  std::string domain_map;       // linux: hvprof-hv --domain-map
  bool advance_on_demand = false;  // sim: --speed=max (simulated time passes only while dom0 runs it)
  std::string log_path;         // its output (ScopedHypervisor: empty puts it in its run directory)
};

// An hvprof-hv started for one run, in a private run directory; it is ended (SIGTERM) with this
// object, and with this process if that dies first.
class ScopedHypervisor {
 public:
  static Result<std::unique_ptr<ScopedHypervisor>> Start(const HypervisorSpec& spec);
  ~ScopedHypervisor();
  ScopedHypervisor(const ScopedHypervisor&) = delete;
  ScopedHypervisor& operator=(const ScopedHypervisor&) = delete;
  const std::string& run_dir() const { return run_dir_; }

 private:
  explicit ScopedHypervisor(std::string run_dir) : run_dir_(std::move(run_dir)) {}
  std::string run_dir_;
  int pid_ = 0;
  bool keep_run_dir_ = false;  // it failed to start, and its log is in there
};

// An hvprof-hv started for the daemon of `paths`: in `run_dir` (empty: its default), detached
// from this process, and recorded in the session root (kOwnHypervisorFile) so that
// StopOwnHypervisor ends it. Returns its pid.
Result<int> StartOwnHypervisor(const HypervisorSpec& spec, const std::string& run_dir,
                               const store::SessionPaths& paths);
// Ends the hvprof-hv that StartOwnHypervisor started for `paths`, if any: SIGTERM, then SIGKILL
// after 5 s. Returns what it did, for the user ("" when there was none).
Result<std::string> StopOwnHypervisor(const store::SessionPaths& paths);
// The record of it, in the session root.
inline constexpr const char* kOwnHypervisorFile = "hvprof-hv.json";

}  // namespace hvprof::control
