#include "qemu_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

// Listeners are part of Catch's external interfaces.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "programs.h"
#include "skip.h"

namespace hvprof::testing {

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string Hex8(uint64_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08llx", static_cast<unsigned long long>(value));
  return text;
}

void PadTo4(std::string& data) {
  while (data.size() % 4 != 0) data.push_back('\0');
}

void AppendCpioEntry(std::string& archive, uint32_t inode, uint32_t mode, const std::string& name,
                     const std::string& contents) {
  archive += "070701";
  for (const uint64_t field : {uint64_t{inode}, uint64_t{mode}, uint64_t{0}, uint64_t{0}, uint64_t{1}, uint64_t{0},
                               uint64_t{contents.size()}, uint64_t{0}, uint64_t{0}, uint64_t{0}, uint64_t{0},
                               uint64_t{name.size() + 1}, uint64_t{0}}) {
    archive += Hex8(field);
  }
  archive += name;
  archive.push_back('\0');
  PadTo4(archive);
  archive += contents;
  PadTo4(archive);
}

// What QEMU did: its exit status, whether the deadline killed it, its wall time.
struct QemuRun {
  int status = -1;
  bool timed_out = false;
  bool never_ready = false;  // dom0 did not report that it booted in time
  double seconds = 0;
};

// Runs argv with stdout and stderr to `log`, killed at the deadline and with the test process
// (PR_SET_PDEATHSIG), so that no QEMU outlives the test.
// `ready_file` must hold `ready_mark` within `ready_seconds`, or QEMU is ended early with
// `never_ready` set: a dom0 that hangs while it boots (seen under the emulator on a loaded
// machine) is not what the tests check.
QemuRun RunWithDeadline(const std::vector<std::string>& argv, const std::string& log, int timeout_seconds,
                        const std::string& ready_file, const std::string& ready_mark, int ready_seconds) {
  const pid_t parent = ::getpid();
  const auto start = Clock::now();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (out < 0 || in < 0) ::_exit(127);
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& word : argv) args.push_back(const_cast<char*>(word.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  QemuRun run;
  const auto deadline = start + std::chrono::seconds(timeout_seconds);
  const auto ready_deadline = start + std::chrono::seconds(ready_seconds);
  bool ready = false;
  std::optional<Clock::time_point> terminated;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) break;
    const auto now = Clock::now();
    if (!ready && !terminated && now >= ready_deadline) {
      ready = ReadWhole(ready_file).find(ready_mark) != std::string::npos;
      if (!ready) {
        ::kill(child, SIGTERM);
        run.never_ready = true;
        terminated = now;
      }
    }
    if (!terminated && now >= deadline) {
      ::kill(child, SIGTERM);
      run.timed_out = true;
      terminated = now;
    } else if (terminated && now >= *terminated + std::chrono::seconds(5)) {
      ::kill(child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

double UptimeField(const std::string& line) {
  const size_t at = line.find("uptime=");
  return at == std::string::npos ? 0 : std::strtod(line.c_str() + at + 7, nullptr);
}

// What a result channel said (dom0-init.sh writes it): begin, output with its byte count, end.
struct Channel {
  bool completed = false;
  double ready_uptime = 0;
  double done_uptime = 0;
  std::string problem;
};

Channel ParseChannel(const std::string& data, std::vector<Dom0Result>& results) {
  Channel channel;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string line = data.substr(pos, end - pos);
    // A guest's console log may hold the kernel's lines before the first frame.
    const size_t mark = line.find("@@hvprof-");
    line.erase(0, mark == std::string::npos ? line.size() : mark);
    pos = end + 1;
    unsigned long number = 0;
    unsigned long long bytes = 0;
    int status = 0;
    if (line.rfind("@@hvprof-boot ", 0) == 0) {
      channel.ready_uptime = UptimeField(line);
    } else if (std::sscanf(line.c_str(), "@@hvprof-output %lu %llu", &number, &bytes) == 2) {
      if (number >= 1 && number <= results.size()) {
        results[number - 1].output = data.substr(std::min(pos, data.size()), bytes);
      }
      if (pos + bytes > data.size()) {
        channel.problem += "the output of command " + std::to_string(number) + " was cut short; ";
      }
      pos += bytes + 1;  // the output, and the newline after it
    } else if (std::sscanf(line.c_str(), "@@hvprof-end %lu rc=%d", &number, &status) == 2) {
      if (number >= 1 && number <= results.size()) results[number - 1].status = status;
    } else if (line.rfind("@@hvprof-done", 0) == 0) {
      channel.completed = true;
      channel.done_uptime = UptimeField(line);
    }
  }
  return channel;
}

// A test archive's commands: DIR/cmd.1, cmd.2, ... and DIR/env (dom0-init.sh runs them).
void AddCommands(std::vector<std::pair<std::string, std::string>>& files, const std::string& dir,
                 const std::vector<std::string>& commands, int command_timeout_seconds) {
  for (size_t i = 0; i < commands.size(); ++i) files.emplace_back(dir + "cmd." + std::to_string(i + 1), commands[i] + "\n");
  files.emplace_back(dir + "env", "HVPROF_COMMAND_TIMEOUT=" + std::to_string(command_timeout_seconds) + "\n");
}

std::string DescribeResults(const std::vector<Dom0Result>& results) {
  std::ostringstream out;
  for (size_t i = 0; i < results.size(); ++i) {
    out << "--- command " << i + 1 << ": " << results[i].command << "\n"
        << results[i].output << (results[i].output.empty() || results[i].output.back() == '\n' ? "" : "\n")
        << "--- status " << results[i].status << "\n";
  }
  return out.str();
}

std::string WithoutCarriageReturns(std::string text) {
  std::erase(text, '\r');
  return text;
}

// The last boot of the running test case, printed whole if the test case fails: Catch's
// INFO would wrap the console's lines.
std::string& LastBoot() {
  static std::string description;
  return description;
}

class PrintBootOnFailure : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    TestEventListenerBase::testCaseStarting(info);
    LastBoot().clear();
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (stats.totals.assertions.failed > 0 && !LastBoot().empty()) {
      std::cout << "\n=== " << stats.testInfo.name << " failed; its boot of Xen ===\n" << LastBoot() << std::flush;
    }
    TestEventListenerBase::testCaseEnded(stats);
  }
};
CATCH_REGISTER_LISTENER(PrintBootOnFailure)

}  // namespace

