// JIT-compiled code named from what real runtimes write: Node's perf map (--perf-basic-prof)
// and jitdump (--perf-prof), the JVM's perf map (-XX:+DumpPerfMapAtExit), CPython 3.12's perf
// trampolines (-X perf). Each runs a program with two hot functions whose work is in a 2:1
// ratio (tests/linux/fixtures/jit); the report must name both, in that ratio, after the process
// has exited and its files were removed. Skipped, with the reason, where the runtime is absent.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run_support.h"
#include "skip.h"

using hvprof::testing::CommandResult;
using hvprof::testing::FindOnPath;
using hvprof::testing::LinuxRun;
using hvprof::testing::PerfUsable;
using hvprof::testing::RunProgram;
using hvprof::testing::SkipTest;
using hvprof::testing::TempDir;
using Json = nlohmann::json;

namespace {

const std::string kFixtures = HVPROF_JIT_FIXTURES;

// Samples of the rows whose image is a process's JIT code and whose symbol names `function`.
double JitSamples(const Json& report, const std::string& function, std::string* image = nullptr) {
  double samples = 0;
  for (const Json& row : report["rows"]) {
    const std::string symbol = row["symbol"].get<std::string>();
    if (!row["image"].get<std::string>().starts_with("jit (pid ") || symbol.find(function) == std::string::npos) continue;
    CHECK(row["resolved"] == true);
    if (image != nullptr) *image = row["image"].get<std::string>();
    samples += row["samples"][0].get<double>();
  }
  return samples;
}

// hotA against hotB: the design is 2:1, and the issue asks for 1.5 to 2.7.
void CheckRatio(const Json& report) {
  std::string image;
  const double a = JitSamples(report, "hotA", &image);
  const double b = JitSamples(report, "hotB");
  INFO(fmt::format("hotA {} samples, hotB {} samples, in {}", a, b, image));
  REQUIRE(b > 200);
  CHECK(a / b > 1.5);
  CHECK(a / b < 2.7);
}

// Removes what the runtime left behind (as a tmp cleaner would): the report must not need it.
void RemoveRuntimeFiles(const std::string& pattern_dir, const std::string& prefix, const std::string& suffix) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(pattern_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix) && name.ends_with(suffix)) std::filesystem::remove(entry.path(), ec);
  }
}

// A CPython of 3.12 or later: on PATH, or installed by pyenv ($PYENV_ROOT, ~/.pyenv). Each is
// asked its version (std::system: no assertion before the caller's skip). With `frame_pointers`,
// only one built with frame pointers (-fno-omit-frame-pointer in its CFLAGS), as CPython's perf
// support asks: without them a frame-pointer stack walk from the interpreter's C code does not
// reach the trampolines.
std::string FindPython312(bool frame_pointers) {
  std::vector<std::string> candidates;
  for (const char* name : {"python3", "python3.14", "python3.13", "python3.12"}) {
    const std::string found = FindOnPath(name);
    if (!found.empty()) candidates.push_back(found);
  }
  std::vector<std::string> roots;
  if (const char* root = std::getenv("PYENV_ROOT")) roots.emplace_back(root);
  if (const char* home = std::getenv("HOME")) roots.push_back(std::string(home) + "/.pyenv");
  for (const std::string& root : roots) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(root + "/versions", ec)) {
      candidates.push_back(entry.path().string() + "/bin/python3");
    }
  }
  for (const std::string& candidate : candidates) {
    if (::access(candidate.c_str(), X_OK) != 0) continue;
    const std::string check = frame_pointers ? " and \"no-omit-frame-pointer\" in "
                                               "(sysconfig.get_config_var(\"CFLAGS\") or \"\")"
                                             : "";
    const std::string command = "'" + candidate +
                                "' -c 'import sys, sysconfig; sys.exit(0 if sys.version_info >= (3, 12)" + check +
                                " else 1)' >/dev/null 2>&1";
    if (std::system(command.c_str()) == 0) return candidate;
  }
  return "";
}

}  // namespace

TEST_CASE("jit: Node's perf map names its hot functions after it exited, in their 2:1 ratio", "[linux][live][jit]") {
  if (!PerfUsable()) return;
  const std::string node = FindOnPath("node");
  if (node.empty() && SkipTest("node is not installed (Debian: nodejs)")) return;
  TempDir work;  // node may write an isolate-*-v8.log into its working directory
  LinuxRun run;
  run.Run({"--", "/bin/sh", "-c",
           fmt::format("cd '{}' && exec '{}' --perf-basic-prof '{}/hot.js' 1e6", work.path(), node, kFixtures)});
  const auto pids = run.Pids("node");
  for (uint32_t pid : pids) std::filesystem::remove(fmt::format("/tmp/perf-{}.map", pid));
  const Json report = run.Report({});
  CheckRatio(report);
  // The function names carry the script's path, as Node writes them.
  bool found = false;
  for (const Json& row : report["rows"]) {
    found |= row["symbol"].get<std::string>().find("hot.js") != std::string::npos;
  }
  CHECK(found);
}

