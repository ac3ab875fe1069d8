#include "run_support.h"

#include <catch2/catch.hpp>

#include "hvprof/linux/linux_machine.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/session.h"
#include "live_support.h"

namespace hvprof::testing {

using Json = nlohmann::json;

std::vector<std::string> LinuxRun::Command(std::vector<std::string> args) {
  std::vector<std::string> argv = {Binary("hvprof"), "run", "--platform=linux", "--run-dir=" + dir_.File("run"),
                                   "--session-dir=" + dir_.File("sessions")};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

CommandResult LinuxRun::Run(std::vector<std::string> args) {
  CommandResult result = RunProgram(Command(std::move(args)));
  INFO(result.out << result.err);
  REQUIRE(result.status == 0);
  return result;
}

CommandResult LinuxRun::ReportOn(std::vector<std::string> args) {
  std::vector<std::string> argv = {Binary("hvprof-report"), "--session-dir=" + dir_.File("sessions")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv);
}

CommandResult LinuxRun::SessionReport(std::vector<std::string> args) {
  const auto saved = hvprof::store::NewestSavedSession({dir_.File("sessions")});
  REQUIRE(saved.has_value());
  std::vector<std::string> argv = {Binary("hvprof-report"), "--session-dir=" + dir_.File("sessions"), *saved};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult result = RunProgram(argv);
  INFO(result.err);
  REQUIRE((result.status == 0 || result.status == 3));  // 3: some other image on the host lacks symbols
  return result;
}

Json LinuxRun::Report(std::vector<std::string> args) {
  args.insert(args.begin(), {"-l", "--format=json"});
  const CommandResult result = SessionReport(args);
  Json report = Json::parse(result.out, nullptr, false);
  REQUIRE(report.is_object());
  return report;
}

std::string LinuxRun::Folded(std::vector<std::string> args) {
  args.insert(args.begin(), "--format=folded");
  return SessionReport(args).out;
}

std::vector<uint32_t> LinuxRun::Pids(const std::string& comm) {
  const auto saved = hvprof::store::NewestSavedSession({dir_.File("sessions")});
  REQUIRE(saved.has_value());
  const hvprof::store::SessionPaths paths{dir_.File("sessions")};
  const auto session = hvprof::store::OpenSession(paths.Saved(*saved));
  REQUIRE(session.has_value());
  // The processes are in the session's context.hvc: every one the run saw, exited or not.
  hvprof::store::ContextIndex index;
  const auto read = hvprof::store::ReadContextFile(paths.Saved(*saved) + "/" + hvprof::store::kContextFile,
                                                   session.value().metadata.session_id, index);
  REQUIRE(read.has_value());
  REQUIRE(read.value().present);
  std::vector<uint32_t> pids;
  for (const auto& domain : session.value().metadata.domains) {
    for (const auto& [pid, name] : index.Processes(domain.id)) {
      if (name == comm) pids.push_back(pid);
    }
  }
  return pids;
}

}  // namespace hvprof::testing