std::string XenoprofProbe() {
  const std::string program = ReadWhole(HVPROF_XENOPROF_PROBE);
  REQUIRE(!program.empty());
  return program;
}

std::string CpioArchive(const std::vector<std::pair<std::string, std::string>>& files) {
  std::set<std::string> directories;
  for (const auto& [path, contents] : files) {
    for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
      directories.insert(path.substr(0, slash));
    }
  }
  std::string archive;
  uint32_t inode = 1;
  for (const std::string& directory : directories) AppendCpioEntry(archive, inode++, 040755, directory, "");
  for (const auto& [path, contents] : files) AppendCpioEntry(archive, inode++, 0100755, path, contents);
  AppendCpioEntry(archive, 0, 0, "TRAILER!!!", "");
  return archive;
}

std::string XenBoot::Describe() const {
  std::ostringstream out;
  out << "Xen under QEMU: QEMU exited with " << qemu_status << " after " << seconds << " s"
      << (timed_out ? " (killed at the deadline)" : "") << "; dom0 "
      << (completed ? "ran every command" : "did not finish its commands");
  if (completed) out << " (uptime " << dom0_ready_uptime << " s at the first, " << dom0_done_uptime << " s after the last)";
  out << "\n";
  if (!problem.empty()) out << "problem: " << problem << "\n";
  if (!recovered.empty()) out << "recovered: " << recovered << "\n";
  out << "image: " << image_info << "\n" << "xen: " << xen_version << "\n";
  out << DescribeResults(results);
  out << "--- console (" << (dir ? dir->File("console.log") : std::string("?")) << ")\n" << console;
  if (!qemu_output.empty()) out << "--- QEMU said\n" << qemu_output;
  return out.str();
}

