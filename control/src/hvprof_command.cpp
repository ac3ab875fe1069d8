#include "hvprof/control/hvprof_command.h"

#include "hvprof/base/escape.h"
#include "hvprof/base/version.h"
#include "hvprof/control/archive_command.h"
#include "hvprof/control/commands.h"
#include "hvprof/control/hypervisor.h"
#include "hvprof/control/run.h"

namespace hvprof::control {

namespace {

int RunArchive(const ArchiveRequest& request, std::ostream& err) {
  auto outcome = Archive(request);
  if (!outcome) {
    // One line per image at fault, each escaped (the paths come from the session).
    std::string_view message = outcome.error().message();
    err << "hvprof archive: ";
    for (size_t end = message.find('\n');; end = message.find('\n')) {
      err << EscapeForTerminal(message.substr(0, end)) << "\n";
      if (end == std::string_view::npos) break;
      message.remove_prefix(end + 1);
    }
    return 1;
  }
  for (const std::string& note : outcome.value().warnings) err << "hvprof archive: note: " << EscapeForTerminal(note) << "\n";
  err << EscapeForTerminal(outcome.value().message) << "\n";
  return 0;
}

// `word`: run or record, as the user called it; messages name the command so.
int RunWorkload(const RunOptions& options, const std::string& word, std::ostream& out, std::ostream& err) {
  const std::string name = "hvprof " + word + ": ";
  auto outcome = RunProfile(options, [&](const std::string& text) { err << name << text << "\n"; });
  if (!outcome) {
    err << name << outcome.error().message() << "\n";
    return 1;
  }
  out << outcome.value().message << "\n" << std::flush;
  for (const std::string& warning : outcome.value().warnings) {
    err << name << "warning: " << EscapeForTerminal(warning) << "\n";
  }
  return outcome.value().exit_code;
}

Result<Outcome> RunAction(const HvprofRequest& request) {
  const store::SessionPaths paths{request.setup.session_root};
  switch (request.action) {
    case HvprofAction::kStartDaemon: {
      HypervisorSpec own;
      own.hv_path = request.run.hv_path;
      own.platform = request.setup.platform;
      own.scenario = request.scenario;
      own.domain_map = request.domain_map;
      own.log_path = paths.root + "/hvprof-hv.log";
      return StartDaemon(request.setup, request.run.hvprofd_path, &own);
    }
    case HvprofAction::kReload: return Reload(request.setup);
    case HvprofAction::kStart: return Start(paths);
    case HvprofAction::kStop: return Stop(paths);
    case HvprofAction::kDump: return Dump(paths);
    case HvprofAction::kShutdown: return Shutdown(paths);
    case HvprofAction::kReset: return Reset(paths);
    case HvprofAction::kSave: return Save(paths, request.save_name);
    case HvprofAction::kStatus: return Status(paths);
    case HvprofAction::kPublish: return Publish(paths);
    case HvprofAction::kListEvents:
      return ListEvents({.cpu_type = request.cpu_type,
                         .platform = request.setup.platform,
                         .hv_run_dir = request.setup.hv_run_dir,
                         .hv_path = request.run.hv_path});
    case HvprofAction::kRunSim: return RunSim(paths, request.run_sim_ns);
  }
  return Error(ErrorKind::kInvalidArgument, "no action given");
}

}  // namespace

int RunHvprof(const HvprofRequest& request, std::ostream& out, std::ostream& err) {
  switch (request.kind) {
    case HvprofKind::kHelp: out << HvprofUsage() << "\n"; return 0;
    case HvprofKind::kUsage: out << HvprofUsage() << "\n"; return 2;
    case HvprofKind::kVersion: out << "hvprof (hvprof) " << kVersion << "\n"; return 0;
    case HvprofKind::kArchiveHelp: out << HvprofArchiveUsage() << "\n"; return 0;
    case HvprofKind::kRunHelp: out << HvprofRunUsage() << "\n"; return 0;
    case HvprofKind::kActionHelp: out << HvprofActionUsage(request.action) << "\n"; return 0;
    case HvprofKind::kArchive: return RunArchive(request.archive, err);
    case HvprofKind::kRun: return RunWorkload(request.run, request.run_word, out, err);
    case HvprofKind::kAction: break;
  }
  auto outcome = RunAction(request);
  if (!outcome) {
    err << "hvprof: " << outcome.error().message() << "\n";
    return 1;
  }
  if (!outcome.value().message.empty()) out << outcome.value().message << "\n";
  return outcome.value().exit_code;
}

}  // namespace hvprof::control
