#include "hvprof/control/hypervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "hvprof/base/json_fields.h"
#include "hvprof/base/process.h"
#include "hvprof/hv/protocol.h"

namespace hvprof::control {

std::string RunDirOrDefault(const std::string& run_dir) { return run_dir.empty() ? hv::DefaultRunDir() : run_dir; }

namespace {

// Starts hvprof-hv as `spec` says, serving `run_dir`, its output in spec.log_path. `scoped`: it
// dies with this process; otherwise it is detached, in a session of its own.
Result<pid_t> Spawn(const HypervisorSpec& spec, const std::string& run_dir, bool scoped) {
  std::vector<std::string> args{spec.hv_path, "--platform=" + spec.platform, "--run-dir=" + run_dir};
  if (spec.platform == "sim") {
    if (!spec.scenario.empty()) args.push_back("--scenario=" + spec.scenario);
    if (spec.advance_on_demand) args.push_back("--speed=max");
  } else if (!spec.domain_map.empty()) {
    args.push_back("--domain-map=" + spec.domain_map);
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return ErrnoError(errno, "fork");
  if (child == 0) {
    if (scoped) {
      // It dies with this process, and holds none of its output: a caller reading our stdout
      // to its end must not wait on an orphaned hvprof-hv. In a process group of its own, a
      // Ctrl-C on the terminal reaches the workload and hvprof, not the machine the run still
      // needs to stop and save.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() == 1) ::_exit(127);
    } else {
      ::setsid();
    }
    const int log = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                           0644);
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    const int out = log >= 0 ? log : null;
    if (out >= 0) {
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
    }
    ::execv(spec.hv_path.c_str(), argv.data());
    ::_exit(127);
  }
  return child;
}

// Whether `pid` has ended: reaped here if it is this process's child, else gone or a zombie
// (waiting for a parent that may never reap it).
bool Ended(pid_t pid) {
  const pid_t reaped = ::waitpid(pid, nullptr, WNOHANG);
  if (reaped == pid) return true;
  if (reaped == 0) return false;  // our child, still running
  return !ProcessRunning(pid);
}

// Ends `pid`: SIGTERM, and SIGKILL if it is still there after `grace`. Whether it had to be killed.
bool End(pid_t pid, std::chrono::milliseconds grace) {
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (!Ended(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (!Ended(pid)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The last line hvprof-hv wrote, which says why it stopped.
std::string LastLogLine(const std::string& log_path) {
  auto log = ReadFileToString(log_path, size_t{16} << 20, Links::kRefuse);
  std::string last = log ? log.value() : "";
  while (!last.empty() && last.back() == '\n') last.pop_back();
  if (const size_t cut = last.rfind('\n'); cut != std::string::npos) last = last.substr(cut + 1);
  return last.empty() ? "see " + log_path : last;
}

// Waits until the hvprof-hv `child` serves `run_dir`: its pid file names it and its dom0
// socket answers (a socket left by an earlier one does not count).
Result<void> WaitServing(pid_t child, const HypervisorSpec& spec, const std::string& run_dir) {
  // On a busy machine starting takes longer: the deadline moves on while hvprof-hv uses CPU.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  CpuProgress progress(child);
  const std::string pid_file = run_dir + "/hvprof-hv.pid";
  for (;;) {
    if (std::chrono::steady_clock::now() >= deadline) {
      if (!progress.Advanced()) break;
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    }
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        return MakeError(ErrorKind::kNotFound, "cannot run {}: is hvprof installed completely?", spec.hv_path);
      }
      return MakeError(ErrorKind::kUnsupported, "hvprof-hv --platform={} could not start: {}", spec.platform,
                       LastLogLine(spec.log_path));
    }
    auto pid = ReadFileToString(pid_file, 4096, Links::kRefuse);
    if (pid && std::atoi(pid.value().c_str()) == child && ServingPlatform(run_dir) == spec.platform) return Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  End(child, std::chrono::seconds(5));
  return MakeError(ErrorKind::kIo, "hvprof-hv --platform={} did not start, and used no CPU, for 30 s; see {}", spec.platform,
                   spec.log_path);
}

// The pid that holds the lock of `run_dir`'s hvprof-hv.pid, i.e. the hvprof-hv serving it; 0
// when none does.
pid_t LockHolder(const std::string& run_dir) {
  const auto holder = ReadPidFile(run_dir + "/hvprof-hv.pid");
  return holder && holder->held ? static_cast<pid_t>(std::atoi(holder->pid.c_str())) : 0;
}

}  // namespace

bool NeedsHostedHypervisor(std::string_view platform) { return platform == "sim" || platform == "linux"; }

std::string ServingPlatform(const std::string& run_dir, uint16_t domain) {
  // A stopped or hung hvprof-hv (or whatever else listens there) must not hang the caller.
  auto link = agent::ConnectHostedDomain(run_dir, domain, std::chrono::seconds(2));
  return link ? link.value()->platform_name() : std::string();
}

std::string ProfilerDriver(const std::string& run_dir, uint16_t domain) {
  const auto holder = ReadPidFile(hv::AgentLockPath(hv::DomainSocketPath(RunDirOrDefault(run_dir), domain)));
  if (!holder || !holder->held) return {};
  return holder->note.empty() ? std::string("?") : holder->note;
}

PlatformChoice ChoosePlatform(const std::string& run_dir, uint16_t domain, bool xen_host) {
  const std::string where = RunDirOrDefault(run_dir);
  if (std::string serving = ServingPlatform(run_dir, domain); !serving.empty()) {
    return {serving, fmt::format("the hvprof-hv serving {} runs it", where)};
  }
  if (xen_host) return {"xen", "this is a Xen host"};
  return {"linux", fmt::format("this host, through perf_event_open (no hvprof-hv serves {}, and this is not a Xen "
                               "host; --platform=sim profiles a simulated one)",
                               where)};
}

Result<std::unique_ptr<ScopedHypervisor>> ScopedHypervisor::Start(const HypervisorSpec& spec) {
  std::string pattern = std::filesystem::temp_directory_path().string() + "/hvprof-run-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return ErrnoError(errno, "mkdtemp");
  auto own = std::unique_ptr<ScopedHypervisor>(new ScopedHypervisor(pattern));
  // Without a log of the caller's, its output goes into its run directory, gone with it.
  HypervisorSpec started = spec;
  if (started.log_path.empty()) started.log_path = pattern + "/hvprof-hv.log";
  HVPROF_TRY(child, Spawn(started, pattern, true));
  own->pid_ = child;
  if (auto serving = WaitServing(child, started, pattern); !serving) {
    own->pid_ = 0;
    own->keep_run_dir_ = spec.log_path.empty();  // the message may send the user to its log there
    return serving.error();
  }
  return own;
}

ScopedHypervisor::~ScopedHypervisor() {
  if (pid_ > 0) End(pid_, std::chrono::seconds(5));
  std::error_code ignored;
  if (!keep_run_dir_) std::filesystem::remove_all(run_dir_, ignored);
}

Result<int> StartOwnHypervisor(const HypervisorSpec& spec, const std::string& run_dir,
                               const store::SessionPaths& paths) {
  const std::string dir = RunDirOrDefault(run_dir);
  HVPROF_TRYV(MakePrivateDirectory(dir, "the run directory", "or give another --run-dir"));
  HVPROF_TRY(child, Spawn(spec, dir, false));
  HVPROF_TRYV(WaitServing(child, spec, dir));  // which ends it if it does not serve
  const nlohmann::json record{{"pid", child}, {"platform", spec.platform}, {"run_dir", dir},
                              {"scenario", spec.scenario}, {"log", spec.log_path}};
  if (auto written = WriteFileAtomically(paths.root + "/" + kOwnHypervisorFile, record.dump(1) + "\n"); !written) {
    End(child, std::chrono::seconds(5));
    return written.error();
  }
  return static_cast<int>(child);
}

Result<std::string> StopOwnHypervisor(const store::SessionPaths& paths) {
  const std::string path = paths.root + "/" + kOwnHypervisorFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  // The record decides which process root signals: only from a root only root and we can change.
  HVPROF_TRYV(store::CheckSessionDirectories(paths));
  HVPROF_TRY(text, ReadFileToString(path, 64 * 1024, Links::kRefuse));
  HVPROF_TRY(record, json::Node::Parse(text, path, ErrorKind::kCorrupt));
  HVPROF_TRY(pid, record.Get<int>("pid"));
  HVPROF_TRY(platform, record.Get<std::string>("platform", "sim"));
  HVPROF_TRY(run_dir, record.Get<std::string>("run_dir"));
  std::string said;
  // Only the hvprof-hv it names, and only while that one still serves the run directory it was
  // started in (holding its pid file's lock): after a restart or a reboot, the pid may be
  // anything, or another hvprof-hv that --start-daemon did not start.
  if (pid > 1 && LockHolder(run_dir) == pid) {
    const bool killed = End(pid, std::chrono::seconds(5));
    said = fmt::format("hvprof-hv --platform={} (pid {}), which --start-daemon started, {}", EscapeForTerminal(platform),
                       pid, killed ? "did not end within 5 s and was killed" : "has ended");
  }
  std::filesystem::remove(path, ec);
  return said;
}

}  // namespace hvprof::control
