// The scheduling analysis (report/views/scheduling.h), its time line and its formats, over record
// streams made here whose answers are known exactly: each test says the schedule in words and
// checks the numbers that follow from it.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "hvpmu/abi/ops.h"
#include "hvpmu/abi/ring.h"
#include "hvprof/report/sched_records.h"
#include "hvprof/report/views/scheduling.h"
#include "hvprof/report/views/timeline.h"
#include "hvprof/report/writers/scheduling.h"
#include "hvprof/report/writers/timeline.h"
#include "synthetic_session.h"
#include "temp_dir.h"

using namespace hvprof;
using namespace hvprof::report;
using hvpmu::ring::Runstate;
using hvpmu::ring::SchedRecord;
using hvpmu::ring::SchedType;
using Json = nlohmann::json;

// The report restates the ABI's numbers; they must agree.
static_assert(sched::kTypeRunstate == static_cast<uint8_t>(SchedType::kRunstate));
static_assert(sched::kTypeWakeup == static_cast<uint8_t>(SchedType::kWakeup));
static_assert(sched::kTypeMigrate == static_cast<uint8_t>(SchedType::kMigrate));
static_assert(sched::kTypeLost == static_cast<uint8_t>(SchedType::kLost));
static_assert(sched::kTypeLost == hvpmu::ring::kMaxSchedType);
static_assert(sched::kFlagPidValid == hvpmu::ring::kSchedPidValid);
static_assert(hvprof::kUnknownPcpu == hvpmu::ring::kUnknownPcpu);
static_assert(hvprof::kNoPid == hvpmu::ring::kNoPid);
static_assert(hvprof::kIdleDomain == hvpmu::kDomainIdle);
static_assert(static_cast<uint8_t>(SchedState::kRunning) == static_cast<uint8_t>(Runstate::kRunning));
static_assert(static_cast<uint8_t>(SchedState::kRunnable) == static_cast<uint8_t>(Runstate::kRunnable));
static_assert(static_cast<uint8_t>(SchedState::kBlocked) == static_cast<uint8_t>(Runstate::kBlocked));
static_assert(static_cast<uint8_t>(SchedState::kOffline) == static_cast<uint8_t>(Runstate::kOffline));
static_assert(kSchedStates == hvpmu::ring::kRunstateCount + 1);

namespace {

constexpr auto kRun = Runstate::kRunning;
constexpr auto kReady = Runstate::kRunnable;
constexpr auto kBlock = Runstate::kBlocked;
constexpr size_t kRunningI = 0, kRunnableI = 1, kBlockedI = 2, kOfflineI = 3, kUnknownI = 4;
constexpr uint16_t kIdle = hvpmu::kDomainIdle;

// Records as the rings hold them (hvpmu::ring::SchedRecord), through ToSchedEvent.
struct Stream {
  SchedRecords records;
  static SchedRecord Base(SchedType type, uint64_t t, uint16_t pcpu, uint16_t domain, uint16_t vcpu) {
    SchedRecord r{};
    r.kind = static_cast<uint8_t>(hvpmu::ring::RecordKind::kSched);
    r.type = static_cast<uint8_t>(type);
    r.slots = 1;
    r.pcpu = pcpu;
    r.time_ns = t;
    r.domain = domain;
    r.vcpu = vcpu;
    r.pid = hvpmu::ring::kNoPid;
    r.tid = hvpmu::ring::kNoPid;
    r.from_pcpu = r.to_pcpu = hvpmu::ring::kUnknownPcpu;
    return r;
  }
  void Add(const SchedRecord& r) { records.Add(ToSchedEvent(r)); }
  Stream& State(uint64_t t, uint16_t pcpu, uint16_t domain, uint16_t vcpu, Runstate from, Runstate to) {
    SchedRecord r = Base(SchedType::kRunstate, t, pcpu, domain, vcpu);
    r.old_state = static_cast<uint8_t>(from);
    r.new_state = static_cast<uint8_t>(to);
    Add(r);
    return *this;
  }
  Stream& Wake(uint64_t t, uint16_t pcpu, uint16_t domain, uint16_t vcpu) {
    SchedRecord r = Base(SchedType::kWakeup, t, pcpu, domain, vcpu);
    r.old_state = static_cast<uint8_t>(kBlock);
    r.new_state = static_cast<uint8_t>(kReady);
    Add(r);
    return *this;
  }
  Stream& Migrate(uint64_t t, uint16_t pcpu, uint16_t domain, uint16_t vcpu, uint16_t from, uint16_t to) {
    SchedRecord r = Base(SchedType::kMigrate, t, pcpu, domain, vcpu);
    r.from_pcpu = from;
    r.to_pcpu = to;
    Add(r);
    return *this;
  }
  Stream& Lost(uint64_t t, uint16_t pcpu, uint64_t count, uint64_t first) {
    SchedRecord r = Base(SchedType::kLost, t, pcpu, 0, 0);
    r.count = count;
    r.aux = first;
    Add(r);
    return *this;
  }
  // A switch on `pcpu` at t: `out` leaves (to `out_state`), `in` arrives.
  Stream& Switch(uint64_t t, uint16_t pcpu, std::pair<uint16_t, uint16_t> out, Runstate out_state,
                 std::pair<uint16_t, uint16_t> in) {
    State(t, pcpu, out.first, out.second, kRun, out_state);
    return State(t, pcpu, in.first, in.second, kReady, kRun);
  }
};

SchedOptions Window(uint64_t start, uint64_t end, uint32_t pcpus = 0) {
  SchedOptions options;
  options.start_ns = start;
  options.end_ns = end;
  options.pcpus = pcpus;
  options.domain_names = {{1, "web"}, {2, "db"}, {3, ""}};
  return options;
}

SchedReport Analyze(const Stream& stream, const SchedOptions& options) {
  auto report = AnalyzeSched(stream.records, options);
  REQUIRE(report);
  return std::move(report).value();
}

const SchedEntityStats& Find(const SchedReport& report, uint16_t domain, uint16_t vcpu) {
  for (const SchedEntityStats& st : report.entities) {
    if (!st.entity.task && !st.entity.idle && st.entity.domain == domain && st.entity.vcpu == vcpu) return st;
  }
  FAIL("no entity dom" << domain << " v" << vcpu);
  return report.entities.front();
}

uint64_t Preempted(const SchedEntityStats& st, const std::string& label) {
  for (const SchedPreemptor& p : st.preemptors) {
    if (p.label == label) return p.ns;
  }
  return 0;
}

uint64_t Sum(const std::array<uint64_t, kSchedStates>& ns) {
  uint64_t sum = 0;
  for (uint64_t n : ns) sum += n;
  return sum;
}

// Every entity's states and every pCPU's time add up to the window, to the nanosecond.
void CheckAccounting(const SchedReport& report) {
  for (const SchedEntityStats& st : report.entities) CHECK(Sum(st.ns) == report.window_ns());
  for (const SchedPcpuStats& p : report.pcpu_stats) {
    CHECK(p.busy_ns + p.idle_ns + p.unknown_ns == report.window_ns());
    CHECK(p.lost_ns <= p.unknown_ns);
  }
}

// dom1 v0 (A) and dom2 v0 (B) take turns on pCPU 0 every 10 ns for 100 ns, A first.
Stream Alternating() {
  Stream s;
  const std::pair<uint16_t, uint16_t> a{1, 0}, b{2, 0};
  for (uint64_t t = 10; t < 100; t += 10) {
    if (t % 20 == 10) s.Switch(t, 0, a, kReady, b);
    else s.Switch(t, 0, b, kReady, a);
  }
  return s;
}

}  // namespace