GuestRun ParseGuest(const std::string& console, const GuestOptions& guest) {
  GuestRun run;
  for (const std::string& command : guest.commands) run.results.push_back(Dom0Result{command, "", -1});
  const Channel channel = ParseChannel(console, run.results);
  run.completed = channel.completed;
  run.problem = channel.problem;
  if (!run.completed) run.problem += "guest " + guest.name + " did not report every command; ";
  return run;
}

std::string GuestRun::Describe() const {
  return (problem.empty() ? std::string() : "problem: " + problem + "\n") + DescribeResults(results);
}

GuestOptions SpinningGuest(const std::string& name, const std::string& go, int seconds) {
  GuestOptions guest;
  guest.name = name;
  guest.command_timeout_seconds = 150;
  guest.commands = {
      "guest.sh await dom0 " + go + " 120",
      "timeout " + std::to_string(seconds) + " sh -c 'while :; do :; done'; guest.sh post spin done && "
      "guest.sh await dom0 stopped 120",
  };
  return guest;
}

std::optional<EngineXen> BuildEngineXen() {
  const std::string workdir = HVPROF_XEN_ENGINE_WORKDIR;
  const CommandResult built = RunProgram({HVPROF_XEN_ENGINE_BUILD, workdir});
  if (built.status == 77) {
    SkipTest("no Xen with hvprof's engine to boot: " + WithoutCarriageReturns(built.err));
    return std::nullopt;
  }
  if (built.status != 0) {
    FAIL("xen-engine/build-xen.sh failed with status " << built.status << ":\n" << built.out << built.err);
  }
  EngineXen xen;
  xen.xen = workdir + "/4.17/build/xen";
  xen.xen_syms = workdir + "/4.17/build/xen-syms";
  xen.built = built.out.substr(0, built.out.find('\n'));
  REQUIRE(std::filesystem::exists(xen.xen));
  REQUIRE(std::filesystem::exists(xen.xen_syms));
  return xen;
}