TEST_CASE("jit: Node's jitdump names its hot functions after the dump is gone, in their 2:1 ratio",
          "[linux][live][jit]") {
  if (!PerfUsable()) return;
  const std::string node = FindOnPath("node");
  if (node.empty() && SkipTest("node is not installed (Debian: nodejs)")) return;
  TempDir work;  // node --perf-prof writes jit-PID.dump in its working directory
  LinuxRun run;
  run.Run({"--", "/bin/sh", "-c", fmt::format("cd '{}' && exec '{}' --perf-prof '{}/hot.js' 1e6", work.path(), node, kFixtures)});
  size_t dumps = 0;
  for (const auto& entry : std::filesystem::directory_iterator(work.path())) {
    dumps += entry.path().filename().string().starts_with("jit-");
  }
  REQUIRE(dumps == 1);
  RemoveRuntimeFiles(work.path(), "jit-", ".dump");
  for (uint32_t pid : run.Pids("node")) std::filesystem::remove(fmt::format("/tmp/perf-{}.map", pid));
  CheckRatio(run.Report({}));
}

TEST_CASE("jit: the JVM's perf map, written as it exits, names its hot methods in their 2:1 ratio",
          "[linux][live][jit]") {
  if (!PerfUsable()) return;
  const std::string java = FindOnPath("java");
  const std::string javac = FindOnPath("javac");
  if ((java.empty() || javac.empty()) && SkipTest("a JDK is not installed (Debian: default-jdk-headless)")) return;
  TempDir classes;
  const CommandResult compiled = RunProgram({javac, "-d", classes.path(), kFixtures + "/Hot.java"});
  INFO(compiled.err);
  REQUIRE(compiled.status == 0);
  LinuxRun run;
  run.Run({"--", java, "-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit", "-XX:CompileCommand=quiet",
           "-XX:CompileCommand=dontinline,Hot::hot*", "-cp", classes.path(), "Hot", "2000000"});
  for (uint32_t pid : run.Pids("java")) std::filesystem::remove(fmt::format("/tmp/perf-{}.map", pid));
  const Json report = run.Report({});
  CheckRatio(report);
  CHECK(JitSamples(report, "Hot.hotA(int)") > 0);
}

TEST_CASE("jit: CPython's perf trampolines (-X perf) name its hot functions in their 2:1 ratio",
          "[linux][live][jit]") {
  if (!PerfUsable()) return;
  // -X perf came with CPython 3.12. A name on PATH may be a shim of a version manager that has
  // no such interpreter; the interpreters a version manager (pyenv) installed are looked at too.
  const std::string python = FindPython312(true);
  if (python.empty()) {
    const std::string any = FindPython312(false);
    SkipTest(any.empty() ? std::string("CPython 3.12 or later is not installed (-X perf came with 3.12; looked on PATH "
                                       "and in pyenv's versions)")
                         : any + " (3.12 or later) was built without frame pointers: a frame-pointer stack walk from "
                                 "its C code cannot reach the -X perf trampolines (CPython's perf support asks for "
                                 "-fno-omit-frame-pointer)");
    return;
  }
  LinuxRun run;
  // The trampolines are frames on the call stack (the interpreter runs the code), so the
  // ratio is read from the stacks.
  run.Run({"--callgraph=32", "--", python, "-X", "perf", kFixtures + "/hot.py", "100000"});
  for (uint32_t pid : run.Pids(std::filesystem::path(python).filename().string())) {
    std::filesystem::remove(fmt::format("/tmp/perf-{}.map", pid));
  }
  const std::string folded = run.Folded({});
  double a = 0, b = 0;
  size_t begin = 0;
  while (begin < folded.size()) {
    size_t end = folded.find('\n', begin);
    if (end == std::string::npos) end = folded.size();
    const std::string line = folded.substr(begin, end - begin);
    begin = end + 1;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    const double count = std::atof(line.c_str() + space + 1);
    if (line.find("py::hotA") != std::string::npos) a += count;
    else if (line.find("py::hotB") != std::string::npos) b += count;
  }
  INFO(fmt::format("stacks through py::hotA {}, py::hotB {}", a, b));
  REQUIRE(b > 100);
  CHECK(a / b > 1.5);
  CHECK(a / b < 2.7);
}