TEST_CASE("sched: two vCPUs taking turns on one pCPU share it exactly", "[sched]") {
  const SchedReport report = Analyze(Alternating(), Window(0, 100));
  CheckAccounting(report);
  REQUIRE(report.pcpus == 1);
  const SchedEntityStats& a = Find(report, 1, 0);
  const SchedEntityStats& b = Find(report, 2, 0);
  // A ran [0,10) [20,30) ... [80,90) (its first record says it was running since the start),
  // B ran [10,20) ... [90,100) and was runnable before its first record.
  CHECK(a.ns[kRunningI] == 50);
  CHECK(a.ns[kRunnableI] == 50);
  CHECK(b.ns[kRunningI] == 50);
  CHECK(b.ns[kRunnableI] == 50);
  CHECK(a.ns[kBlockedI] + a.ns[kOfflineI] + a.ns[kUnknownI] == 0);
  CHECK(a.switches_in == 4);
  CHECK(b.switches_in == 5);
  CHECK(a.wakeups == 0);
  CHECK(a.latency.count == 0);
  CHECK(a.migrations_recorded + a.migrations_derived == 0);
  CHECK(report.pcpu_stats[0].busy_ns == 100);
  CHECK(report.pcpu_stats[0].idle_ns == 0);
  CHECK(report.pcpu_stats[0].unknown_ns == 0);
  CHECK(report.pcpu_stats[0].switches == 9);
  // A's four waits that ended in running were B's time; its last wait is open at the end.
  CHECK(a.waits == 5);
  REQUIRE(a.preemptors.size() == 1);
  CHECK(a.preemptors[0].label == "dom2 (db) v0");
  CHECK(a.preemptors[0].ns == 40);
  // B waited [0,10) for A (who ran since the start), then four more times.
  REQUIRE(b.preemptors.size() == 1);
  CHECK(b.preemptors[0].label == "dom1 (web) v0");
  CHECK(b.preemptors[0].ns == 50);
  CHECK(a.longest_wait_ns == 10);
  REQUIRE(report.domains.size() == 2);
  CHECK(report.domains[0].name == "dom1 (web)");
  CHECK(report.domains[0].ns[kRunningI] == 50);
  const auto& counters = report.counters;
  CHECK(counters.inconsistent == 0);
  CHECK(counters.input.backwards == 0);
  CHECK(counters.input.kept == 18);
  // The domains' waits, summed: dom2 waited 50 ns for dom1, dom1 40 for dom2.
  REQUIRE(report.domain_preemptions.size() == 2);
  CHECK(report.domain_preemptions[0].victim == 2);
  CHECK(report.domain_preemptions[0].preemptor == 1);
  CHECK(report.domain_preemptions[0].ns == 50);
}

TEST_CASE("sched: a wake-up's latency runs to the next run, percentiles are nearest-rank", "[sched]") {
  // dom1 v0 wakes ten times on pCPU 0 and runs after 100, 200, ... 1000 ns (its wake-ups on
  // pCPU 1, as a waker's ring records them); the idle vCPU has pCPU 0 otherwise.
  Stream s;
  uint64_t t = 10000;
  for (uint64_t latency = 100; latency <= 1000; latency += 100) {
    s.Wake(t, 1, 1, 0);
    s.Switch(t + latency, 0, {kIdle, 0}, kReady, {1, 0});
    s.Switch(t + latency + 500, 0, {1, 0}, kBlock, {kIdle, 0});
    t += 10000;
  }
  const SchedReport report = Analyze(s, Window(0, t, 2));
  CheckAccounting(report);
  const SchedEntityStats& v = Find(report, 1, 0);
  CHECK(v.wakeups == 10);
  CHECK(v.latency.count == 10);
  CHECK(v.latency.p50_ns == 500);   // rank 5 of 10
  CHECK(v.latency.p90_ns == 900);   // rank 9
  CHECK(v.latency.p99_ns == 1000);  // rank ceil(9.9) = 10
  CHECK(v.latency.max_ns == 1000);
  CHECK(v.latency.total_ns == 5500);
  CHECK(v.ns[kRunnableI] == 5500);
  CHECK(v.ns[kRunningI] == 5000);
  CHECK(v.ns[kBlockedI] == t - 5500 - 5000);
  // Waiting for an idle pCPU: the idle vCPU was what ran meanwhile.
  REQUIRE(v.preemptors.size() == 1);
  CHECK(v.preemptors[0].label == "idle");
  CHECK(v.preemptors[0].ns == 5500);
  CHECK(report.pcpu_stats[0].busy_ns == 5000);
  CHECK(report.pcpu_stats[0].idle_ns == t - 5000);
  // pCPU 1 has no record but the wake-ups: nobody is known to have run there.
  CHECK(report.pcpu_stats[1].unknown_ns == t);
  REQUIRE(report.longest_waits.size() == 10);
  CHECK(report.longest_waits[0].ns == 1000);
  CHECK(report.longest_waits[0].woken);
  CHECK(report.longest_waits[0].pcpu == 0);
  CHECK(report.longest_waits[9].ns == 100);
  CHECK(report.latency.p50_ns == 500);
  CHECK(report.domains[0].latency.max_ns == 1000);
}

TEST_CASE("sched: latencies above 1024 ns are kept to 10 significant bits, the maximum exactly", "[sched]") {
  Stream s;
  s.Wake(100, 0, 1, 0);
  s.Switch(100 + 1000001, 0, {kIdle, 0}, kReady, {1, 0});
  const SchedReport report = Analyze(s, Window(0, 2000000));
  const SchedLatency& l = Find(report, 1, 0).latency;
  CHECK(l.max_ns == 1000001);
  CHECK(l.p50_ns <= 1000001);
  CHECK(l.p50_ns >= 1000001 - 1000001 / 1000);
  CHECK(l.p50_ns == 999424);  // 976 << 10
}