std::optional<XenBoot> RunInDom0(const std::vector<std::string>& commands, const Dom0Options& options) {
  REQUIRE(!commands.empty());
  const std::string qemu = FindOnPath("qemu-system-x86_64");
  if (qemu.empty()) {
    SkipTest("qemu-system-x86_64 not found: install qemu-system-x86 (scripts/install-deps.sh)");
    return std::nullopt;
  }
  // The image: built or brought up to date by the script, which says what is missing.
  const std::string cache = HVPROF_QEMU_CACHE_DIR;
  const CommandResult image = RunProgram({HVPROF_QEMU_BUILD_IMAGE, cache, HVPROF_QEMU_BIN_DIR});
  if (image.status == 77) {
    SkipTest("no image to boot: " + WithoutCarriageReturns(image.err));
    return std::nullopt;
  }
  if (image.status != 0) {
    FAIL("tests/qemu/build-image.sh failed with status " << image.status << ":\n" << image.out << image.err);
  }
  for (const auto& [path, contents] : options.files) REQUIRE((!path.empty() && path[0] == '/'));

  XenBoot boot;
  boot.dir = std::make_shared<TempDir>();
  boot.image_info = ReadWhole(cache + "/image.info");
  std::replace(boot.image_info.begin(), boot.image_info.end(), '\n', ' ');

  // The test archive, after the image's own.
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& command : commands) boot.results.push_back(Dom0Result{command, "", -1});
  AddCommands(files, "test/", commands, options.command_timeout_seconds);
  for (const auto& [path, contents] : options.files) files.emplace_back(path.substr(1), contents);
  for (const GuestOptions& guest : options.guests) {
    REQUIRE((!guest.name.empty() && guest.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos));
    AddCommands(files, "test/guest-" + guest.name + "/", guest.commands, guest.command_timeout_seconds);
  }
  std::string initrd = ReadWhole(cache + "/initrd.img");
  REQUIRE(!initrd.empty());
  PadTo4(initrd);  // the kernel finds the next archive at a 4-byte boundary
  initrd += CpioArchive(files);
  boot.dir->Write("initrd.img", initrd);

  const std::string console_log = boot.dir->File("console.log");
  const std::string results_log = boot.dir->File("results.log");
  for (const std::string& path : {cache, boot.dir->path(), options.xen}) {
    REQUIRE(path.find(',') == std::string::npos);  // QEMU's option syntax
  }
  const std::vector<std::string> argv = {
      qemu, "-accel", options.accel, "-cpu", options.cpu, "-smp", "2", "-m", std::to_string(options.memory_mb),
      "-display", "none", "-nodefaults", "-no-reboot", "-monitor", "none",
      "-serial", "file:" + console_log, "-serial", "file:" + results_log,
      "-kernel", options.xen.empty() ? cache + "/xen" : options.xen,
      "-append", "console=com1 com1=115200,8n1 dom0_mem=1024M,max:1024M loglvl=all guest_loglvl=all " +
                     options.xen_arguments,
      "-initrd", cache + "/vmlinux console=hvc0 earlyprintk=xen panic=-1 quiet " + options.dom0_arguments + "," +
                     boot.dir->File("initrd.img")};
  // dom0 reports "@@hvprof-boot" once it is up (10 to 30 s here). A boot that hangs before
  // that is tried once more, and said.
  constexpr int kReadySeconds = 120;
  QemuRun run = RunWithDeadline(argv, boot.dir->File("qemu.log"), options.timeout_seconds, results_log,
                                "@@hvprof-boot", kReadySeconds);
  if (run.never_ready) {
    boot.problem += "dom0 did not come up within " + std::to_string(kReadySeconds) +
                    " s (the first boot's console is first-console.log) and was booted again; ";
    std::filesystem::rename(console_log, boot.dir->File("first-console.log"));
    run = RunWithDeadline(argv, boot.dir->File("qemu.log"), options.timeout_seconds, results_log, "@@hvprof-boot",
                          kReadySeconds);
  }
  boot.qemu_status = run.status;
  boot.timed_out = run.timed_out;
  boot.seconds = run.seconds;
  boot.qemu_output = ReadWhole(boot.dir->File("qemu.log"));
  boot.console = WithoutCarriageReturns(ReadWhole(console_log));
  boot.channel = ReadWhole(results_log);
  const Channel channel = ParseChannel(boot.channel, boot.results);
  boot.completed = channel.completed;
  boot.dom0_ready_uptime = channel.ready_uptime;
  boot.dom0_done_uptime = channel.done_uptime;
  boot.problem += channel.problem;
  // The console echoes each end frame ("@@hvprof-end N rc=S"): a frame the result channel
  // lost (seen once in a few dozen boots, right after profiling started) is taken from there.
  for (size_t i = 0; i < boot.results.size(); ++i) {
    if (boot.results[i].status != -1) continue;
    const std::string frame = "@@hvprof-end " + std::to_string(i + 1) + " rc=";
    const size_t at = boot.console.find(frame);
    if (at == std::string::npos) continue;
    boot.results[i].status = std::atoi(boot.console.c_str() + at + frame.size());
    boot.recovered += "command " + std::to_string(i + 1) + "'s status came from the console; ";
  }

  std::istringstream lines(boot.console);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("(XEN) ");
    if (at == std::string::npos) continue;
    boot.xen_lines.push_back(line.substr(at));
    if (boot.xen_version.empty() && line.find("(XEN) Xen version ", at) == at) boot.xen_version = line.substr(at);
  }
  if (run.never_ready) {
    boot.problem += "dom0 did not come up the second time either; ";
  } else if (run.timed_out) {
    boot.problem += "QEMU was still running after " + std::to_string(options.timeout_seconds) + " s and was killed; ";
  } else if (!boot.completed) {
    boot.problem += "dom0 stopped before reporting every command (a crash? see the console); ";
  }
  LastBoot() = boot.Describe();
  return boot;
}

}  // namespace hvprof::testing
