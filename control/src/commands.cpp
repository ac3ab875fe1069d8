#include "hvprof/control/commands.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>

#include "hvprof/agent/agent_status.h"
#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/control/hypervisor.h"
#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/base/process.h"
#include "hvprof/base/progress.h"
#include "hvprof/base/scoped_fd.h"
#include "hvprof/base/units.h"
#include "hvprof/push/windows.h"
#include "hvprof/report/load.h"
#include "hvprof/report/published.h"

namespace hvprof::control {

namespace {

// --session-group: the session root and its samples/ are the group's to read (2750: the group
// of what is made in them follows), never to write.
Result<void> ShareSessions(const store::SessionPaths& paths, gid_t group) {
  for (const std::string& dir : {paths.root, paths.samples_dir()}) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return ErrnoError(errno, fmt::format("cannot inspect {}", dir));
    if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;  // CheckSessionDirectories says what is wrong
    if (::chown(dir.c_str(), static_cast<uid_t>(-1), group) != 0) {
      return ErrnoError(errno, fmt::format("--session-group: cannot give {} to group {}", dir, group));
    }
    if (::chmod(dir.c_str(), (st.st_mode & 0700) | 02750) != 0) {
      return ErrnoError(errno, fmt::format("--session-group: cannot set the mode of {}", dir));
    }
  }
  return Ok();
}


constexpr auto kRequestTimeout = std::chrono::seconds(60);
constexpr auto kLongRequestTimeout = std::chrono::hours(24);

std::string NotRunning(const store::SessionPaths& paths) {
  return fmt::format("hvprofd is not running for {} (start it with `hvprof --start-daemon "
                     "[setup options]`)",
                     paths.root);
}

std::string LockPid(const store::SessionPaths& paths);

// One request to the agent: its reply, or nothing when no hvprofd serves the session (each
// action has its own answer to that: --stop has nothing to stop, --save renames the session
// itself). A busy agent (a loaded machine, a long drain or dump) answers late: it is waited for as
// long as it uses CPU; one that neither answers nor runs for `timeout` is hung, and said to be.
Result<std::optional<Json>> Ask(const store::SessionPaths& paths, const Json& request,
                                std::chrono::milliseconds timeout = kRequestTimeout) {
  const int pid = std::atoi(LockPid(paths).c_str());
  CpuProgress progress(pid);
  auto response = agent::Request(paths.control_socket(), request, timeout,
                                 [&] { return pid > 0 && progress.Advanced(); });
  if (!response) {
    if (response.error().kind() == ErrorKind::kNotFound) return std::optional<Json>();
    if (response.error().kind() == ErrorKind::kBusy) {
      return MakeError(ErrorKind::kBusy,
                       "hvprofd{} did not answer '{}' and used no CPU for {} s: it seems hung (see {}); "
                       "`hvprof --shutdown` ends it and keeps its session",
                       pid > 0 ? fmt::format(" (pid {})", pid) : "", request.value("action", ""),
                       std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), paths.log());
    }
    return response.error();
  }
  HVPROF_TRY(reply, agent::CheckResponse(std::move(response).value()));
  return std::optional<Json>(std::move(reply));
}

// A request that needs a running hvprofd.
Result<Json> Send(const store::SessionPaths& paths, const Json& request,
                  std::chrono::milliseconds timeout = kRequestTimeout) {
  HVPROF_TRY(reply, Ask(paths, request, timeout));
  if (!reply) return Error(ErrorKind::kBadState, NotRunning(paths));
  return std::move(*reply);
}

std::string LockPid(const store::SessionPaths& paths) {
  const auto holder = ReadPidFile(paths.lock());
  return holder ? holder->pid : std::string();
}

std::string Plural(uint64_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

// The outcome of an action that finished but lost something on the way: its warnings follow
// the message, and the exit code is 3 (done, incomplete), as hvprof-report's.
Outcome WithWarnings(std::string message, const Json& response) {
  Outcome outcome{std::move(message)};
  std::vector<std::string> warnings;
  if (response.contains("warning") && response["warning"].is_string()) warnings.push_back(response["warning"]);
  if (response.contains("warnings") && response["warnings"].is_array()) {
    for (const Json& warning : response["warnings"]) {
      if (warning.is_string() && std::find(warnings.begin(), warnings.end(), warning.get<std::string>()) == warnings.end()) {
        warnings.push_back(warning);
      }
    }
  }
  for (const std::string& warning : warnings) outcome.message += "\nwarning: " + EscapeForTerminal(warning);
  if (!warnings.empty()) outcome.exit_code = 3;
  return outcome;
}

}  // namespace

AgentProcess FindAgent(const store::SessionPaths& paths) {
  AgentProcess agent;
  const std::string pid = LockPid(paths);
  if (!pid.empty()) agent.pid = std::atoi(pid.c_str());
  auto ping = agent::Request(paths.control_socket(), Json{{"action", "ping"}}, std::chrono::seconds(5));
  if (ping && ping.value().value("ok", false)) {
    agent.running = true;
    agent.answering = true;
    agent.pid = ping.value().value("pid", agent.pid);
    return agent;
  }
  if (agent.pid != 0) {
    // The lock is held while an hvprofd lives (looked at after the ping, which may have waited).
    if (const auto holder = ReadPidFile(paths.lock())) {
      agent.running = holder->held;  // alive, but not answering yet (starting up or busy)
      agent.stale = !holder->held;
    }
  }
  return agent;
}

