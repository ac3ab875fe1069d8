// hvprof's call stacks on linux against perf's (issue 18): the callpaths fixture, built with
// frame pointers, reaches one hot function through two known paths with 2/3 and 1/3 of the
// work. `hvprof run --platform=linux --callgraph=16` and `perf record -g` profile the same
// workload at the same cpu-clock period, and each path's share of the workload's samples must
// agree between the two tools and with the design. Skipped, with the reason, where
// perf_event_open is not usable or perf is not installed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "programs.h"
#include "run_support.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::CommandResult;
using hvprof::testing::FindOnPath;
using hvprof::testing::LinuxRun;
using hvprof::testing::PerfUsable;
using hvprof::testing::RunProgram;
using hvprof::testing::SkipTest;
using hvprof::testing::TempDir;

namespace {

const std::string kFixture = HVPROF_LINUX_CALLPATHS;
const std::string kComm = "linux_callpaths";  // the fixture's comm (15 characters, all kept)
const std::string kPrefix = "callpaths_";     // every function of the fixture but main
// About 1.5 s of CPU on a 2 GHz x86-64, 6000 samples at 4 kHz: enough to compare shares
// with a margin of several standard deviations, short enough to run twice in a few seconds.
const std::string kRounds = "350";
const std::string kPeriodNs = "250000";  // cpu-clock every 250 us: 4 kHz
// Below this the sampling noise alone could part the tools' shares by 5 points: the standard
// deviation of the difference of two shares near 1/3 of n samples each is sqrt(2 * 2/9 / n),
// 1.5 points at 2000.
constexpr uint64_t kMinSamples = 2000;

struct KnownPath {
  std::string frames;  // from main to the sampled function
  double designed;     // its share of the work
};
const KnownPath kPaths[] = {
    {"main;callpaths_run;callpaths_outer_a;callpaths_caller_a;callpaths_hot", 2.0 / 3.0},
    {"main;callpaths_run;callpaths_outer_b;callpaths_caller_b;callpaths_hot", 1.0 / 3.0},
};

struct Stack {
  std::vector<std::string> frames;  // root first
  uint64_t count = 0;
};

// What one tool saw of the workload: its user-mode samples whose sampled function is the
// fixture's own (by name, so the same in both tools and independent of the walk).
struct Workload {
  uint64_t samples = 0;
  uint64_t reach_main = 0;  // of those, samples whose stack goes up to main
  std::map<std::string, uint64_t> from_main;  // stacks from main to the leaf, "main;...;leaf"
  std::map<std::string, uint64_t> whole;      // whole stacks, for messages

  void Add(const Stack& stack) {
    if (stack.frames.empty() || !stack.frames.back().starts_with(kPrefix)) return;
    samples += stack.count;
    std::string joined;
    size_t main_at = std::string::npos;  // where the outermost "main" starts in `joined`
    for (size_t i = 0; i < stack.frames.size(); ++i) {
      if (i > 0) joined += ';';
      if (main_at == std::string::npos && stack.frames[i] == "main") main_at = joined.size();
      joined += stack.frames[i];
    }
    whole[joined] += stack.count;
    if (main_at != std::string::npos) {
      from_main[joined.substr(main_at)] += stack.count;
      reach_main += stack.count;
    }
  }
  double Share(const std::string& path) const {
    const auto found = from_main.find(path);
    return found == from_main.end() ? 0.0 : static_cast<double>(found->second) / static_cast<double>(samples);
  }
  // The most sampled stacks, for messages.
  std::string Top() const {
    std::vector<std::pair<uint64_t, std::string>> sorted;
    for (const auto& [stack, count] : whole) sorted.emplace_back(count, stack);
    std::sort(sorted.rbegin(), sorted.rend());
    std::string text = fmt::format("{} samples, {} up to main", samples, reach_main);
    for (size_t i = 0; i < sorted.size() && i < 5; ++i) text += fmt::format("\n  {} {}", sorted[i].second, sorted[i].first);
    return text;
  }
};

// hvprof-report --format=folded --stack-root=none: "frame;frame;...;leaf COUNT" per line.
Workload FromFolded(const std::string& text) {
  Workload workload;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    Stack stack;
    stack.count = std::strtoull(line.c_str() + space + 1, nullptr, 10);
    std::string_view frames(line.data(), space);
    while (!frames.empty()) {
      const size_t semicolon = frames.find(';');
      stack.frames.emplace_back(frames.substr(0, semicolon));
      frames = semicolon == std::string_view::npos ? std::string_view() : frames.substr(semicolon + 1);
    }
    workload.Add(stack);
  }
  return workload;
}

