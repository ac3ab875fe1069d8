#include "hvprof/control/hypervisor.h"

#include <fcntl.h>
#include <signal.h>
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
#include "hvprof/base/files.h"
#include "hvprof/base/json_fields.h"
#include "hvprof/hv/protocol.h"

namespace hvprof::control {

namespace {

std::string RunDirOrDefault(const std::string& run_dir) { return run_dir.empty() ? hv::DefaultRunDir() : run_dir; }

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
      // to its end must not wait on an orphaned hvprof-hv.
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const std::string pid_file = run_dir + "/hvprof-hv.pid";
  while (std::chrono::steady_clock::now() < deadline) {
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
  ::kill(child, SIGTERM);
  return MakeError(ErrorKind::kIo, "hvprof-hv --platform={} did not start within 30 s; see {}", spec.platform,
                   spec.log_path);
}

// Ends `pid`: SIGTERM, and SIGKILL if it is still there after `grace`. Whether it had to be killed.
bool End(pid_t pid, std::chrono::milliseconds grace, bool our_child) {
  ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    if (our_child) {
      if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
    } else if (::kill(pid, 0) != 0 && errno == ESRCH) {
      return false;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  if (our_child) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  return true;
}

}  // namespace

bool NeedsHostedHypervisor(std::string_view platform) { return platform == "sim" || platform == "linux"; }

std::string ServingPlatform(const std::string& run_dir, uint16_t domain) {
  auto link = agent::ConnectHostedDomain(run_dir, domain);
  return link ? link.value()->platform_name() : std::string();
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
  HVPROF_TRY(child, Spawn(spec, pattern, true));
  own->pid_ = child;
  if (auto serving = WaitServing(child, spec, pattern); !serving) {
    own->pid_ = 0;
    return serving.error();
  }
  return own;
}

ScopedHypervisor::~ScopedHypervisor() {
  if (pid_ > 0) End(pid_, std::chrono::seconds(5), true);
  std::error_code ignored;
  std::filesystem::remove_all(run_dir_, ignored);
}

Result<int> StartOwnHypervisor(const HypervisorSpec& spec, const std::string& run_dir,
                               const store::SessionPaths& paths) {
  const std::string dir = RunDirOrDefault(run_dir);
  HVPROF_TRYV(MakeDirectories(dir));
  HVPROF_TRY(child, Spawn(spec, dir, false));
  if (auto serving = WaitServing(child, spec, dir); !serving) {
    ::waitpid(child, nullptr, WNOHANG);
    return serving.error();
  }
  const nlohmann::json record{{"pid", child}, {"platform", spec.platform}, {"run_dir", dir},
                              {"scenario", spec.scenario}, {"log", spec.log_path}};
  if (auto written = WriteFileAtomically(paths.root + "/" + kOwnHypervisorFile, record.dump(1) + "\n"); !written) {
    End(child, std::chrono::seconds(5), true);
    return written.error();
  }
  return static_cast<int>(child);
}

Result<std::string> StopOwnHypervisor(const store::SessionPaths& paths) {
  const std::string path = paths.root + "/" + kOwnHypervisorFile;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::string();
  HVPROF_TRY(text, ReadFileToString(path, 64 * 1024, Links::kRefuse));
  HVPROF_TRY(record, json::Node::Parse(text, path, ErrorKind::kCorrupt));
  HVPROF_TRY(pid, record.Get<int>("pid"));
  HVPROF_TRY(platform, record.Get<std::string>("platform", "sim"));
  std::string said;
  // Only if that pid is still an hvprof-hv: after a reboot it may be anything.
  std::error_code exe_error;
  const std::string exe = pid > 1 ? std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), exe_error).string()
                                  : std::string();
  if (!exe_error && Basename(exe).starts_with("hvprof-hv")) {
    const bool killed = End(pid, std::chrono::seconds(5), false);
    said = fmt::format("hvprof-hv --platform={} (pid {}), which --start-daemon started, {}", platform, pid,
                       killed ? "did not end within 5 s and was killed" : "has ended");
  }
  std::filesystem::remove(path, ec);
  return said;
}

}  // namespace hvprof::control