namespace {
Result<std::string> Launch(const setup::SetupOptions& setup, const std::string& hvprofd_path,
                           const store::SessionPaths& paths);
}  // namespace

Result<Outcome> StartDaemon(const setup::SetupOptions& setup, const std::string& hvprofd_path,
                            const HypervisorSpec* own_hypervisor) {
  // Refused before anything starts, so a refusal leaves nothing behind.
  HVPROF_TRYV(setup.CheckNumbers());
  store::SessionPaths paths{setup.session_root};
  const AgentProcess existing = FindAgent(paths);
  if (existing.running) {
    // The same setup again is already in effect; another one needs a new daemon.
    auto running = ReadFileToString(paths.setup(), size_t{1} << 20, Links::kRefuse);
    if (running && running.value() == setup.ToJson().dump(1) + "\n") {
      return Outcome{fmt::format("hvprofd is already running (pid {}) for {} with these settings; nothing to do",
                                 existing.pid, paths.root)};
    }
    return MakeError(ErrorKind::kBadState,
                     "hvprofd is already running (pid {}) for {} with other settings; `hvprof --status` shows "
                     "them, and `hvprof --shutdown` stops it before a --start-daemon with new ones",
                     existing.pid, paths.root);
  }
  std::string warning;
  if (existing.stale) {
    warning = fmt::format(
        "note: a previous hvprofd (pid {}) died without shutting down; its samples in {} are "
        "kept and this hvprofd continues that session\n",
        existing.pid, paths.current());
  }
  // Checks that need no hypervisor, so mistakes show up at once.
  const bool guest = setup.domain != 0;
  if (guest) {
    const char* dom0_only = !setup.active_domains.empty()    ? "--active-domains"
                            : !setup.passive_domains.empty() ? "--passive-domains"
                            : !setup.passive_images.empty()  ? "--passive-images"
                            // Xen does not tell a guest dom0's events: there --event names them.
                            : !setup.events.empty() && setup.platform != "xen" ? "--event"
                            : !setup.xen_image.empty()       ? "--xen"
                            : setup.callgraph != 0           ? "--callgraph"
                            : setup.sched                    ? "--sched"
                                                             : nullptr;
    if (dom0_only != nullptr) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "{} is set up in dom0, which profiles the whole host; in a guest (domain {}), "
                       "--start-daemon takes only --vmlinux, --no-vmlinux, --buffer-size, --poll-interval and "
                       "--verbose{}",
                       dom0_only, setup.domain, setup.platform == "xen" ? " (on xen also dom0's --event, to name them)" : "");
    }
  }
  for (const std::string& event : setup.events) HVPROF_TRYV(setup::ParseEventSpec(event));
  for (const std::string& passive : setup.passive_domains) {
    for (const std::string& active : setup.active_domains) {
      if (passive == active) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "domain {} is in both --active-domains and --passive-domains; a domain "
                         "is profiled one way or the other",
                         passive);
      }
    }
  }
  if (!setup.xen_image.empty()) HVPROF_TRYV(setup::CheckImage(setup.xen_image, "hypervisor", std::nullopt));
  if (!setup.vmlinux.empty()) HVPROF_TRYV(setup::CheckImage(setup.vmlinux, "kernel", setup.domain));
  for (const std::string& image : setup.passive_images) {
    HVPROF_TRYV(setup::CheckImage(image, "passive-kernel", std::nullopt));
  }
  // Sessions say which processes ran, what they mapped and their stacks: what is made from now
  // on (here and by hvprofd) is the owner's alone, unless --session-group shares it to read.
  HVPROF_TRYV(setup.ApplySessionPrivacy());
  HVPROF_TRYV(MakeDirectories(paths.samples_dir()));
  HVPROF_TRY(session_group, setup.SessionGroup());
  if (session_group) HVPROF_TRYV(ShareSessions(paths, *session_group));
  HVPROF_TRYV(CheckSessionDirectories(paths));

  // sim and linux run under hvprof-hv: dom0 starts one when none serves the run directory, and
  // ends it again if the daemon does not start.
  std::string started;
  if (own_hypervisor != nullptr && !guest && NeedsHostedHypervisor(setup.platform)) {
    const std::string serving = ServingPlatform(setup.hv_run_dir);
    if (serving.empty()) {
      HVPROF_TRY(pid, StartOwnHypervisor(*own_hypervisor, setup.hv_run_dir, paths));
      started = fmt::format("started hvprof-hv --platform={}{} (pid {}; `hvprof --shutdown` ends it)\n",
                            setup.platform,
                            setup.platform == "sim" && !own_hypervisor->scenario.empty()
                                ? " --scenario=" + EscapeForTerminal(own_hypervisor->scenario)
                                : std::string(),
                            pid);
    } else if (!own_hypervisor->scenario.empty() || !own_hypervisor->domain_map.empty()) {
      return MakeError(ErrorKind::kInvalidArgument,
                       "{} is given to an hvprof-hv that --start-daemon starts; the one already serving {} has its own "
                       "(leave the option out, or stop that hvprof-hv first)",
                       own_hypervisor->scenario.empty() ? "--domain-map" : "--scenario",
                       setup.hv_run_dir.empty() ? std::string("the default run directory") : setup.hv_run_dir);
    } else if (serving != setup.platform) {
      return MakeError(ErrorKind::kBadState,
                       "the hvprof-hv serving {} runs --platform={}, not {}: stop it, give this daemon another "
                       "--run-dir, or leave out --platform to use it",
                       setup.hv_run_dir.empty() ? std::string("the default run directory") : setup.hv_run_dir,
                       serving, setup.platform);
    }
  }
  auto launched = Launch(setup, hvprofd_path, paths);
  if (!launched) {
    // Its hvprof-hv goes with it, unless an hvprofd that did not report in time still runs.
    if (!started.empty() && !FindAgent(paths).running) (void)StopOwnHypervisor(paths);
    return launched.error();
  }
  return Outcome{warning + started + launched.value()};
}