TEST_CASE("sched: a wake-up told twice (wake-up record and runstate change) counts once", "[sched]") {
  // Either order at the same time, and a runstate change after the wake-up record.
  for (int order = 0; order < 3; ++order) {
    Stream s;
    s.State(10, 0, 1, 0, kRun, kBlock);
    if (order == 0) s.Wake(20, 0, 1, 0).State(20, 0, 1, 0, kBlock, kReady);
    if (order == 1) s.State(20, 0, 1, 0, kBlock, kReady).Wake(20, 0, 1, 0);
    if (order == 2) s.Wake(20, 0, 1, 0).State(25, 0, 1, 0, kBlock, kReady);
    s.State(30, 0, 1, 0, kReady, kRun);
    const SchedReport report = Analyze(s, Window(0, 40));
    const SchedEntityStats& v = Find(report, 1, 0);
    INFO("order " << order);
    CHECK(v.wakeups == 1);
    CHECK(report.counters.redundant_wakeups == 0);
    CHECK(report.counters.inconsistent == 0);
    CHECK(v.latency.count == 1);
    CHECK(v.latency.max_ns == 10);
    CHECK(v.ns[kRunningI] == 20);
    CHECK(v.ns[kBlockedI] == 10);
    CHECK(v.ns[kRunnableI] == 10);
  }
}

TEST_CASE("sched: migrations are counted from their records, or derived from where a vCPU ran", "[sched]") {
  Stream s;
  // dom1 v0 runs on pCPU 0, then on pCPU 1 with no migration record: one derived.
  s.State(10, 0, 1, 0, kRun, kReady);
  s.State(20, 1, 1, 0, kReady, kRun);
  // dom2 v0 runs on pCPU 0, a migration record moves it, it runs on pCPU 1: one recorded.
  s.State(30, 0, 2, 0, kReady, kRun);
  s.State(40, 0, 2, 0, kRun, kReady);
  s.Migrate(45, 0, 2, 0, 0, 1);
  s.Migrate(46, 0, 2, 0, 1, 1);  // to where it is: not a move
  s.State(50, 1, 1, 0, kRun, kBlock);
  s.State(50, 1, 2, 0, kReady, kRun);
  const SchedReport report = Analyze(s, Window(0, 100));
  CheckAccounting(report);
  const SchedEntityStats& a = Find(report, 1, 0);
  const SchedEntityStats& b = Find(report, 2, 0);
  CHECK(a.migrations_derived == 1);
  CHECK(a.migrations_recorded == 0);
  CHECK(b.migrations_recorded == 1);
  CHECK(b.migrations_derived == 0);
  CHECK(report.counters.input.noop_migrations == 1);
  CHECK(report.domains[1].migrations_recorded == 1);
  // a: running [0,10) on pCPU 0, runnable [10,20), running [20,50) on pCPU 1, blocked after.
  CHECK(a.ns[kRunningI] == 40);
  CHECK(a.ns[kRunnableI] == 10);
  CHECK(a.ns[kBlockedI] == 50);
}

TEST_CASE("sched: the preemptors of a wait are who ran on the pCPU the vCPU then got", "[sched]") {
  Stream s;
  // A (dom1 v0) runs on pCPU 0 until preempted at 10 by B (dom2 v0); C (dom3 v0) runs 20..30;
  // A gets pCPU 0 again at 30. On pCPU 1 the idle vCPU runs all along.
  s.Switch(10, 0, {1, 0}, kReady, {2, 0});
  s.Switch(20, 0, {2, 0}, kBlock, {3, 0});
  s.Switch(30, 0, {3, 0}, kBlock, {1, 0});
  // A is preempted again at 40 and runs next on pCPU 1 at 55, which was idle meanwhile.
  s.Switch(40, 0, {1, 0}, kReady, {2, 1});
  s.Switch(55, 1, {kIdle, 1}, kReady, {1, 0});
  const SchedReport report = Analyze(s, Window(0, 60));
  CheckAccounting(report);
  const SchedEntityStats& a = Find(report, 1, 0);
  CHECK(Preempted(a, "dom2 (db) v0") == 10);
  CHECK(Preempted(a, "dom3 v0") == 10);
  CHECK(Preempted(a, "idle") == 15);
  CHECK(a.preemptors.size() == 3);
  CHECK(a.preemptors[0].label == "idle");
  CHECK(a.ns[kRunnableI] == 35);
  CHECK(a.migrations_derived == 1);
  // The longest waits: dom2 v1 from the start until 40, dom3 v0 until 20, A's two, dom2 v0's.
  REQUIRE(report.longest_waits.size() == 5);
  CHECK(report.longest_waits[0].ns == 40);
  CHECK(report.longest_waits[0].start_ns == 0);
  CHECK(report.entities[report.longest_waits[0].entity].label == "dom2 (db) v1");
  CHECK(report.entities[report.longest_waits[1].entity].label == "dom3 v0");  // 20, from 0: the earlier first
  CHECK(report.longest_waits[2].ns == 20);
  CHECK(report.longest_waits[2].start_ns == 10);
  CHECK(!report.longest_waits[2].woken);
  CHECK(report.longest_waits[2].pcpu == 0);
  CHECK(report.longest_waits[3].ns == 15);
  CHECK(report.longest_waits[3].pcpu == 1);
  CHECK(report.pcpu_stats[1].idle_ns == 55);
  CHECK(report.pcpu_stats[1].busy_ns == 5);
  // The top N: one preemptor kept.
  SchedOptions top_one = Window(0, 60);
  top_one.top = 1;
  const SchedReport trimmed = Analyze(s, top_one);
  REQUIRE(Find(trimmed, 1, 0).preemptors.size() == 1);
  CHECK(Find(trimmed, 1, 0).preemptors[0].label == "idle");
  CHECK(trimmed.longest_waits.size() == 1);
}

