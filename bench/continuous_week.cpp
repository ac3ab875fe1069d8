// A simulated week of continuous mode (issue 43): the default scenario (every guest passive, call
// chains, continuous mode's default 99 Hz per CPU) run by the real programs, window after window,
// with the sim's clock as fast as the machine goes. After each window the sim's ground truth is
// taken and reset: the window just closed must hold every sample the sim took in it (stored, or
// counted as lost). Every simulated day it prints both daemons' resident memory and the disk the
// windows take against their budget. No peer: perf cannot profile a simulated machine
// (bench/continuous/overhead.sh measures the cost on this host beside perf).
//   continuous_week [DAYS=7] [WINDOW=10m] [KEEP_SIZE=256M] [KEEP_AGE=2d]
// Prints FIGURE lines (bench/run-all.sh): the windows equal to ground truth (goal: all), the most
// disk the windows took over the budget (goal <= 1), the daemons' memory growth from the first
// day to the last (goal: under 16 MiB), and the wall time a simulated day takes.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hvprof/agent/hypervisor_link.h"
#include "hvprof/base/units.h"
#include "hvprof/buildid_cache/cache.h"
#include "hvprof/store/session.h"
#include "hvprof/store/windows.h"

namespace {

using Json = nlohmann::json;
const std::string kBin = HVPROF_BIN_DIR;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "continuous_week: %s\n", what.c_str());
  std::exit(2);
}

// Runs hvprof with `args`; its output goes to `log`. Dies when it fails.
void Hvprof(const std::vector<std::string>& args, const std::string& log) {
  std::fflush(stdout);  // or the child would print what is buffered again
  const pid_t child = ::fork();
  if (child < 0) Die("fork failed");
  if (child == 0) {
    if (std::freopen(log.c_str(), "a", stdout) == nullptr || std::freopen(log.c_str(), "a", stderr) == nullptr) {
      ::_exit(127);
    }
    std::vector<char*> argv;
    std::string program = kBin + "/hvprof";
    argv.push_back(program.data());
    std::vector<std::string> copies = args;
    for (std::string& arg : copies) argv.push_back(arg.data());
    argv.push_back(nullptr);
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("hvprof failed; see " + log);
}

uint64_t RssKib(long pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6));
  }
  return 0;
}

long PidIn(const std::string& file) {
  std::ifstream in(file);
  long pid = 0;
  in >> pid;
  return pid;
}

