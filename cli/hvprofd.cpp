// hvprofd: the agent daemon. `hvprof --start-daemon` starts it; it is not meant to be run by
// hand, though `--foreground` helps when debugging. Thin main over the agent libraries.

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>

#include <boost/program_options.hpp>

#include "hvprof/base/files.h"
#include "hvprof/base/log.h"
#include "hvprof/base/process.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/base/version.h"
#include "hvprof/agent/control_channel.h"
#include "hvprof/setup/setup.h"
#include "hvprof/dom0/agent.h"
#include "hvprof/guest/agent.h"
#include "hvprof/xen/xen_link.h"

namespace po = boost::program_options;

namespace {

// Tells the waiting `hvprof --start-daemon` how the setup went: the last line on the ready
// pipe, after any progress lines (docs/hosted-protocol.md, "The ready pipe").
void Report(int fd, const hvprof::agent::Json& message) {
  if (fd < 0) return;
  const std::string text = message.dump() + "\n";
  (void)hvprof::WriteAll(fd, std::as_bytes(std::span(text.data(), text.size())), "the ready pipe");
  ::close(fd);
}

// How far a long setup got, as a line on the ready pipe, at most every 100 ms.
hvprof::agent::SetupProgress ReportProgress(int fd) {
  if (fd < 0) return {};
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [fd, last](std::string_view what, uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - *last < std::chrono::milliseconds(100)) return;
    *last = now;
    const hvprof::agent::Json line{{"progress", {{"what", what}, {"done", done}, {"total", total}}}};
    const std::string text = line.dump() + "\n";
    (void)hvprof::WriteAll(fd, std::as_bytes(std::span(text.data(), text.size())), "the ready pipe");
  };
}

int Fail(int ready_fd, const hvprof::Error& error) {
  hvprof::Log(hvprof::LogLevel::kError, "{}", error.message());
  Report(ready_fd, hvprof::agent::ErrorResponse(error));
  return 1;
}

// The hypervisor, as --platform names it: hvprof-hv's socket (sim, linux) or Xen itself.
hvprof::Result<std::unique_ptr<hvprof::agent::HypervisorLink>> ConnectPlatform(
    const hvprof::setup::SetupOptions& setup) {
  if (setup.platform == "xen") return hvprof::xen::ConnectXen(setup.domain);
  if (setup.platform == "sim" || setup.platform == "linux") {
    return hvprof::agent::ConnectHostedDomain(setup.hv_run_dir, setup.domain);
  }
  return hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                           "--platform={} is not known; use sim or linux (with hvprof-hv) or xen", setup.platform);
}

}  // namespace

int main(int argc, char** argv) {
  hvprof::SetLogPrefix("hvprofd", true);
  // A region and an eventfd per ring: thousands on a host with many domains.
  hvprof::RaiseDescriptorLimit();
  int ready_fd = -1;
  try {
    std::string role;
    std::string setup_path;
    po::options_description described(
        "Usage: hvprofd --role=dom0|guest --setup=FILE [--ready-fd=N]\n\n"
        "The hvprof agent. `hvprof --start-daemon` starts it with the setup it wrote; use that.\n"
        "SIGTERM and SIGINT end it as `hvprof --shutdown` does; SIGHUP makes it read the setup file again and\n"
        "take on a new budget, --verbose or continuous window, as `hvprof --reload` does (a file that changes\n"
        "anything else changes nothing: that needs a restart).\n\nOptions");
    described.add_options()("help,h", "show this help")("version", "print hvprof's version")(
        "role", po::value(&role), "dom0 (the primary profiler) or guest (an active domain's agent)")(
        "setup", po::value(&setup_path), "the setup file (SESSION_DIR/daemonrc.json)")(
        "ready-fd", po::value(&ready_fd), "report the outcome of the setup on this descriptor")(
        "foreground", "log to stderr (the default when started by hand)");
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, described), values);
    po::notify(values);
    if (values.count("help") != 0) {
      std::cout << described << "\n";
      return 0;
    }
    if (values.count("version") != 0) {
      std::cout << "hvprofd (hvprof) " << hvprof::kVersion << "\n";
      return 0;
    }
    if (role != "dom0" && role != "guest") {
      return Fail(ready_fd, hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                                              "--role must be dom0 or guest (got '{}')", role));
    }
    auto setup = hvprof::setup::SetupOptions::Read(setup_path);
    if (!setup) return Fail(ready_fd, setup.error());
    if (setup.value().verbose) hvprof::SetLogLevel(hvprof::LogLevel::kDebug);
    // What it writes says which processes ran and what they mapped: its owner's alone, or
    // --session-group's to read.
    if (auto private_files = setup.value().ApplySessionPrivacy(); !private_files) {
      return Fail(ready_fd, private_files.error());
    }

    // One agent per session directory: the lock lives as long as this process.
    hvprof::store::SessionPaths paths{setup.value().session_root};
    // The session directory is written as root: nobody else may be able to change it.
    if (auto trusted = hvprof::store::CheckSessionDirectories(paths); !trusted) return Fail(ready_fd, trusted.error());
    auto lock = hvprof::LockPidFile(paths.lock());
    if (!lock) return Fail(ready_fd, lock.error());
    if (!lock.value()) {
      return Fail(ready_fd, hvprof::MakeError(hvprof::ErrorKind::kBusy, "another hvprofd runs for {}", paths.root));
    }

    // A setup that fails leaves no lock behind: it would read as an hvprofd that died while
    // profiling.
    auto fail_setup = [&](const hvprof::Error& error) {
      ::unlink(paths.lock().c_str());
      return Fail(ready_fd, error);
    };
    if ((role == "guest") != (setup.value().domain != 0)) {
      return fail_setup(hvprof::MakeError(hvprof::ErrorKind::kInvalidArgument,
                                              "--role={} does not fit domain {} of the setup", role,
                                              setup.value().domain));
    }
    auto link = ConnectPlatform(setup.value());
    if (!link) return fail_setup(link.error());
    std::unique_ptr<hvprof::agent::AgentDaemon> agent;
    if (role == "dom0") {
      auto created = hvprof::dom0::Dom0Agent::Create(setup.value(), hvprof::kVersion, std::move(link).value(),
                                                     ReportProgress(ready_fd));
      if (!created) return fail_setup(created.error());
      agent = std::move(created).value();
    } else {
      auto created = hvprof::guest::GuestAgent::Create(setup.value(), hvprof::kVersion, std::move(link).value());
      if (!created) return fail_setup(created.error());
      agent = std::move(created).value();
    }
    hvprof::agent::AgentDaemon::HandleSignals(agent.get());
    Report(ready_fd, hvprof::agent::OkResponse({{"message", agent->Describe()}}));
    if (auto ran = agent->Run(); !ran) {
      hvprof::Log(hvprof::LogLevel::kError, "{}", ran.error().message());
      return 1;
    }
    ::unlink(paths.lock().c_str());
    return 0;
  } catch (const po::error& error) {
    std::cerr << "hvprofd: " << error.what() << "\n";
    Report(ready_fd, hvprof::agent::ErrorResponse(
                         hvprof::Error(hvprof::ErrorKind::kInvalidArgument, error.what())));
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "hvprofd: internal error: " << error.what() << "\n";
    return 1;
  }
}