Result<Outcome> Reload(const setup::SetupOptions& setup) {
  if (setup.domain != 0) {
    return MakeError(ErrorKind::kInvalidArgument, "--reload is dom0's: a guest's agent takes its setup from dom0");
  }
  HVPROF_TRYV(setup.CheckNumbers());
  HVPROF_TRYV(setup::CheckBudget(setup));
  for (const std::string& event : setup.events) HVPROF_TRYV(setup::ParseEventSpec(event));
  const store::SessionPaths paths{setup.session_root};
  const AgentProcess agent = FindAgent(paths);
  if (!agent.running) {
    return MakeError(ErrorKind::kBadState,
                     "hvprofd is not running for {}: `hvprof --start-daemon` starts it with these settings", paths.root);
  }
  HVPROF_TRY(text, ReadFileToString(paths.setup(), size_t{1} << 20, Links::kRefuse));
  HVPROF_TRY(running, setup::SetupOptions::FromJson(text, paths.setup()));
  const setup::SettingsChange change = setup::CompareSettings(running, setup);
  if (!change.restart.empty()) {
    return MakeError(ErrorKind::kBadState,
                     "hvprofd (pid {}) cannot change {} while it runs: nothing was changed. Restart it with the new "
                     "settings (`hvprof --shutdown`, then `hvprof --start-daemon` with them; or `systemctl restart "
                     "hvprofd`), or --reload with only --keep-size, --keep-age, --build-id-cache-size, --verbose or "
                     "--continuous's window changed",
                     agent.pid, fmt::join(change.restart, ", "));
  }
  if (change.live.empty()) {
    return Outcome{fmt::format("hvprofd (pid {}) already runs with these settings; nothing to do", agent.pid)};
  }
  HVPROF_TRYV(WriteFileAtomically(paths.setup(), setup.ToJson().dump(1) + "\n"));
  auto response = Send(paths, Json{{"action", "reload"}});
  if (!response) {
    // The file says what hvprofd runs with: as it was.
    if (auto restored = WriteFileAtomically(paths.setup(), text); !restored) {
      return response.error().WithContext(
          fmt::format("{} (and {} could not be restored: {})", "hvprofd did not take the settings", paths.setup(),
                      restored.error().message()));
    }
    return response.error().WithContext("hvprofd did not take the settings; nothing was changed");
  }
  return Outcome{
      fmt::format("hvprofd (pid {}): {}", agent.pid, response.value().value("message", std::string("reloaded")))};
}

namespace {

// hvprofd, detached, set up as `setup` says: what it said when it was ready.
Result<std::string> Launch(const setup::SetupOptions& setup, const std::string& hvprofd_path,
                           const store::SessionPaths& paths) {
  const bool guest = setup.domain != 0;
  HVPROF_TRYV(WriteFileAtomically(paths.setup(), setup.ToJson().dump(1) + "\n"));

  // Start hvprofd detached, with a pipe on which it reports whether the setup worked.
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoError(errno, "pipe");
  ScopedFd read_end(ready[0]);
  ScopedFd write_end(ready[1]);
  const pid_t child = ::fork();
  if (child < 0) return ErrnoError(errno, "fork");
  if (child == 0) {
    ::setsid();
    const int null = ::open("/dev/null", O_RDWR);
    // Never through a link or into a FIFO planted in the session directory.
    const int log = ::open(paths.log().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0644);
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(log >= 0 ? log : null, STDERR_FILENO);
    ::dup2(write_end.get(), 3);  // dup2 clears close-on-exec on the copy
    const std::string setup_arg = "--setup=" + paths.setup();
    const char* argv[] = {hvprofd_path.c_str(), guest ? "--role=guest" : "--role=dom0", setup_arg.c_str(),
                          "--ready-fd=3", nullptr};
    ::execv(hvprofd_path.c_str(), const_cast<char**>(argv));
    ::_exit(127);
  }
  write_end.Reset();
  std::string report;
  char buffer[4096];
  const auto begun = std::chrono::steady_clock::now();
  // On a busy machine setting up takes longer: the deadline moves on while hvprofd uses CPU.
  auto deadline = begun + std::chrono::seconds(120);
  CpuProgress child_progress(child);
  // Setting up many domains takes a while: after 2 s, what hvprofd says it is doing (progress
  // lines on the pipe), else the seconds waited so far.
  Progress progress("hvprof: hvprofd is setting up profiling, seconds", 0);
  bool told = false;
  std::string phase;
  uint64_t phase_total = 0;
  auto take_progress_lines = [&] {
    for (size_t end; (end = report.find('\n')) != std::string::npos;) {
      const Json line = Json::parse(report.substr(0, end), nullptr, false);
      if (!line.is_object() || !line.contains("progress")) return;  // the outcome: read to the end
      const Json& p = line["progress"];
      if (p.is_object() && p.value("what", Json()).is_string() && p.value("done", Json()).is_number_unsigned() &&
          p.value("total", Json()).is_number_unsigned()) {
        const std::string what = "hvprof: hvprofd is " + EscapeForTerminal(p["what"].get<std::string>());
        const auto total = p["total"].get<uint64_t>();
        if (what != phase || total != phase_total) {
          phase = what;
          phase_total = total;
          progress.Rename(what, total);
        }
        progress.Set(p["done"].get<uint64_t>());
        told = true;
      }
      report.erase(0, end + 1);
    }
  };
  for (;;) {
    pollfd pfd{read_end.get(), POLLIN, 0};
    const auto now = std::chrono::steady_clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (left.count() <= 0 && child_progress.Advanced()) {
      deadline = now + std::chrono::seconds(120);
      continue;
    }
    if (left.count() <= 0) {
      return MakeError(ErrorKind::kIo, "hvprofd did not report and used no CPU for 2 minutes; see {}", paths.log());
    }
    if (!told) {
      progress.Set(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(now - begun).count()));
    }
    if (::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 250))) <= 0) continue;
    const ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
    if (n <= 0) break;
    report.append(buffer, static_cast<size_t>(n));
    if (report.size() > (size_t{1} << 20)) break;  // not hvprofd's: refused below
    take_progress_lines();
  }
  progress.Done();
  Json result = Json::parse(report, nullptr, false);
  if (result.is_discarded() || !result.is_object()) {
    int status = 0;
    ::waitpid(child, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
      return MakeError(ErrorKind::kNotFound, "cannot run {}: is hvprof installed completely?", hvprofd_path);
    }
    return MakeError(ErrorKind::kInternal, "hvprofd exited without reporting; see {}", paths.log());
  }
  if (!result.value("ok", false)) {
    ::waitpid(child, nullptr, 0);
    return agent::CheckResponse(result).error();
  }
  const std::string next = guest ? fmt::format("\nnow run `hvprof --domain={} --start` once dom0 has run `hvprof "
                                              "--start-daemon --active-domains={}`",
                                              setup.domain, setup.domain)
                     : setup.continuous()
                         ? fmt::format("\nprofiling continuously: a window every {} s into {}/window-*, kept within "
                                       "{} and {} (`hvprof --status` says how far; `hvprof-report --list` lists them)",
                                       static_cast<double>(setup.window_ns) / 1e9, paths.samples_dir(),
                                       FormatBytes(setup.keep_bytes), FormatDuration(setup.keep_age_ns))
                         : std::string("\nnow run `hvprof --start`");
  return result.value("message", "hvprofd started") + next;
}

}  // namespace