TEST_CASE("sched: a records-lost gap makes that pCPU's time and its occupant unknown, never wrong", "[sched]") {
  Stream s;
  // pCPU 0: A (dom1 v0) runs from 10; records from 20 to 50 are lost; B (dom2 v0) runs from 50.
  s.State(10, 0, 1, 0, kReady, kRun);
  s.Lost(50, 0, 3, 20);
  s.State(50, 0, 2, 0, kReady, kRun);
  const SchedReport report = Analyze(s, Window(0, 100));
  CheckAccounting(report);
  const SchedPcpuStats& p = report.pcpu_stats[0];
  CHECK(p.busy_ns == 60);     // A 10..20, B 50..100
  CHECK(p.unknown_ns == 40);  // before A's first record, and the gap
  CHECK(p.lost_ns == 30);
  CHECK(p.lost_records == 3);
  CHECK(report.counters.lost_records == 3);
  CHECK(report.counters.lost_gaps == 1);
  const SchedEntityStats& a = Find(report, 1, 0);
  CHECK(a.ns[kRunnableI] == 10);
  CHECK(a.ns[kRunningI] == 10);
  CHECK(a.ns[kUnknownI] == 80);
  const SchedEntityStats& b = Find(report, 2, 0);
  CHECK(b.ns[kRunnableI] == 50);
  CHECK(b.ns[kRunningI] == 50);
  CHECK(Preempted(b, "dom1 (web) v0") == 10);
  CHECK(Preempted(b, "(unknown)") == 40);
  // After the gap, A's next record is taken without calling it inconsistent.
  s.State(70, 1, 1, 0, kBlock, kReady);
  const SchedReport later = Analyze(s, Window(0, 100));
  CHECK(later.counters.inconsistent == 0);
  CHECK(Find(later, 1, 0).ns[kUnknownI] == 50);
  CHECK(Find(later, 1, 0).ns[kRunnableI] == 40);
  // A gap whose first loss is not known starts at the pCPU's previous record.
  Stream t;
  t.State(10, 0, 1, 0, kReady, kRun).State(30, 0, 2, 0, kBlock, kReady).Lost(50, 0, 1, 0);
  const SchedReport unknown_start = Analyze(t, Window(0, 100));
  CHECK(unknown_start.pcpu_stats[0].lost_ns == 70);
  CHECK(Find(unknown_start, 1, 0).ns[kRunningI] == 20);
}

TEST_CASE("sched: time going back on a pCPU is counted and dropped, never subtracted", "[sched]") {
  Stream s;
  s.State(10, 0, 1, 0, kRun, kReady);
  s.State(10, 0, 2, 0, kReady, kRun);
  s.State(30, 0, 2, 0, kRun, kBlock);
  s.State(20, 0, 2, 0, kBlock, kRun);  // back in time: dropped
  s.State(30, 0, 1, 0, kReady, kRun);
  const SchedReport report = Analyze(s, Window(0, 50));
  CheckAccounting(report);
  CHECK(report.counters.input.backwards == 1);
  CHECK(report.counters.input.kept == 4);
  CHECK(report.counters.inconsistent == 0);
  CHECK(Find(report, 2, 0).ns[kRunningI] == 20);
  CHECK(Find(report, 2, 0).ns[kBlockedI] == 20);
  CHECK(Find(report, 1, 0).ns[kRunningI] == 30);
}

TEST_CASE("sched: an old state that disagrees is counted and the record believed from then on", "[sched]") {
  Stream s;
  s.State(10, 0, 1, 0, kRun, kBlock);
  s.State(20, 0, 1, 0, kRun, kBlock);  // it was blocked already: says running
  s.State(30, 0, 1, 0, kReady, kRun);  // it was blocked: says runnable
  const SchedReport report = Analyze(s, Window(0, 40));
  CheckAccounting(report);
  CHECK(report.counters.inconsistent == 2);
  const SchedEntityStats& v = Find(report, 1, 0);
  CHECK(v.ns[kRunningI] == 20);
  // Leaving pCPU 0 at 20, where it was not known to run, says a record of it between 10 and 20
  // went missing (it started running somewhere): when, the records do not tell, so all of
  // 10..20 is unknown, not blocked. So is 20..30: runnable at 30 says its wake-up went missing.
  CHECK(v.ns[kBlockedI] == 0);
  CHECK(v.ns[kUnknownI] == 20);
  CHECK(v.ns[kRunnableI] == 0);
  // The same with another vCPU on that pCPU since 15 (a switch to it that perf did not deliver):
  // the records of that pCPU around it may be missing too, so the whole stretch since the
  // leaving one's last known change is unknown for it, not only the part after 15.
  Stream u;
  u.State(5, 0, 1, 0, kRun, kBlock);
  u.State(15, 0, 2, 0, kReady, kRun);
  u.State(25, 0, 1, 0, kRun, kBlock);
  const SchedReport unrecorded = Analyze(u, Window(0, 40));
  CheckAccounting(unrecorded);
  CHECK(unrecorded.counters.inconsistent == 1);
  CHECK(Find(unrecorded, 1, 0).ns[kRunningI] == 5);
  CHECK(Find(unrecorded, 1, 0).ns[kUnknownI] == 20);
  CHECK(Find(unrecorded, 1, 0).ns[kBlockedI] == 15);
  CHECK(Find(unrecorded, 2, 0).ns[kRunningI] == 25);
  // Another vCPU arriving where one still runs displaces it: its time from then is unknown.
  Stream d;
  d.State(10, 0, 1, 0, kReady, kRun);
  d.State(20, 0, 2, 0, kReady, kRun);
  const SchedReport displaced = Analyze(d, Window(0, 40));
  CheckAccounting(displaced);
  CHECK(displaced.counters.displaced == 1);
  CHECK(Find(displaced, 1, 0).ns[kRunningI] == 10);
  CHECK(Find(displaced, 1, 0).ns[kUnknownI] == 20);
  CHECK(displaced.pcpu_stats[0].busy_ns == 30);
}

TEST_CASE("sched: unknown record types and impossible states are counted and skipped", "[sched]") {
  Stream s = Alternating();
  SchedRecord unknown = Stream::Base(SchedType::kRunstate, 55, 0, 1, 0);
  unknown.type = 9;
  s.Add(unknown);
  SchedRecord bad_state = Stream::Base(SchedType::kRunstate, 56, 0, 1, 0);
  bad_state.old_state = 7;
  s.Add(bad_state);
  SchedRecord bad_pcpu = Stream::Base(SchedType::kRunstate, 57, hvpmu::ring::kUnknownPcpu, 1, 0);
  s.Add(bad_pcpu);
  const SchedReport report = Analyze(s, Window(0, 100));
  CheckAccounting(report);
  CHECK(report.counters.input.unknown_types == 1);
  CHECK(report.counters.input.invalid == 2);
  CHECK(report.counters.input.records == 21);
  CHECK(Find(report, 1, 0).ns[kRunningI] == 50);
  CHECK(report.pcpus == 1);
}

TEST_CASE("sched: records outside the window set states but count nothing", "[sched]") {
  Stream s;
  s.Wake(5, 0, 1, 0);                 // before the window
  s.Switch(8, 0, {kIdle, 0}, kReady, {1, 0});
  s.Switch(30, 0, {1, 0}, kBlock, {kIdle, 0});
  s.Wake(120, 0, 1, 0);               // after it
  const SchedReport report = Analyze(s, Window(10, 100));
  CheckAccounting(report);
  CHECK(report.window_ns() == 90);
  CHECK(report.counters.outside_window == 4);
  const SchedEntityStats& v = Find(report, 1, 0);
  CHECK(v.wakeups == 0);
  CHECK(v.switches_in == 0);
  CHECK(v.ns[kRunningI] == 20);
  CHECK(v.ns[kBlockedI] == 70);
  // Without a window: the first record to the last.
  const SchedReport whole = Analyze(s, SchedOptions{});
  CHECK(whole.start_ns == 5);
  CHECK(whole.end_ns == 120);
  CHECK(Find(whole, 1, 0).wakeups == 2);
  CHECK(!AnalyzeSched(s.records, Window(100, 10)));
}

