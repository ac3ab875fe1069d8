// hvprof run --sched on linux against perf sched: both record the same workload at once (perf
// sched record -a around hvprof run), and each of the workload's threads must have the same
// running and runnable time in both, within 2%. (The workload's threads sleep before they exit:
// timehist drops an exiting task's last switch, and the wait and run before it.) Skipped, with the reason, without perf, perf
// events or a readable tracefs.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <cstdio>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hvprof/linux/linux_machine.h"
#include "hvprof/linux/tracepoints.h"
#include "live_support.h"
#include "programs.h"
#include "run_support.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::Child;
using hvprof::testing::EngineSession;
using hvprof::testing::SessionOptions;
using hvprof::testing::CommandResult;
using hvprof::testing::LinuxRun;
using hvprof::testing::PerfUsable;
using hvprof::testing::TempDir;
using Json = nlohmann::json;

namespace {

const std::string kWorkload = HVPROF_LINUX_SCHED_MIX;

struct PerfTask {
  std::string comm;
  double run_ms = 0;
  double sleep_ms = 0;
  double iowait_ms = 0;
  double preempt_ms = 0;
  double delay_ms = 0;
};

// The rows of `perf sched timehist -s --state`'s "Wait-time summary", by tid:
//   comm[tid/pid]  parent  sched-in  run-time  sleep  iowait  preempt  delay   (ms)
std::map<uint32_t, PerfTask> ParseWaitSummary(const std::string& text) {
  std::map<uint32_t, PerfTask> tasks;
  const size_t start = text.find("Wait-time summary");
  if (start == std::string::npos) return tasks;
  std::istringstream lines(text.substr(start));
  const std::regex row(R"(^\s*(.+)\[(\d+)(?:/\d+)?\]\s+-?\d+\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$)");
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    PerfTask task;
    task.comm = m[1];
    task.run_ms = std::stod(m[3]);
    task.sleep_ms = std::stod(m[4]);
    task.iowait_ms = std::stod(m[5]);
    task.preempt_ms = std::stod(m[6]);
    task.delay_ms = std::stod(m[7]);
    tasks[static_cast<uint32_t>(std::stoul(m[2]))] = task;
  }
  return tasks;
}

// perf's figure within 2% (1 ms below 50 ms) of hvprof's, give or take the entity's unknown
// time. Where the kernel dropped a tracepoint in hvprof's stream (a switch to the task went
// unrecorded), timehist gives the task the whole stretch since the CPU's previous switch, and
// hvprof says the records cannot tell (docs/sched.md): perf may be above. perf's own stream
// drops as often (the same tracepoints, the same kernel), and a waking it lost turns a wait into
// sleep in its figures: perf may be below by about as much (seen in CI: nap's runnable time
// 162.8 ms in perf's, 167.1 ms in hvprof's with 3.9 ms unknown).
void CheckClose(double hvprof_ms, double unknown_ms, double perf_ms, const std::string& what) {
  INFO(fmt::format("{}: hvprof {:.3f} ms (+ {:.3f} ms unknown), perf {:.3f} ms", what, hvprof_ms, unknown_ms, perf_ms));
  const double tolerance = std::max(0.02 * perf_ms, 1.0);
  CHECK(perf_ms >= hvprof_ms - unknown_ms - tolerance);
  CHECK(perf_ms <= hvprof_ms + unknown_ms + tolerance);
}

}  // namespace