Result<Outcome> Start(const store::SessionPaths& paths) {
  HVPROF_TRY(reply, Ask(paths, Json{{"action", "start"}}));
  if (!reply) {
    return MakeError(ErrorKind::kBadState,
                     "--start before --start-daemon: hvprofd is not running for {}. Run `hvprof "
                     "--start-daemon [setup options]` first",
                     paths.root);
  }
  return Outcome{reply->value("message", "profiling started")};
}

Result<Outcome> Stop(const store::SessionPaths& paths) {
  HVPROF_TRY(reply, Ask(paths, Json{{"action", "stop"}}));
  if (!reply) return Outcome{NotRunning(paths) + "; nothing to stop"};
  const Json& r = *reply;
  std::string message = r.value("message", "profiling stopped");
  if (r.contains("samples")) {
    message += fmt::format("; {} stored in {}", Plural(r.value("samples", uint64_t{0}), "sample"),
                           r.value("session", ""));
  }
  return WithWarnings(message, r);
}

Result<Outcome> Dump(const store::SessionPaths& paths) {
  HVPROF_TRY(reply, Ask(paths, Json{{"action", "dump"}}));
  if (!reply) {
    return MakeError(ErrorKind::kBadState,
                     "nothing to dump: hvprofd is not running for {}, and the session on disk is as it last "
                     "wrote it (`hvprof-report` reads it; `hvprof --start-daemon` starts profiling again)",
                     paths.root);
  }
  return WithWarnings(fmt::format("{} stored in {}", Plural(reply->value("samples", uint64_t{0}), "sample"),
                                  reply->value("session", "")),
                      *reply);
}

namespace {


// Waits up to `limit` for `pid` to exit; true if it did.
bool WaitGone(int pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (store::IsLiveHvprofd(pid)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    ::usleep(10000);
  }
  return true;
}

// An hvprofd that does not answer (hung, stopped): SIGTERM, then SIGKILL.
Result<Outcome> Terminate(const store::SessionPaths& paths, int pid) {
  if (pid <= 0 || !store::IsLiveHvprofd(pid)) {
    return MakeError(ErrorKind::kBadState,
                     "hvprofd for {} holds its lock but does not answer, and its pid is unknown; end it by hand",
                     paths.root);
  }
  if (::kill(pid, SIGTERM) != 0) return ErrnoError(errno, fmt::format("cannot signal hvprofd (pid {})", pid));
  ::kill(pid, SIGCONT);  // a stopped process handles SIGTERM only once continued
  const char* how = "SIGTERM";
  // SIGTERM makes it write the session and shut down: wait while it makes progress (uses CPU),
  // up to 10 minutes; 5 s without progress is a hang.
  bool gone = WaitGone(pid, std::chrono::seconds(5));
  CpuProgress progress(pid);
  for (int i = 0; !gone && i < 600; ++i) {
    gone = WaitGone(pid, std::chrono::seconds(1));
    if (!gone && !progress.Advanced()) break;
  }
  if (!gone) {
    ::kill(pid, SIGKILL);
    how = "SIGKILL";
    if (!WaitGone(pid, std::chrono::seconds(5))) {
      return MakeError(ErrorKind::kBusy, "hvprofd (pid {}) survived SIGKILL; it is stuck in the kernel", pid);
    }
  }
  Outcome outcome{fmt::format(
      "hvprofd (pid {}) did not answer within 5 s and was ended with {}; the session in {} keeps what it had "
      "written, and the next `hvprof --start-daemon` recovers the hypervisor's state",
      pid, how, paths.current())};
  outcome.exit_code = 3;
  return outcome;
}

}  // namespace