TEST_CASE("sched: tasks are their own entities, named by their threads", "[sched]") {
  Stream s;
  SchedRecord task = Stream::Base(SchedType::kRunstate, 10, 0, 0, 0);
  task.flags = hvpmu::ring::kSchedPidValid;
  task.pid = 100;
  task.tid = 101;
  task.old_state = static_cast<uint8_t>(kRun);
  task.new_state = static_cast<uint8_t>(kBlock);
  s.Add(task);
  task.tid = 100;
  task.old_state = static_cast<uint8_t>(kReady);
  task.new_state = static_cast<uint8_t>(kRun);
  s.Add(task);
  SchedOptions options = Window(0, 20);
  // Names are per task: the same tid in another process or domain is another thread.
  options.thread_names = {{{0, 100, 101}, "worker"}, {{0, 200, 101}, "reused"}, {{1, 100, 101}, "guest"}};
  const SchedReport report = Analyze(s, options);
  CheckAccounting(report);
  REQUIRE(report.shown.size() == 2);
  std::set<std::string> labels;
  for (uint32_t e : report.shown) labels.insert(report.entities[e].label);
  CHECK(labels == std::set<std::string>{"dom0 worker[101/100]", "dom0 [100]"});
}

namespace {

// A random schedule of 5 vCPUs (two domains) on 2 pCPUs for 10 s with its exact truth: each
// tick, vCPUs wake, block or are preempted and free pCPUs take a runnable vCPU or go idle. The
// pCPUs' records are interleaved at random, each pCPU's kept in order.
struct Truth {
  std::map<std::pair<uint16_t, uint16_t>, std::array<uint64_t, kSchedStates>> ns;
  std::map<std::pair<uint16_t, uint16_t>, uint64_t> wakeups, latencies, max_latency, recorded, derived;
  std::map<std::pair<uint16_t, uint16_t>, uint64_t> blamed;  // runnable time of the waits that ended in running
  std::array<uint64_t, 2> busy{}, idle{};
};

Stream RandomSchedule(uint32_t seed, uint64_t end, Truth& truth) {
  std::mt19937_64 rng(seed);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  struct Vcpu {
    uint16_t domain, vcpu;
    Runstate state = kBlock;
    int last = -1;
    uint64_t woke = 0;
    uint64_t ready_since = 0;
    bool pending = false;
  };
  std::vector<Vcpu> vcpus = {{1, 0}, {1, 1}, {1, 2}, {2, 0}, {2, 1}};
  std::array<int, 2> running = {-1, -1};  // vCPU index per pCPU, -1 idle
  std::vector<std::vector<SchedRecord>> rings(2);
  auto record = [&](int pcpu, SchedRecord r) { rings[pcpu].push_back(r); };
  auto state = [&](uint64_t t, int pcpu, uint16_t domain, uint16_t vcpu, Runstate from, Runstate to) {
    SchedRecord r = Stream::Base(SchedType::kRunstate, t, static_cast<uint16_t>(pcpu), domain, vcpu);
    r.old_state = static_cast<uint8_t>(from);
    r.new_state = static_cast<uint8_t>(to);
    record(pcpu, r);
  };
  uint64_t t = 0;
  while (t < end) {
    const uint64_t next = std::min(end, t + std::uniform_int_distribution<uint64_t>(50000, 5000000)(rng));
    // The truth of [t, next).
    for (const Vcpu& v : vcpus) truth.ns[{v.domain, v.vcpu}][static_cast<size_t>(v.state)] += next - t;
    for (int c = 0; c < 2; ++c) (running[c] < 0 ? truth.idle : truth.busy)[c] += next - t;
    t = next;
    if (t >= end) break;
    const std::array<int, 2> before = running;
    // Leaving: block or be preempted.
    for (int c = 0; c < 2; ++c) {
      if (running[c] < 0 || chance(0.4)) continue;
      Vcpu& v = vcpus[running[c]];
      v.state = chance(0.5) ? kBlock : kReady;
      v.ready_since = t;
      state(t, c, v.domain, v.vcpu, kRun, v.state);
      running[c] = -1;
    }
    // Waking, told by a wake-up record on a random ring, or a runstate change, or both.
    for (Vcpu& v : vcpus) {
      if (v.state != kBlock || !chance(0.3)) continue;
      const int ring = chance(0.5) ? 0 : 1;
      SchedRecord w = Stream::Base(SchedType::kWakeup, t, static_cast<uint16_t>(ring), v.domain, v.vcpu);
      if (chance(0.5)) record(ring, w);
      else state(t, 1 - ring, v.domain, v.vcpu, kBlock, kReady);
      if (chance(0.3)) state(t, ring, v.domain, v.vcpu, kBlock, kReady);
      v.state = kReady;
      v.ready_since = t;
      v.woke = t;
      v.pending = true;
      ++truth.wakeups[{v.domain, v.vcpu}];
    }
    // Free pCPUs take a runnable vCPU or stay idle.
    for (int c = 0; c < 2; ++c) {
      std::vector<int> ready;
      for (size_t i = 0; i < vcpus.size(); ++i) {
        if (vcpus[i].state == kReady) ready.push_back(static_cast<int>(i));
      }
      if (running[c] >= 0 || ready.empty() || chance(0.2)) continue;
      const int pick = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];
      Vcpu& v = vcpus[pick];
      if (before[c] < 0) state(t, c, kIdle, static_cast<uint16_t>(c), kRun, kReady);
      if (v.last >= 0 && v.last != c) {
        if (chance(0.5)) {
          SchedRecord m = Stream::Base(SchedType::kMigrate, t, static_cast<uint16_t>(c), v.domain, v.vcpu);
          m.from_pcpu = static_cast<uint16_t>(v.last);
          m.to_pcpu = static_cast<uint16_t>(c);
          record(c, m);
          ++truth.recorded[{v.domain, v.vcpu}];
        } else {
          ++truth.derived[{v.domain, v.vcpu}];
        }
      }
      state(t, c, v.domain, v.vcpu, kReady, kRun);
      truth.blamed[{v.domain, v.vcpu}] += t - v.ready_since;
      if (v.pending) {
        ++truth.latencies[{v.domain, v.vcpu}];
        truth.max_latency[{v.domain, v.vcpu}] = std::max(truth.max_latency[{v.domain, v.vcpu}], t - v.woke);
        v.pending = false;
      }
      v.state = kRun;
      v.last = c;
      running[c] = pick;
    }
    // The idle vCPU of a pCPU whose vCPU left runs again.
    for (int c = 0; c < 2; ++c) {
      if (running[c] < 0 && before[c] >= 0) state(t, c, kIdle, static_cast<uint16_t>(c), kReady, kRun);
    }
  }
  Stream s;
  std::array<size_t, 2> at{};
  while (at[0] < rings[0].size() || at[1] < rings[1].size()) {
    const int c = at[0] == rings[0].size() ? 1 : at[1] == rings[1].size() ? 0 : chance(0.5) ? 0 : 1;
    s.Add(rings[c][at[c]++]);
  }
  return s;
}

}  // namespace

