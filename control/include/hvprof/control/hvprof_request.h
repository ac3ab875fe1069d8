// hvprof's command line, read into a typed request: one action (opcontrol's), `hvprof run`, or
// `hvprof archive`, with the setup it carries. Every rule that refuses a combination lives here
// (tests/unit/hvprof_request_test.cpp); RunHvprof (hvprof_command.h) carries the request out.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/control/archive_command.h"
#include "hvprof/control/run.h"
#include "hvprof/setup/setup.h"

namespace hvprof::control {

enum class HvprofKind : uint8_t {
  kHelp,     // --help: HvprofUsage(), exit 0
  kUsage,    // no arguments at all: HvprofUsage(), exit 2
  kVersion,  // --version
  kAction,   // one of HvprofAction
  kRun,      // hvprof run (or record) [options] [--] CMD...
  kArchive,  // hvprof archive [options] SESSION -o FILE
  kArchiveHelp,
  kRunHelp,     // hvprof run --help: HvprofRunUsage()
  kActionHelp,  // hvprof --ACTION --help: HvprofActionUsage(action)
};

// The actions, one per call.
enum class HvprofAction : uint8_t {
  kStartDaemon,
  kReload,
  kStart,
  kStop,
  kDump,
  kShutdown,
  kReset,
  kSave,
  kStatus,
  kListEvents,
  kRunSim,
  kPublish,
};
// "--start-daemon", "--start", ...
std::string_view HvprofActionOption(HvprofAction action);

struct HvprofRequest {
  HvprofKind kind = HvprofKind::kAction;
  HvprofAction action = HvprofAction::kStatus;
  // The setup: every action's session root, domain and run directory, and --start-daemon's
  // (and run's) platform, events, rings, domains...
  setup::SetupOptions setup;
  std::string scenario;      // sim: the hvprof-hv started for it
  std::string domain_map;    // linux: the hvprof-hv started for it
  std::string save_name;     // --save
  uint64_t run_sim_ns = 0;   // --run-sim
  std::string cpu_type;      // --list-events offline
  RunOptions run;            // kRun: all of the above and the workload
  std::string run_word = "run";  // kRun: as the user called it, run or record (perf's word)
  ArchiveRequest archive;    // kArchive
};

// What hvprof asks of the machine while it reads its command line: which platform serves when
// none is given, whether this is a Xen guest (its commands need --domain), and where hvprof's
// other programs are. The main gives the real ones; tests give their own.
struct HvprofEnvironment {
  bool xen_host = false;   // this machine runs on Xen
  bool xen_guest = false;  // ... and is not its control domain
  std::string program_dir; // hvprofd and hvprof-hv are here
  // Says what was decided for the user as it is decided, before any refusal: the platform
  // chosen when none is given ("--platform=X: why"). Unset: nothing is said.
  std::function<void(const std::string&)> say;
};

// Reads hvprof's arguments (without the program's name). A combination it cannot honour is
// refused (kInvalidArgument) with what to do instead: exit status 2.
Result<HvprofRequest> ParseHvprofRequest(const std::vector<std::string>& args, const HvprofEnvironment& environment);

// --help's text, and hvprof run --help's, hvprof --ACTION --help's and hvprof archive --help's.
std::string HvprofUsage();
std::string HvprofRunUsage();
std::string HvprofActionUsage(HvprofAction action);
std::string HvprofArchiveUsage();

}  // namespace hvprof::control