namespace {

Result<Outcome> ShutdownAgent(const store::SessionPaths& paths) {
  AgentProcess agent = FindAgent(paths);
  if (!agent.running) {
    return Outcome{fmt::format("hvprofd is not running for {}; nothing to shut down{}", paths.root,
                               agent.stale ? " (an earlier one died without shutting down: its session is kept)" : "")};
  }
  // Not answering may be busy (a long dump answers nobody meanwhile): while it uses CPU, wait.
  CpuProgress progress(agent.pid);
  for (int waited = 0; !agent.answering && agent.pid > 0 && waited < 120; ++waited) {
    ::usleep(1000000);
    if (!progress.Advanced()) break;  // no progress: hung or stopped
    agent = FindAgent(paths);
  }
  if (!agent.running) return Outcome{fmt::format("hvprofd for {} has ended", paths.root)};
  if (!agent.answering) return Terminate(paths, agent.pid);
  // It answers: shutting down writes the session, which takes as long as the session is large.
  auto sent = agent::Request(paths.control_socket(), Json{{"action", "shutdown"}}, std::chrono::minutes(10));
  if (!sent) {
    // The request itself failed (timed out, hung up): it stopped answering.
    if (sent.error().kind() == ErrorKind::kNotFound) {
      return Outcome{fmt::format("hvprofd is not running for {}; nothing to shut down", paths.root)};
    }
    return Terminate(paths, agent.pid);
  }
  // It answered; a refusal is its own, said as it is.
  auto response = agent::CheckResponse(std::move(sent).value());
  if (!response) return response.error();
  // Wait for the process to go, so that a following --start-daemon finds the lock free.
  if (agent.pid != 0) (void)WaitGone(agent.pid, std::chrono::seconds(2));
  return WithWarnings(fmt::format("{}; {} kept in {}", response.value().value("message", "shut down"),
                                  Plural(response.value().value("samples", uint64_t{0}), "sample"),
                                  response.value().value("session", paths.current())),
                      response.value());
}

}  // namespace

Result<Outcome> Shutdown(const store::SessionPaths& paths, bool end_own_hypervisor) {
  auto outcome = ShutdownAgent(paths);
  // The hvprof-hv of this daemon goes after it (so that hvprofd's last drain still has it), and
  // only once hvprofd has gone: one that refused or failed still needs it.
  if (!outcome || !end_own_hypervisor) return outcome;
  auto stopped = StopOwnHypervisor(paths);
  if (!stopped) {
    outcome.value().message += fmt::format("\nwarning: the hvprof-hv --start-daemon started: {}", stopped.error().message());
  } else if (!stopped.value().empty()) {
    outcome.value().message += "\n" + stopped.value();
  }
  return outcome;
}

Result<Outcome> Reset(const store::SessionPaths& paths) {
  HVPROF_TRY(reply, Ask(paths, Json{{"action", "reset"}}));
  if (reply) return Outcome{reply->value("message", "reset")};
  std::error_code ec;
  if (!std::filesystem::exists(paths.current(), ec)) {
    return Outcome{fmt::format("{} is already empty", paths.current())};
  }
  std::filesystem::remove_all(paths.current(), ec);
  if (ec) return ErrnoError(ec.value(), fmt::format("cannot remove {}", paths.current()));
  return Outcome{fmt::format("removed {}", paths.current())};
}

Result<Outcome> Save(const store::SessionPaths& paths, const std::string& name, bool allow_empty) {
  HVPROF_TRYV(store::ValidateSessionName(name));
  HVPROF_TRY(reply, Ask(paths, Json{{"action", "save"}, {"name", name}, {"allow_empty", allow_empty}}));
  if (reply) return Outcome{reply->value("message", "saved")};
  // No hvprofd: the session on disk is saved as the daemon would save it.
  HVPROF_TRY(target, store::CheckSave(paths, paths.current(), name, allow_empty));
  HVPROF_TRYV(store::MoveSession(paths.current(), target));
  return Outcome{fmt::format("saved as {}", target)};
}