TEST_CASE("sched: 2 pCPUs for 10 s account for 20 s of pCPU time, and every vCPU's time matches", "[sched]") {
  constexpr uint64_t kTen = 10'000'000'000;
  for (uint32_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    Truth truth;
    const Stream s = RandomSchedule(seed, kTen, truth);
    const SchedReport report = Analyze(s, Window(0, kTen, 2));
    CheckAccounting(report);
    CHECK(report.counters.inconsistent == 0);
    CHECK(report.counters.redundant_wakeups == 0);
    uint64_t pcpu_time = 0;
    for (const SchedPcpuStats& p : report.pcpu_stats) {
      pcpu_time += p.busy_ns + p.idle_ns;
      CHECK(p.busy_ns == truth.busy[p.pcpu]);
      CHECK(p.idle_ns == truth.idle[p.pcpu]);
      CHECK(p.unknown_ns == 0);
    }
    // Issue 21 asks for 2%; the records say it exactly.
    CHECK(pcpu_time == 2 * kTen);
    uint64_t running = 0;
    for (const auto& [key, ns] : truth.ns) {
      const SchedEntityStats& st = Find(report, key.first, key.second);
      INFO(st.label);
      // A vCPU that never left the blocked state has no record: all of it is unknown.
      if (!st.seen) {
        CHECK(ns[kBlockedI] == kTen);
        continue;
      }
      CHECK(st.ns == ns);
      CHECK(st.wakeups == truth.wakeups[key]);
      CHECK(st.latency.count == truth.latencies[key]);
      CHECK(st.latency.max_ns == truth.max_latency[key]);
      CHECK(st.migrations_recorded == truth.recorded[key]);
      CHECK(st.migrations_derived == truth.derived[key]);
      running += st.ns[kRunningI];
    }
    CHECK(running == report.pcpu_stats[0].busy_ns + report.pcpu_stats[1].busy_ns);
    // Every wait that ended in running is blamed on someone, to the nanosecond.
    SchedOptions all = Window(0, kTen, 2);
    all.top = 1000;
    const SchedReport full = Analyze(s, all);
    for (uint32_t e : full.shown) {
      const SchedEntityStats& st = full.entities[e];
      uint64_t blamed = 0;
      std::set<std::string> labels;
      for (const SchedPreemptor& p : st.preemptors) {
        blamed += p.ns;
        labels.insert(p.label);
      }
      CHECK(blamed == truth.blamed[{st.entity.domain, st.entity.vcpu}]);
      // The idle vCPUs of both pCPUs are one preemptor, "idle".
      CHECK(labels.size() == st.preemptors.size());
      CHECK(labels.count("idle") == 1);
    }
  }
}

TEST_CASE("sched: the text, CSV and JSON reports say what the analysis found", "[sched]") {
  Stream s = Alternating();
  s.Lost(95, 0, 2, 92);
  const SchedReport report = Analyze(s, Window(0, 100));
  const std::string text = FormatSchedText(report);
  CHECK(text.find("Scheduling: 1 pCPUs over 0.000 s") != std::string::npos);
  CHECK(text.find("19 records") != std::string::npos);
  CHECK(text.find("2 records lost in 1 gaps") != std::string::npos);
  CHECK(text.find("dom1 (web) v0") != std::string::npos);
  CHECK(text.find("Longest waits") != std::string::npos);
  CHECK(text.find("Top preemptors") != std::string::npos);
  CHECK(text.find("Migrations") != std::string::npos);
  // The preemptor row: dom1's vCPU waited 50 ns, 40 of them (its waits that ended) while dom2's ran.
  CHECK(text.find("dom2 (db) v0") != std::string::npos);
  CHECK(FormatSchedText(report, true).find("Scheduling:") == std::string::npos);

  const std::string csv = FormatSchedCsv(report);
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);
  const auto fields = [](const std::string& row) { return std::count(row.begin(), row.end(), ',') + 1; };
  const auto columns = fields(line);
  CHECK(line.starts_with("level,domain_id,domain,vcpu,pid,tid,name,running_s,"));
  std::vector<std::string> rows;
  while (std::getline(lines, line)) {
    CHECK(fields(line) == columns);
    rows.push_back(line);
  }
  REQUIRE(rows.size() == 1 + 2 + 2);  // a pCPU, two domains, two vCPUs
  CHECK(rows[0].starts_with("pcpu,,,,,,pCPU 0,0.000000092,"));  // busy until the gap at 92
  CHECK(rows[3].starts_with("vcpu,1,dom1 (web),0,,,dom1 (web) v0,0.000000050,0.000000050,"));
  // dom2's vCPU ran when records were lost: from then its state is unknown.
  CHECK(rows[4].starts_with("vcpu,2,dom2 (db),0,,,dom2 (db) v0,0.000000042,0.000000050,0.000000000,0.000000000,0.000000008,"));

  const Json json = Json::parse(FormatSchedJson(report));
  CHECK(json["schema"] == "hvprof-sched");
  CHECK(json["version"] == 1);
  CHECK(json["window"]["ns"] == 100);
  CHECK(json["records"]["lost_records"] == 2);
  CHECK(json["pcpus"][0]["busy_ns"] == 92);
  CHECK(json["pcpus"][0]["unknown_ns"] == 8);
  CHECK(json["pcpus"][0]["lost_ns"] == 8);
  REQUIRE(json["entities"].size() == 2);
  const Json& a = json["entities"][0];
  CHECK(a["label"] == "dom1 (web) v0");
  CHECK(a["domain"] == 1);
  CHECK(a["pid"].is_null());
  CHECK(a["running_ns"] == 50);
  CHECK(a["runnable_ns"] == 50);
  CHECK(a["unknown_ns"] == 0);
  CHECK(json["entities"][1]["unknown_ns"] == 8);
  CHECK(a["preemptors"][0]["label"] == "dom2 (db) v0");
  CHECK(a["preemptors"][0]["ns"] == 40);
  CHECK(a["latency"]["count"] == 0);
  CHECK(json["domains"][1]["name"] == "dom2 (db)");
  CHECK(json["longest_waits"][0]["ns"] == 10);
  CHECK(json["domain_preemptions"][0]["victim_name"] == "dom2 (db)");
}