TEST_CASE("hvprof run --sched on linux: each task's run and wait time match perf sched timehist",
          "[linux][live][sched]") {
  if (!PerfUsable()) return;
  const std::string perf = hvprof::testing::FindOnPath("perf");
  if (perf.empty()) {
    hvprof::testing::SkipTest("perf is not installed (Debian: linux-perf): it is the yardstick for --sched");
    return;
  }
  if (auto points = hvprof::linux_host::SchedTracepoints::Read({}); !points) {
    hvprof::testing::SkipTest(points.error().message());
    return;
  }
  TempDir dir;
  const std::string data = dir.File("perf.data");
  // -B -N: no build-id processing at the end (perf 6.1 aborts in it on newer kernels), which
  // timehist does not need.
  Child recorder({perf, "sched", "record", "-a", "-B", "-N", "-o", data}, false);
  // perf writes the file's header once its events are open.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!(std::filesystem::exists(data) && std::filesystem::file_size(data) > 0) &&
         std::chrono::steady_clock::now() < give_up && !recorder.Exited()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(std::filesystem::exists(data));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  LinuxRun run;
  run.Run({"--sched", "--", kWorkload, "1500", "3"});
  ::kill(recorder.pid(), SIGINT);
  const int stopped = recorder.Wait();
  REQUIRE((stopped == 0 || stopped == 128 + SIGINT));  // perf record ends by the signal it was sent

  const CommandResult timehist =
      hvprof::testing::RunProgram({perf, "sched", "timehist", "-i", data, "-s", "--state"});
  INFO(timehist.err.substr(0, 2000));
  REQUIRE(timehist.status == 0);
  const std::map<uint32_t, PerfTask> perf_tasks = ParseWaitSummary(timehist.out);
  REQUIRE(!perf_tasks.empty());

  const CommandResult sched = run.ReportOn({"--sched", "--format=json", "--top=3"});
  INFO(sched.err);
  REQUIRE(sched.status == 0);
  const Json report = Json::parse(sched.out);
  CHECK(report["records"]["backwards"] == 0);
  CHECK(report["records"]["invalid"] == 0);
  CHECK(report["records"]["unknown_types"] == 0);
  // Every pCPU's time is accounted for.
  for (const Json& pcpu : report["pcpus"]) {
    CHECK(pcpu["busy_ns"].get<uint64_t>() + pcpu["idle_ns"].get<uint64_t>() + pcpu["unknown_ns"].get<uint64_t>() ==
          report["window"]["ns"].get<uint64_t>());
  }
  std::map<uint32_t, Json> entities;
  for (const Json& entity : report["entities"]) {
    if (entity["task"] == true) entities[entity["tid"].get<uint32_t>()] = entity;
  }

  // The workload's threads, by the names it gives them.
  int compared = 0;
  int clear = 0;  // of them, those whose records leave at most a tenth of their life unknown
  double unknown_total = 0, life_total = 0;
  for (const auto& [tid, task] : perf_tasks) {
    if (task.comm != "nap" && task.comm.rfind("spin-", 0) != 0) continue;
    INFO(fmt::format("{}[{}]", task.comm, tid));
    REQUIRE(entities.contains(tid));
    const Json& entity = entities.at(tid);
    // Named as perf names it: the thread's comm, tid and pid.
    CHECK(entity["label"].get<std::string>().find(task.comm + "[" + std::to_string(tid) + "/") != std::string::npos);
    // perf's "preempt" is the time a task waited after being preempted, its "delay" the time
    // from a wake-up to running: both are hvprof's runnable time.
    const double unknown_ms = entity["unknown_ns"].get<double>() / 1e6;
    // A dropped tracepoint leaves a stretch unknown (one before the threads' last 200 ms sleep
    // leaves all of it), so the comparison has that slack; most threads must have little.
    const double life_ms = task.run_ms + task.preempt_ms + task.delay_ms + task.sleep_ms + task.iowait_ms;
    clear += unknown_ms <= 0.1 * life_ms;
    unknown_total += unknown_ms;
    life_total += life_ms;
    CheckClose(entity["running_ns"].get<double>() / 1e6, unknown_ms, task.run_ms, "running (perf run-time)");
    CheckClose(entity["runnable_ns"].get<double>() / 1e6, unknown_ms, task.preempt_ms + task.delay_ms,
               "runnable (perf preempt + delay)");
    ++compared;
  }
  CHECK(compared == 4);
  // Tracepoints drop more often on a loaded machine (CI runs tests side by side), but the
  // records must still tell most of the threads' time.
  INFO(fmt::format("{:.1f} of {:.1f} ms of the threads' time unknown; {} of 4 threads clear", unknown_total, life_total,
                   clear));
  CHECK(clear >= 1);
  CHECK(unknown_total <= 0.3 * life_total);
}

TEST_CASE("linux --sched: a KVM guest's vCPU thread is the guest's vCPU in the scheduling records",
          "[linux][live][sched]") {
  using namespace std::chrono_literals;
  if (auto points = hvprof::linux_host::SchedTracepoints::Read({}); !points) {
    hvprof::testing::SkipTest(points.error().message());
    return;
  }
  Child guest({HVPROF_LINUX_KVM_GUEST, "1.0"}, false);
  if (!hvprof::testing::KvmGuestRunning(guest)) return;
  // Its vCPU thread, by name.
  uint32_t vcpu_tid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", guest.pid()))) {
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name == "CPU 0/KVM") vcpu_tid = static_cast<uint32_t>(std::stoul(entry.path().filename().string()));
  }
  REQUIRE(vcpu_tid != 0);
  auto machine = hvprof::testing::LiveMachine(hvprof::linux_host::LinuxOptions{});
  if (!machine) return;
  const hvpmu::DomainId guest_domain = hvprof::testing::GuestDomainOf(*machine, guest.pid());
  SessionOptions options;
  options.passive = {guest_domain};
  options.sched = true;
  EngineSession session(*machine, options);
  session.Start();
  session.Pump(3000ms, [&] { return guest.Exited(); });
  session.Stop();
  REQUIRE(guest.Wait() == 0);

  // The vCPU thread ("CPU 0/KVM") runs, is switched out and exits: as vCPU 0 of the guest's
  // domain, never as a task.
  uint64_t as_vcpu = 0, leaving = 0;
  for (const hvpmu::ring::SchedRecord& r : session.sched()) {
    if (r.domain != guest_domain) {
      // The VMM's other threads (its main thread, KVM's workers) are dom0's tasks.
      CHECK(((r.flags & hvpmu::ring::kSchedPidValid) == 0 || r.tid != vcpu_tid));
      continue;
    }
    CHECK(r.vcpu == 0);
    CHECK((r.flags & hvpmu::ring::kSchedPidValid) == 0);
    ++as_vcpu;
    leaving += r.type == static_cast<uint8_t>(hvpmu::ring::SchedType::kRunstate) &&
               r.old_state == static_cast<uint8_t>(hvpmu::ring::Runstate::kRunning);
  }
  std::printf("measured (kvm --sched): %llu scheduling records of the guest's vCPU 0 (domain %u)\n",
              static_cast<unsigned long long>(as_vcpu), guest_domain);
  CHECK(as_vcpu >= 1);
  CHECK(leaving >= 1);  // at least its exit
}