Result<Outcome> Publish(const store::SessionPaths& paths) {
  HVPROF_TRY(asked, Ask(paths, Json{{"action", "status"}}));
  if (!asked) {
    return MakeError(ErrorKind::kBadState, "{}; start it with `hvprof --start-daemon` and `hvprof --start`, "
                     "then publish", NotRunning(paths));
  }
  HVPROF_TRY(status, agent::ParseAgentStatus(*asked));
  if (status.role != agent::AgentRole::kGuest) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "--publish is for active guests: dom0's own report already holds dom0, the hypervisor "
                     "and the passive domains (`hvprof-report --all-domains` adds what the guests published)");
  }
  if (status.session.empty()) {
    return MakeError(ErrorKind::kBadState, "this domain has no samples to publish: run `hvprof --start` here first");
  }
  // What hvprofd has drained, written; then the profile as this domain alone can symbolize it (its
  // files are here), its hypervisor addresses left raw for dom0, which has xen-syms.
  HVPROF_TRYV(Send(paths, Json{{"action", "dump"}}, kLongRequestTimeout));
  HVPROF_TRY(profile, report::LoadProfile(status.session, report::LoadOptions{}));
  const report::PublishedProfile published = report::BuildPublished(profile);
  HVPROF_TRY(reply, Send(paths, Json{{"action", "publish"}, {"profile", report::PublishedToJson(published)}},
                         kLongRequestTimeout));
  const std::string label = EscapeForTerminal(store::DomainName(published.domain, published.name));
  if (reply.contains("path")) {
    const std::string path = EscapeForTerminal(reply.value("path", std::string()));
    return Outcome{fmt::format("wrote the profile of {} ({} samples) to {}. Xen cannot hand it to dom0: copy it into "
                               "dom0's session as published/domain-{}.json (e.g. `scp {} "
                               "dom0:/var/lib/hvprof/samples/current/published/domain-{}.json`), then "
                               "`hvprof-report --all-domains` there shows it",
                               label, published.samples, path, published.domain, path, published.domain)};
  }
  return Outcome{fmt::format("published {} samples of {} ({} symbols, {} hypervisor addresses) to dom0; dom0 takes it "
                             "into its session within a second, and `hvprof-report --all-domains` there shows it",
                             published.samples, label, published.symbols.size(), published.hypervisor.size())};
}

Result<Outcome> RunSim(const store::SessionPaths& paths, uint64_t duration_ns) {
  HVPROF_TRY(response, Send(paths, Json{{"action", "run-sim"}, {"duration_ns", duration_ns}}, kLongRequestTimeout));
  return Outcome{fmt::format("the simulated machine ran {:.3f} s", response.value("ran_ns", uint64_t{0}) / 1e9)};
}

namespace {

// What hvprof-push did with the windows (push.json), when it ever ran for this root.
std::string FormatPush(const store::SessionPaths& paths) {
  auto read = push::ReadPushState(paths);
  if (!read) {
    if (read.error().kind() == ErrorKind::kNotFound) return std::string();
    return fmt::format("PUSH:    {}\n", EscapeForTerminal(read.error().message()));
  }
  const push::PushState& s = read.value();
  const std::optional<PidFileHolder> holder = ReadPidFile(paths.root + "/" + std::string(push::kPushLockFile));
  const bool running = holder && holder->held;
  std::string out = fmt::format("push:    {} pushed to {} ({} series, {}); {}\n", Plural(s.windows_pushed, "window"),
                                EscapeForTerminal(s.url), s.series_pushed, FormatBytes(s.bytes_pushed),
                                s.last_push_ns == 0 ? std::string("none yet")
                                                    : fmt::format("the last, window {}, at {}", s.last_window,
                                                                  FormatLocalTime(s.last_push_ns)));
  if (!running) out += "PUSH:    hvprof-push is not running: the windows closed from now on wait on disk\n";
  if (s.failures != 0) {
    out += fmt::format("PUSH:    failing ({} in a row), next attempt at {}: {}\n", Plural(s.failures, "attempt"),
                       FormatLocalTime(s.next_attempt_ns), EscapeForTerminal(s.last_error));
  }
  if (s.NotPushed() != 0) {
    out += fmt::format("PUSH:    NOT PUSHED: {} ({} removed by the disk budget first, {} refused by the server, {} "
                       "unreadable); hvprof-push's log says which\n",
                       Plural(s.NotPushed(), "window"), s.not_pushed_removed, s.not_pushed_refused,
                       s.not_pushed_unreadable);
  }
  return out;
}

}  // namespace

Result<Outcome> Status(const store::SessionPaths& paths) {
  const AgentProcess agent = FindAgent(paths);
  if (!agent.running) {
    std::string message = fmt::format("hvprofd: not running for {}\n", paths.root);
    if (agent.stale) {
      message += fmt::format("note: a previous hvprofd (pid {}) died without shutting down\n", agent.pid);
    }
    auto session = store::OpenSession(paths.current());
    if (!session) {
      message += "session: none\n";
      return Outcome{message};
    }
    const auto& m = session.value().metadata;
    message += fmt::format("session: {} ({}, {} on {})\n", session.value().directory, EscapeForTerminal(m.platform),
                           EscapeForTerminal(m.cpu_type), EscapeForTerminal(m.machine));
    // What the file holds, which may be more than the metadata last said.
    const std::string samples = session.value().directory + "/" + store::kSamplesFile;
    const auto id = store::ParseSessionId(m.session_id);
    auto read = store::ReadSamplesFile(samples, [](const store::StoredSample&) {},
                                       id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt);
    if (read) {
      message += fmt::format("samples: {} in {} (session.json says {})\n", read.value().samples, store::kSamplesFile,
                             m.samples_stored);
    } else {
      message += fmt::format("samples: {} per session.json; {}\n", m.samples_stored, read.error().message());
    }
    if (m.losses.store_failed != 0) {
      message += fmt::format("NOT WRITTEN: {} could not be written to the session\n",
                             Plural(m.losses.store_failed, "sample"));
    }
    if (!m.profiling.empty() && m.profiling.back().stop_ns == 0) {
      message += "incomplete: hvprofd stopped while profiling without closing the session (it died or was killed); "
                 "`hvprof --start-daemon` with the same options recovers and continues it\n";
    }
    for (const std::string& reason : m.incomplete) message += "incomplete: " + EscapeForTerminal(reason) + "\n";
    return Outcome{message + FormatPush(paths)};
  }
  HVPROF_TRY(answer, Send(paths, Json{{"action", "status"}}));
  HVPROF_TRY(status, agent::ParseAgentStatus(answer));
  return Outcome{FormatStatus(status) + FormatPush(paths)};
}