TEST_CASE("sched: names are escaped for terminals and CSV", "[sched]") {
  Stream s = Alternating();
  SchedOptions options = Window(0, 100);
  options.domain_names[1] = "evil\x1b[2J,\"x\"";
  const SchedReport report = Analyze(s, options);
  const std::string text = FormatSchedText(report);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find("evil\\x1b[2J") != std::string::npos);
  const std::string csv = FormatSchedCsv(report);
  CHECK(csv.find('\x1b') == std::string::npos);
  CHECK(csv.find("\"dom1 (evil\\x1b[2J,\"\"x\"\")\"") != std::string::npos);
  // JSON keeps the name as it is, escaped the JSON way.
  CHECK(Json::parse(FormatSchedJson(report))["domains"][0]["name"] == "dom1 (evil\x1b[2J,\"x\")");
}

TEST_CASE("sched: CPU time beside the sample share, per domain", "[sched]") {
  const SchedReport report = Analyze(Alternating(), Window(0, 100));
  SchedOptions options = Window(0, 100);
  const SchedShares shares = SharesBesideSamples(report, {{1, 30}, {2, 10}, {4, 10}, {kIdle, 500}}, options);
  CHECK(shares.running_ns == 100);
  CHECK(shares.samples == 50);
  REQUIRE(shares.rows.size() == 3);
  CHECK(shares.rows[0].name == "dom1 (web)");
  CHECK(shares.rows[0].running_percent == Approx(50.0));
  CHECK(shares.rows[0].sample_percent == Approx(60.0));
  CHECK(shares.rows[2].name == "dom4");  // samples but no scheduling records
  CHECK(shares.rows[2].running_ns == 0);
  CHECK(shares.rows[2].sample_percent == Approx(20.0));
  const std::string text = FormatSchedText(report, true, &shares);
  const auto table = text.find("CPU time (running, of all vCPUs' running time) beside the share of the samples");
  REQUIRE(table != std::string::npos);
  CHECK(text.find("dom1 (web)                    0.000    50.00         30    60.00\n", table) != std::string::npos);
  CHECK(text.find("dom4                          0.000     0.00         10    20.00\n", table) != std::string::npos);
  const std::string csv = FormatSchedCsv(report, &shares);
  CHECK(csv.substr(0, csv.find('\n')).ends_with(",cpu_%,samples,samples_%"));
  CHECK(csv.find("\ndomain,1,dom1 (web),,,,dom1 (web),0.000000050,") != std::string::npos);
  CHECK(csv.find(",50.0000,30,60.0000\n") != std::string::npos);
  CHECK(csv.find("\ndomain,4,dom4,,,,dom4,") != std::string::npos);
  const Json json = Json::parse(FormatSchedJson(report, &shares));
  CHECK(json["samples"]["samples"] == 50);
  CHECK(json["samples"]["domains"][1]["samples"] == 10);
  CHECK(json["samples"]["domains"][2]["name"] == "dom4");
}

TEST_CASE("sched: the text time line shows who ran most of each bucket", "[sched][timeline]") {
  TimelineOptions options;
  options.buckets = 10;
  const auto timeline = BuildTimeline(Alternating().records, Window(0, 100), options);
  REQUIRE(timeline);
  REQUIRE(timeline.value().cells.size() == 1);
  const std::string text = FormatTimelineText(timeline.value());
  CHECK(text.find("pCPU   0 |ABABABABAB|\n") != std::string::npos);
  CHECK(text.find("  A dom1 (web)\n  B dom2 (db)\n") != std::string::npos);
  // Five buckets: each holds 20 ns, 10 of each; the lower domain id wins a tie.
  options.buckets = 5;
  const auto coarse = BuildTimeline(Alternating().records, Window(0, 100), options);
  REQUIRE(coarse);
  CHECK(FormatTimelineText(coarse.value()).find("|AAAAA|") != std::string::npos);
  // Idle and unknown time have their own characters.
  Stream s;
  s.Switch(50, 0, {kIdle, 0}, kReady, {3, 0});
  s.Lost(80, 1, 1, 60);
  s.State(80, 1, kIdle, 1, kReady, kRun);
  options.buckets = 10;
  const auto mixed = BuildTimeline(s.records, Window(0, 100), options);
  REQUIRE(mixed);
  const std::string mixed_text = FormatTimelineText(mixed.value());
  CHECK(mixed_text.find("pCPU   0 |.....AAAAA|\n") != std::string::npos);
  CHECK(mixed_text.find("pCPU   1 |????????..|\n") != std::string::npos);
  CHECK(mixed_text.find("  . idle\n") != std::string::npos);
  const std::string csv = FormatTimelineCsv(mixed.value());
  CHECK(csv.find("0,5,50,60,3,dom3\n") != std::string::npos);
  CHECK(csv.find("1,0,0,10,,unknown: no record says who ran\n") != std::string::npos);
  options.buckets = 0;
  CHECK(!BuildTimeline(s.records, Window(0, 100), options));
}

TEST_CASE("sched: the Chrome trace parses, its slices never overlap on a track and add up to the running time",
          "[sched][timeline]") {
  constexpr uint64_t kTen = 10'000'000'000;
  Truth truth;
  const Stream s = RandomSchedule(7, kTen, truth);
  TimelineOptions options;
  options.slices = true;
  const auto timeline = BuildTimeline(s.records, Window(0, kTen, 2), options);
  REQUIRE(timeline);
  const SchedReport& report = timeline.value().report;
  const Json trace = Json::parse(FormatChromeTrace(timeline.value()));
  CHECK(trace["displayTimeUnit"] == "ns");
  std::map<int, std::string> tracks;
  std::map<std::string, uint64_t> running;  // per slice name, ns
  std::map<int, std::vector<std::pair<uint64_t, uint64_t>>> slices;
  bool process_named = false;
  for (const Json& event : trace["traceEvents"]) {
    if (event["ph"] == "M") {
      if (event["name"] == "thread_name") tracks[event["tid"].get<int>()] = event["args"]["name"];
      if (event["name"] == "process_name") process_named = event["pid"] == 1 && event["args"]["name"] == "pCPUs";
      continue;
    }
    REQUIRE(event["ph"] == "X");
    CHECK(event["pid"] == 1);
    // Microseconds with three decimals: back to exact nanoseconds.
    const auto ns = [](const Json& us) { return static_cast<uint64_t>(std::llround(us.get<double>() * 1000)); };
    const uint64_t ts = ns(event["ts"]);
    const uint64_t dur = ns(event["dur"]);
    CHECK(dur > 0);
    running[event["name"]] += dur;
    slices[event["tid"].get<int>()].push_back({ts, ts + dur});
    CHECK(event["args"].contains("domain"));
  }
  CHECK(process_named);
  CHECK(tracks == std::map<int, std::string>{{1, "pCPU 0"}, {2, "pCPU 1"}});
  for (auto& [tid, list] : slices) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) CHECK(list[i - 1].second <= list[i].first);
  }
  size_t named = 0;
  for (uint32_t e : report.shown) {
    const SchedEntityStats& st = report.entities[e];
    INFO(st.label);
    CHECK(running[st.label] == st.ns[kRunningI]);
    named += st.ns[kRunningI] > 0;
  }
  CHECK(named == running.size());
}

