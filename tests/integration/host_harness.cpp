#include "host_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/control/commands.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/session.h"

namespace hvprof::testing {

Host::Host(const nlohmann::json& scenario, std::optional<uint64_t> seed) {
  run_dir_ = dir_.File("run");
  session_root_ = dir_.File("sessions");
  std::ofstream(dir_.File("scenario.json")) << scenario.dump();
  hv_pid_ = ::fork();
  REQUIRE(hv_pid_ >= 0);
  if (hv_pid_ == 0) {
    const int log = ::open(dir_.File("hv.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(log, STDERR_FILENO);
    const std::string hv = Binary("hvprof-hv");
    const std::string scenario_arg = "--scenario=" + dir_.File("scenario.json");
    const std::string run_arg = "--run-dir=" + run_dir_;
    const std::string seed_arg = seed ? "--seed=" + std::to_string(*seed) : std::string();
    std::vector<const char*> args = {hv.c_str(), "--platform=sim", scenario_arg.c_str(), run_arg.c_str(), "--speed=max"};
    if (seed) args.push_back(seed_arg.c_str());
    args.push_back(nullptr);
    ::execv(hv.c_str(), const_cast<char**>(args.data()));
    ::_exit(127);
  }
  // Wait for dom0's socket.
  const std::string socket = run_dir_ + "/domain-0.sock";
  for (int i = 0; i < 1000 && !std::filesystem::exists(socket); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!std::filesystem::exists(socket)) {
    auto log = ReadFileToString(dir_.File("hv.log"));
    FAIL("hvprof-hv did not start: " << (log ? log.value() : "(no log)"));
  }
}

Host::~Host() {
  for (uint16_t domain : guests_) {
    (void)RunProgram({Binary("hvprof"), "--shutdown", "--domain=" + std::to_string(domain),
                      "--session-dir=" + guest_root(domain)});
  }
  (void)RunProgram({Binary("hvprof"), "--shutdown", "--session-dir=" + session_root_});
  if (hv_pid_ > 0) {
    ::kill(hv_pid_, SIGTERM);
    ::waitpid(hv_pid_, nullptr, 0);
  }
}

void Host::KillHypervisor() {
  if (hv_pid_ <= 0) return;
  ::kill(hv_pid_, SIGKILL);
  ::waitpid(hv_pid_, nullptr, 0);
  hv_pid_ = -1;
}

CommandResult Host::Hvprof(std::vector<std::string> args, const std::vector<std::string>& environment) {
  std::vector<std::string> argv = {Binary("hvprof")};
  const bool run = !args.empty() && args[0] == "run";
  if (run) argv.push_back("run");
  argv.push_back("--run-dir=" + run_dir_);
  argv.push_back("--session-dir=" + session_root_);
  argv.insert(argv.end(), args.begin() + (run ? 1 : 0), args.end());
  return RunProgram(argv, environment);
}

CommandResult Host::GuestHvprof(uint16_t domain, std::vector<std::string> args,
                                const std::vector<std::string>& environment) {
  if (std::find(guests_.begin(), guests_.end(), domain) == guests_.end()) guests_.push_back(domain);
  std::vector<std::string> argv = {Binary("hvprof"), "--domain=" + std::to_string(domain), "--run-dir=" + run_dir_,
                                   "--session-dir=" + guest_root(domain)};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv, environment);
}

pid_t Host::GuestAgentPid(uint16_t domain) const {
  auto text = ReadFileToString(guest_root(domain) + "/lock");
  return text ? std::atoi(text.value().c_str()) : -1;
}

CommandResult Host::Report(std::vector<std::string> args) {
  std::vector<std::string> argv = {Binary("hvprof-report"), "--session-dir=" + session_root_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv);
}

std::unique_ptr<agent::HypervisorLink> Host::Connect(uint16_t domain) const {
  auto link = agent::ConnectHosted(run_dir_ + "/domain-" + std::to_string(domain) + ".sock");
  if (!link) FAIL(link.error().message());
  return std::move(link).value();
}

context::GroundTruth Host::GroundTruth(bool reset) const {
  auto truth = Connect(0)->GroundTruth(reset);
  INFO("ground truth: " << (truth ? std::string() : truth.error().message()));
  REQUIRE(truth.has_value());
  return std::move(truth).value();
}

pid_t Host::AgentPid() const {
  auto text = ReadFileToString(session_root_ + "/lock");
  return text ? std::atoi(text.value().c_str()) : -1;
}

bool WaitForProfiling(const std::string& session_root) {
  const store::SessionPaths paths{session_root};
  // Generous: a loaded machine may take a while to start the daemons and the workload.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto status = control::Status(paths);
    if (status && status.value().message.find("profiling on") != std::string::npos) return true;
  }
  return false;
}

void EditContext(const std::string& directory, const std::function<void(context::ContextEvent&)>& edit) {
  auto session = store::OpenSession(directory);
  REQUIRE(session.has_value());
  const std::string id_hex = session.value().metadata.session_id;
  const std::string path = directory + "/" + store::kContextFile;
  std::vector<context::ContextEvent> events;
  auto read = store::ReadContextEvents(path, id_hex, [&](context::ContextEvent&& event) {
    edit(event);
    events.push_back(std::move(event));
  });
  REQUIRE(read.has_value());
  REQUIRE(read.value().present);
  REQUIRE(std::filesystem::remove(path));
  const auto id = store::ParseSessionId(id_hex);
  REQUIRE(id.has_value());
  store::ContextIndex index;
  auto writer = store::ContextWriter::Open(directory, *id, index);
  REQUIRE(writer.has_value());
  for (const context::ContextEvent& event : events) writer.value().Add(event, index);
  REQUIRE(writer.value().Flush(true).has_value());
}

}  // namespace hvprof::testing