namespace {

// The CPU types hvprof has event tables for, comma-separated.
std::string KnownCpuTypes() {
  uint32_t count = 0;
  const hvpmu::CpuEventTable* const* tables = hvpmu::AllEventTables(&count);
  std::vector<std::string_view> known;
  for (uint32_t i = 0; i < count; ++i) known.push_back(tables[i]->cpu_type);
  return fmt::format("{}", fmt::join(known, ", "));
}

}  // namespace

Result<Outcome> ListEvents(const EventListing& listing) {
  std::string type = listing.cpu_type;
  std::string platform;  // whose runs the default is for; empty: offline, any platform's
  if (type.empty()) {
    if (listing.platform == "xen") {
      return MakeError(ErrorKind::kUnsupported,
                       "on Xen the CPU type is the hypervisor profiler's: name it with --cpu-type=TYPE (`hvprof "
                       "--status` shows it once --start-daemon ran), one of {}",
                       KnownCpuTypes());
    }
    auto link = agent::ConnectHostedDomain(listing.hv_run_dir, 0);
    std::unique_ptr<ScopedHypervisor> asked;  // an hvprof-hv started to ask, ended with this scope
    // Only where nothing serves: a server refused (another user's) is said, not gone around.
    if (!link && link.error().kind() == ErrorKind::kNotFound && listing.platform == "linux" &&
        !listing.hv_path.empty()) {
      // This host's own CPU, as a run here sees it: perf's hardware PMU and hvprof's table for
      // it, else the cpu-clock timer's table.
      HypervisorSpec spec;
      spec.hv_path = listing.hv_path;
      spec.platform = "linux";
      HVPROF_TRY(started, ScopedHypervisor::Start(spec));
      asked = std::move(started);
      link = agent::ConnectHostedDomain(asked->run_dir(), 0);
    }
    if (!link && link.error().kind() != ErrorKind::kNotFound) return link.error();  // e.g. another user's server
    if (!link) {
      return MakeError(ErrorKind::kNotFound, "{}.\nWithout a running hypervisor, name the CPU type: --cpu-type=TYPE, one of {}",
                       link.error().message(), KnownCpuTypes());
    }
    std::unique_ptr<hvpmu::Status> status = agent::StatusRequest();
    HVPROF_TRY(code, agent::RunOp(*link.value(), hvpmu::kOpStatus, status.get()));
    if (code != hvpmu::ErrorCode::kOk) return agent::RefusalError(hvpmu::kOpStatus, code);
    type = status->cpu_type;
    platform = link.value()->platform_name();
  }
  const hvpmu::CpuEventTable* table = hvpmu::FindEventTable(type.c_str());
  if (table == nullptr) {
    return MakeError(ErrorKind::kNotFound, "no events known for CPU type '{}'; the known types are {}", type,
                     KnownCpuTypes());
  }
  // The default as runs take it: linux samples at perf record's rate, the others count the
  // table's default.
  const std::string at_rate = fmt::format("{} at {} samples a second per CPU, as perf record (-F sets another rate)",
                                          table->default_event, setup::kLinuxDefaultRate);
  const std::string counted = fmt::format("{}:{}", table->default_event, table->default_count);
  const std::string default_event = platform == "linux" ? at_rate
                                    : platform.empty()  ? counted + "; on linux: " + at_rate
                                                        : counted;
  std::string out = fmt::format("Events for {} (default: {})\n", table->cpu_type, default_event);
  for (uint32_t i = 0; i < table->num_events; ++i) {
    const hvpmu::EventDef& event = table->events[i];
    out += fmt::format("\n{} (event {:#x}, minimum count {}{})\n    {}\n", event.name, event.code,
                       event.min_count,
                       event.fixed_counter >= 0 ? fmt::format(", or fixed counter {}", event.fixed_counter) : "",
                       event.description);
    out += fmt::format("    unit masks ({}):\n", event.unit_mask_kind == hvpmu::UnitMaskKind::kBitmask
                                                     ? "combine any"
                                                     : "pick one");
    for (uint8_t u = 0; u < event.num_unit_masks; ++u) {
      const hvpmu::UnitMaskDef& mask = event.unit_masks[u];
      out += fmt::format("      {:#04x} {:<14} {}{}\n", mask.value, mask.name, mask.description,
                         mask.value == event.default_unit_mask ? " (default)" : "");
    }
  }
  out += "\nGive events as --event=NAME:COUNT[:UNITMASK[:KERNEL[:USER]]], e.g. --event=" +
         std::string(table->default_event) + ":100000";
  return Outcome{out};
}