TEST_CASE("sched: 64 vCPUs taking turns on 8 pCPUs add up", "[sched]") {
  // Round robin every 1 µs for 200,000 switches: each wait spans 56 switches.
  Stream s;
  std::array<int, 8> on{};
  for (int c = 0; c < 8; ++c) on[c] = c;
  int next = 8;
  uint64_t t = 0;
  for (int round = 0; round < 25000; ++round) {
    t += 1000;
    for (int c = 0; c < 8; ++c) {
      const int out = on[c];
      const int in = next;
      next = (next + 1) % 64;
      s.Switch(t, static_cast<uint16_t>(c), {static_cast<uint16_t>(1 + out / 8), static_cast<uint16_t>(out % 8)}, kReady,
               {static_cast<uint16_t>(1 + in / 8), static_cast<uint16_t>(in % 8)});
      on[c] = in;
    }
  }
  const SchedReport report = Analyze(s, Window(0, t + 1000, 8));
  CheckAccounting(report);
  CHECK(report.counters.inconsistent == 0);
  uint64_t busy = 0;
  for (const SchedPcpuStats& p : report.pcpu_stats) busy += p.busy_ns;
  CHECK(busy == 8 * (t + 1000));
  CHECK(report.shown.size() == 64);
}

TEST_CASE("sched: garbage records never break the accounting, the time line or the trace", "[sched][timeline]") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
    Stream s;
    std::array<uint64_t, 4> clock{};
    for (int i = 0; i < 5000; ++i) {
      const uint16_t pcpu = pick(50) == 0 ? hvpmu::ring::kUnknownPcpu : static_cast<uint16_t>(pick(4));
      uint64_t& now = clock[pcpu == hvpmu::ring::kUnknownPcpu ? 0 : pcpu];
      now += pick(20) == 0 ? 0 : pick(1000);
      const uint64_t t = pick(40) == 0 ? now - std::min(now, pick(3000)) : now;  // sometimes back in time
      const uint16_t domain = pick(5) == 0 ? kIdle : static_cast<uint16_t>(1 + pick(3));
      SchedRecord r = Stream::Base(static_cast<SchedType>(pick(7)), t, pcpu, domain, static_cast<uint16_t>(pick(4)));
      r.old_state = static_cast<uint8_t>(pick(30) == 0 ? pick(256) : pick(4));
      r.new_state = static_cast<uint8_t>(pick(30) == 0 ? pick(256) : pick(4));
      if (pick(4) == 0) {
        r.flags = hvpmu::ring::kSchedPidValid;
        r.pid = static_cast<uint32_t>(100 + pick(3));
        r.tid = r.pid + static_cast<uint32_t>(pick(2));
      }
      r.from_pcpu = static_cast<uint16_t>(pick(5));
      r.to_pcpu = static_cast<uint16_t>(pick(5));
      r.count = pick(10);
      r.aux = pick(3) == 0 ? 0 : t - std::min(t, pick(5000)) + (pick(10) == 0 ? 10000 : 0);
      s.Add(r);
    }
    SchedOptions options;
    if (pick(2) == 0) {
      options.start_ns = pick(100000);
      options.end_ns = *options.start_ns + pick(3000000);
    }
    options.pcpus = static_cast<uint32_t>(pick(6));
    TimelineOptions timeline_options;
    timeline_options.buckets = static_cast<uint32_t>(1 + pick(100));
    timeline_options.slices = true;
    const auto timeline = BuildTimeline(s.records, options, timeline_options);
    REQUIRE(timeline);
    const SchedReport& report = timeline.value().report;
    CheckAccounting(report);
    std::map<uint32_t, uint64_t> sliced;
    std::map<uint16_t, uint64_t> last_end;
    for (const TimelineSlice& slice : timeline.value().slices) {
      CHECK(slice.start_ns < slice.end_ns);
      CHECK(slice.start_ns >= last_end[slice.pcpu]);
      last_end[slice.pcpu] = slice.end_ns;
      sliced[slice.entity] += slice.end_ns - slice.start_ns;
    }
    uint64_t busy = 0;
    for (const SchedPcpuStats& p : report.pcpu_stats) busy += p.busy_ns;
    uint64_t running = 0;
    for (uint32_t e : report.shown) {
      CHECK(sliced[e] == report.entities[e].ns[kRunningI]);
      running += report.entities[e].ns[kRunningI];
    }
    CHECK(running == busy);
    CHECK(Json::parse(FormatChromeTrace(timeline.value()))["traceEvents"].size() ==
          2 + 2 * report.pcpus + timeline.value().slices.size());
    CHECK(!FormatSchedText(report).empty());
    CHECK(Json::parse(FormatSchedJson(report))["schema"] == "hvprof-sched");
    CHECK(report.counters.input.kept + report.counters.input.backwards + report.counters.input.unknown_types +
              report.counters.input.invalid + report.counters.input.noop_migrations ==
          5000);
  }
}

TEST_CASE("sched: a session without sched.hvs says it recorded no scheduling", "[sched]") {
  testing::TempDir dir;
  store::StoredSample sample;
  sample.ip = 0x401000;
  sample.time_ns = 1000;
  sample.period = 1000000;
  sample.pid = sample.tid = 100;
  const std::string session = testing::WriteSyntheticSession(dir.File("session"), "linux", {{100, "app", {}}}, {sample});
  const auto loaded = LoadSchedRecords(session);
  REQUIRE(!loaded);
  CHECK(loaded.error().kind() == ErrorKind::kNotFound);
  CHECK(loaded.error().message().find("this session recorded no scheduling (run with --sched)") != std::string::npos);
  // No session at all is another matter, and says so.
  const auto nothing = LoadSchedRecords(dir.File("nowhere"));
  REQUIRE(!nothing);
  CHECK(nothing.error().message().find("recorded no scheduling") == std::string::npos);
}