// `perf script -F comm,ip,sym,dso` of a `perf record -g`: per sample a line with the comm,
// then one line per frame, leaf first, "\tIP SYMBOL (DSO)", then an empty line. Keeps the
// samples of `comm` taken in user mode (as hvprof-report --mode=user).
Workload FromPerfScript(const std::string& text, const std::string& comm) {
  Workload workload;
  std::istringstream lines(text);
  std::string line;
  Stack stack;
  bool ours = false, kernel_leaf = false;
  const auto finish = [&] {
    if (ours && !kernel_leaf && !stack.frames.empty()) {
      std::reverse(stack.frames.begin(), stack.frames.end());
      stack.count = 1;
      workload.Add(stack);
    }
    stack = Stack();
    ours = kernel_leaf = false;
  };
  while (std::getline(lines, line)) {
    if (line.empty()) {
      finish();
      continue;
    }
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (first == 0) {  // a sample's header: its comm
      finish();
      ours = line.substr(0, line.find_last_not_of(" \t") + 1) == comm;
      continue;
    }
    // "IP SYMBOL (DSO)"
    const std::string frame = line.substr(first);
    const size_t space = frame.find(' ');
    const size_t open = frame.rfind(" (");
    if (space == std::string::npos || open == std::string::npos || open < space) continue;
    if (stack.frames.empty()) {
      const uint64_t ip = std::strtoull(frame.substr(0, space).c_str(), nullptr, 16);
      const std::string dso = frame.substr(open + 2);
      kernel_leaf = ip >= 0xffff800000000000ull || dso.starts_with("[kernel");
    }
    stack.frames.push_back(frame.substr(space + 1, open - space - 1));
  }
  finish();
  return workload;
}

// perf from PATH, or "" after SkipTest with the reason.
std::string FindPerf() {
  const std::string found = FindOnPath("perf");
  if (found.empty()) {
    SkipTest("perf is not installed (Debian: linux-perf): the call stacks are compared with perf record -g");
    return "";
  }
  const CommandResult version = RunProgram({found, "--version"});
  if (version.status != 0) {
    SkipTest(fmt::format("{} --version failed (no perf for this kernel?): {}{}", found, version.out, version.err));
    return "";
  }
  return found;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

TEST_CASE("hvprof run --platform=linux: call stacks of a frame-pointer workload match perf record -g",
          "[linux][live][run][stacks]") {
  if (!PerfUsable()) return;
  const std::string perf = FindPerf();
  if (perf.empty()) return;

  // hvprof: the whole host, chains 16 deep; the workload's stacks are told apart by name.
  const auto hvprof_start = std::chrono::steady_clock::now();
  LinuxRun run;
  run.Run({"--callgraph=16", "-e", "CPU_CLOCK:" + kPeriodNs, "--", kFixture, "--rounds", kRounds});
  const Workload hv = FromFolded(run.Folded({"--stack-root=none", "--mode=user"}));
  const double hvprof_seconds = Seconds(hvprof_start);

  // perf: the workload alone, the same event and period, frame-pointer chains.
  const auto perf_start = std::chrono::steady_clock::now();
  TempDir dir;
  const std::string data = dir.File("perf.data");
  const CommandResult record = RunProgram({perf, "record", "-q", "-N", "-g", "-e", "cpu-clock", "-c", kPeriodNs,
                                           "-o", data, "--", kFixture, "--rounds", kRounds});
  INFO("perf record: " << record.out << record.err);
  REQUIRE(record.status == 0);
  const CommandResult script = RunProgram({perf, "script", "-i", data, "-F", "comm,ip,sym,dso"});
  INFO("perf script: " << script.err);
  REQUIRE(script.status == 0);
  const Workload pf = FromPerfScript(script.out, kComm);
  const double perf_seconds = Seconds(perf_start);

  INFO("hvprof: " << hv.Top());
  INFO("perf: " << pf.Top());
  REQUIRE(hv.samples >= kMinSamples);
  REQUIRE(pf.samples >= kMinSamples);
  // The frame-pointer walk works: nearly every stack goes beyond the sampled function, up to
  // main (a few samples land where no frame is set up yet, e.g. on a function's first
  // instruction).
  const double hv_main = static_cast<double>(hv.reach_main) / static_cast<double>(hv.samples);
  const double pf_main = static_cast<double>(pf.reach_main) / static_cast<double>(pf.samples);
  CHECK(hv_main >= 0.95);
  std::string measured;
  for (const KnownPath& path : kPaths) {
    const double hv_share = hv.Share(path.frames), pf_share = pf.Share(path.frames);
    INFO(fmt::format("{}: hvprof {:.4f}, perf {:.4f}, designed {:.4f}", path.frames, hv_share, pf_share,
                     path.designed));
    // The same stacks in both tools: within 5 points (at least 3.3 standard deviations of the
    // sampling noise, 5.5 at 6000 samples).
    CHECK(std::fabs(hv_share - pf_share) <= 0.05);
    // And near the design; loosely, as it is real hardware's timing.
    CHECK(std::fabs(hv_share - path.designed) <= 0.15);
    CHECK(std::fabs(pf_share - path.designed) <= 0.15);
    measured += fmt::format(" {}: hvprof {:.3f} perf {:.3f} (designed {:.3f});",
                            path.frames.substr(path.frames.rfind(';', path.frames.rfind(';') - 1) + 1), hv_share,
                            pf_share, path.designed);
  }
  std::printf("measured (stacks): hvprof %llu samples (%.3f up to main) in %.1f s, perf %llu (%.3f) in %.1f s;%s\n",
              static_cast<unsigned long long>(hv.samples), hv_main, hvprof_seconds,
              static_cast<unsigned long long>(pf.samples), pf_main, perf_seconds, measured.c_str());
}