namespace {

std::string FormatDomains(const agent::AgentStatus& s) {
  std::string out = "\n  domain              role      activated  rings  fill    user      kernel    hypervisor  lost\n";
  for (const agent::DomainRingsStatus& d : s.domains) {
    const char* activated = d.role != "active" ? "-" : !d.activated ? "?" : *d.activated ? "yes" : "no";
    out += fmt::format("  {:<19} {:<9} {:<10} {:>5}  {:>4}%  {:>8}  {:>8}  {:>10}  {}\n", EscapeForTerminal(d.label),
                       EscapeForTerminal(d.role), activated, d.rings, d.capacity ? 100 * d.max_fill / d.capacity : 0,
                       d.samples[sample_mode::kUser], d.samples[sample_mode::kKernel],
                       d.samples[sample_mode::kHypervisor], d.lost.Total());
  }
  return out;
}

std::string FormatLosses(const agent::AgentStatus& s) {
  const agent::Losses lost = s.lost.value_or(agent::Losses{});
  if (s.note) {  // Xen: only what the rings' headers count
    return fmt::format("\nlost: {} records to full rings\nnote: {}\n", lost.ring_full, EscapeForTerminal(*s.note));
  }
  return fmt::format("\nlost in the hypervisor: {} ring full, {} corrupt index, {} no ring, {} in "
                     "unprofiled domains; {} idle samples\n",
                     lost.ring_full, lost.corrupt_index.value_or(0), lost.no_ring.value_or(0),
                     lost.unprofiled_domain.value_or(0), s.idle_samples.value_or(0));
}

std::string FormatContinuous(const agent::ContinuousStatus& c) {
  const uint64_t used = c.bytes + c.other_bytes;
  std::string out = fmt::format(
      "windows: {} s each; window {} in progress since {}{}; {} kept, {} of {} on disk ({:.0f}%, the current "
      "session and build-id cache included), none older than {}\n",
      static_cast<double>(c.window_ns) / 1e9, c.index, FormatLocalTime(c.start_ns),
      c.clock == "sim" ? " (simulated time)" : "", Plural(c.windows, "window"), FormatBytes(used),
      FormatBytes(c.keep_bytes), c.keep_bytes != 0 ? 100.0 * static_cast<double>(used) / static_cast<double>(c.keep_bytes) : 0.0,
      FormatDuration(c.keep_age_ns));
  if (c.removed != 0 || c.thinned != 0) {
    out += fmt::format("budget:  {} removed and {} reduced to their aggregate since hvprofd started\n",
                       Plural(c.removed, "window"), Plural(c.thinned, "window"));
  }
  if (c.last_problem) out += fmt::format("WINDOWS: {}\n", EscapeForTerminal(*c.last_problem));
  return out;
}

std::string FormatSched(const agent::SchedStatus& sched) {
  uint64_t total = 0;
  std::string causes;
  for (const store::SchedLossField& field : store::kSchedLossFields) {
    const uint64_t n = sched.lost.*field.member;
    if (n == 0) continue;
    total += n;
    causes += fmt::format("{}{} {}", causes.empty() ? "" : ", ", field.name, n);
  }
  std::string out = fmt::format("sched:   {} scheduling records from {} stored; {} lost{}\n", sched.records,
                                EscapeForTerminal(sched.source), total, causes.empty() ? "" : " (" + causes + ")");
  for (const std::string& note : sched.notes) out += fmt::format("note: {}\n", EscapeForTerminal(note));
  return out;
}

}  // namespace

std::string FormatStatus(const agent::AgentStatus& s) {
  std::string out;
  const bool guest = s.role == agent::AgentRole::kGuest;
  if (guest) {
    out += fmt::format("hvprofd: running in {} (an active guest); {}\n", EscapeForTerminal(s.label),
                       s.joined ? "joined profiling" : "not joined yet: run `hvprof --start`");
    out += fmt::format("dom0's profiler: {}{}\n", EscapeForTerminal(s.state), s.profiling ? " (counters running)" : "");
  } else {
    out += fmt::format("hvprofd: running; profiling {}\n", s.profiling ? "on" : "off");
  }
  out += fmt::format("machine: {} ({}), {} CPUs, {}\n", EscapeForTerminal(s.machine), EscapeForTerminal(s.platform),
                     s.cpus, EscapeForTerminal(s.cpu_type));
  if (!guest) out += fmt::format("engine:  {}\n", EscapeForTerminal(s.state));
  if (s.sim) {
    out += fmt::format("clock:   {:.3f} s simulated{}\n", static_cast<double>(s.sim->time_ns) / 1e9,
                       s.sim->halted ? " (halted: duration reached)" : "");
  }
  out += fmt::format("session: {} ({} stored)\n", EscapeForTerminal(s.session), Plural(s.samples_stored, "sample"));
  if (s.continuous) out += FormatContinuous(*s.continuous);
  if (s.store.failed != 0) {
    out += fmt::format("NOT WRITTEN: {} ({}) could not be written to the session{}; free space there\n",
                       Plural(s.store.failed, "sample"), Plural(s.store.failed_chunks, "chunk"),
                       s.store.error ? fmt::format(" (now failing: {})", EscapeForTerminal(*s.store.error))
                                     : std::string(" (writing works again)"));
  }
  for (const agent::EventStatus& event : s.events) {
    out += fmt::format("event:   {}:{} on counter {} (unit mask {:#04x}, {}{})\n", EscapeForTerminal(event.name),
                       event.count, event.counter, event.unit_mask, event.kernel ? "kernel" : "",
                       event.user ? " user" : "");
  }
  out += fmt::format("buffers: {} samples per ring, notify at {}, poll every {} ms\n", s.ring_capacity, s.watermark,
                     s.poll_interval_ms);
  out += FormatDomains(s);
  if (guest) return out;  // engine-wide losses are dom0's to see
  out += FormatLosses(s);
  if (s.sched) out += FormatSched(*s.sched);  // --sched, on any platform
  return out;
}

}  // namespace hvprof::control