uint64_t Parse(const char* text, const char* what) {
  auto parsed = std::string_view(what) == "duration" ? hvprof::ParseDurationNs(text)
                                                    : hvprof::buildid_cache::ParseSize(text);
  if (!parsed) Die(parsed.error().message());
  return parsed.value();
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t days = argc > 1 ? std::stoull(argv[1]) : 7;
  const char* window_text = argc > 2 ? argv[2] : "10m";
  const char* keep_size_text = argc > 3 ? argv[3] : "256M";
  const char* keep_age_text = argc > 4 ? argv[4] : "2d";
  const uint64_t window_ns = Parse(window_text, "duration");
  const uint64_t keep_bytes = Parse(keep_size_text, "size");
  const uint64_t day_ns = 86'400'000'000'000;
  if (days == 0 || window_ns == 0 || day_ns % window_ns != 0) Die("a day must be a whole number of windows");

  char pattern[] = "/tmp/hvprof-week.XXXXXX";
  if (::mkdtemp(pattern) == nullptr) Die("mkdtemp failed");
  const std::string work = pattern;
  const std::string log = work + "/hvprof.log";
  // The default scenario with 10 ms scheduler slices and runs of one function of about 8 ms, as
  // bench/long/sim-day.sh runs it: the sim's cost is per slice and per run.
  {
    std::ifstream in(std::string(HVPROF_SOURCE_DIR) + "/examples/default.json");
    Json scenario = Json::parse(in);
    scenario["run"] = {{"speed", "max"}, {"duration_ms", 0}};
    scenario["machine"]["slice_us"] = 10000;
    scenario["machine"]["burst_cycles"] = 20000000;
    std::ofstream(work + "/scenario.json") << scenario.dump(1);
  }
  const std::vector<std::string> where = {"--run-dir=" + work + "/run", "--session-dir=" + work + "/s"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), where.begin(), where.end());
    return args;
  };
  Hvprof(with({"--start-daemon", "--platform=sim", "--scenario=" + work + "/scenario.json", "--passive-domains=all",
               "-g", fmt::format("--continuous={}", window_text), fmt::format("--keep-size={}", keep_size_text),
               fmt::format("--keep-age={}", keep_age_text)}),
         log);
  const hvprof::store::SessionPaths paths{work + "/s"};
  const long agent = PidIn(paths.lock());
  const long hv = PidIn(work + "/run/hvprof-hv.pid");
  auto link = hvprof::agent::ConnectHostedDomain(work + "/run", 0);
  if (!link) Die(link.error().message());
  if (!link.value()->GroundTruth(true)) Die("no ground truth from hvprof-hv");
  auto current = hvprof::store::OpenSession(paths.current());
  if (!current || current.value().metadata.events.empty()) Die("no session");
  const uint32_t counter = current.value().metadata.events[0].counter;

  std::printf("== continuous_week: %llu simulated days of the default scenario, every guest passive, 99 Hz per CPU "
              "with call chains, windows of %s kept within %s and %s\n",
              static_cast<unsigned long long>(days), window_text, keep_size_text, keep_age_text);
  std::printf("%5s %8s %8s %10s %10s %10s %12s %8s\n", "day", "wall s", "windows", "hv MiB", "agent MiB",
              "kept", "disk MiB", "equal");
  const auto started = std::chrono::steady_clock::now();
  uint64_t windows = 0, equal = 0, samples = 0, lost = 0, most_disk = 0;
  uint64_t first_kib = 0, last_kib = 0;
  const uint64_t per_day = day_ns / window_ns;
  for (uint64_t day = 1; day <= days; ++day) {
    for (uint64_t w = 0; w < per_day; ++w) {
      Hvprof(with({fmt::format("--run-sim={}", window_text)}), log);
      auto truth = link.value()->GroundTruth(true);
      if (!truth) Die(truth.error().message());
      uint64_t expected = 0;
      for (const hvprof::context::TruthRow& row : truth.value().rows) expected += row.overflows.at(counter);
      // The window just closed is the newest.
      const hvprof::store::WindowList list = hvprof::store::ListWindows(paths);
      if (list.windows.empty() || list.windows.back().window.index != windows) Die("the window did not close");
      const hvprof::store::WindowEntry& closed = list.windows.back();
      ++windows;
      samples += closed.samples;
      lost += closed.lost;
      if (closed.samples + closed.lost == expected) ++equal;
      uint64_t disk = hvprof::store::DiskBytes(paths.samples_dir());
      most_disk = std::max(most_disk, disk);
    }
    const uint64_t kib = RssKib(agent) + RssKib(hv);
    if (day == 1) first_kib = kib;
    last_kib = kib;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("%5llu %8.0f %8llu %10llu %10llu %10zu %12.1f %8llu\n", static_cast<unsigned long long>(day), wall,
                static_cast<unsigned long long>(windows), static_cast<unsigned long long>(RssKib(hv) / 1024),
                static_cast<unsigned long long>(RssKib(agent) / 1024),
                hvprof::store::ListWindows(paths).windows.size(),
                static_cast<double>(hvprof::store::DiskBytes(paths.samples_dir())) / (1 << 20),
                static_cast<unsigned long long>(equal));
    std::fflush(stdout);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  Hvprof(with({"--shutdown"}), log);
  std::printf("   %llu windows, %llu samples stored, %llu lost; the samples directory at most %.1f MiB against a "
              "budget of %.1f MiB (the build-id cache, elsewhere, is in it too)\n",
              static_cast<unsigned long long>(windows), static_cast<unsigned long long>(samples),
              static_cast<unsigned long long>(lost), static_cast<double>(most_disk) / (1 << 20),
              static_cast<double>(keep_bytes) / (1 << 20));
  const double growth_mib = (static_cast<double>(last_kib) - static_cast<double>(first_kib)) / 1024;
  std::printf("FIGURE\tcontinuous.week.windows_equal_to_truth\t%llu\t%llu\t%.3f\tall\t%s\n",
              static_cast<unsigned long long>(equal), static_cast<unsigned long long>(windows),
              static_cast<double>(equal) / static_cast<double>(windows), equal == windows ? "pass" : "fail");
  std::printf("FIGURE\tcontinuous.week.disk_over_budget\t%.1fMiB\t%.1fMiB\t%.3f\t<=1\t%s\n",
              static_cast<double>(most_disk) / (1 << 20), static_cast<double>(keep_bytes) / (1 << 20),
              static_cast<double>(most_disk) / static_cast<double>(keep_bytes), most_disk <= keep_bytes ? "pass" : "fail");
  std::printf("FIGURE\tcontinuous.week.daemon_rss_growth_mib\t%.1f\t-\t-\t<16\t%s\n", growth_mib,
              growth_mib < 16 ? "pass" : "fail");
  std::printf("FIGURE\tcontinuous.week.wall_s_per_sim_day\t%.1f\t-\t-\tinfo\tinfo\n", wall / static_cast<double>(days));
  std::error_code ec;
  if (std::getenv("KEEP") == nullptr) std::filesystem::remove_all(work, ec);
  return equal == windows ? 0 : 1;
}
