// A dry-run LinuxMachine (no perf) under a real Engine: synthetic perf records go through
// the whole sample path, and the engine's rings show where each kind of sample lands.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/linux/linux_machine.h"
#include "live_support.h"
#include "record_builder.h"
#include "temp_dir.h"

using namespace hvpmu;
using namespace hvprof::linux_host;
using hvprof::testing::CollectedSample;
using hvprof::testing::EngineSession;
using hvprof::testing::RecordBuilder;
using hvprof::testing::SessionOptions;
using hvprof::testing::TempDir;

namespace {

class FakeHost {
 public:
  FakeHost() {
    Write("sys/devices/system/cpu/online", "0-1\n");
    Write("sys/devices/system/cpu/possible", "0-1\n");
    Write("proc/sys/kernel/perf_event_max_sample_rate", "100000\n");
    Process(1, 0, "init");
    Process(50, 1, "hostapp");
    Process(100, 1, "tree-root");
    Process(300, 1, "qemu-system-x86");
    Write("proc/300/task/301/comm", "CPU 0/KVM\n");
    Write("proc/300/task/302/comm", "CPU 1/KVM\n");
    Write("proc/300/task/303/comm", "worker\n");
    // /proc/TID exists for every thread, though only processes are listed.
    for (int tid : {301, 302, 303}) {
      Write(fmt::format("proc/{}/status", tid), fmt::format("Name:\tx\nTgid:\t300\nPid:\t{}\n", tid));
    }
    Process(400, 1, "othervmm");
  }
  void Process(uint32_t pid, uint32_t ppid, const std::string& comm) {
    Write(fmt::format("proc/{}/stat", pid),
          fmt::format("{} ({}) S {} 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0\n", pid, comm, ppid,
                      1000 + pid));
    Write(fmt::format("proc/{}/comm", pid), comm + "\n");
    Write(fmt::format("proc/{}/cgroup", pid), "0::/\n");
    Write(fmt::format("proc/{}/maps", pid), "");
  }
  HostPaths paths() const { return {dir_.File("proc"), dir_.File("sys")}; }
  // tracefs with the scheduler's tracepoints of fixtures/tracefs (a 6.18 kernel).
  void Tracefs() {
    for (const char* event : {"sched_switch", "sched_waking", "sched_wakeup_new", "sched_migrate_task"}) {
      std::ifstream in(std::string(HVPROF_LINUX_TRACEFS_FIXTURES) + "/" + event + "/format");
      std::stringstream text;
      text << in.rdbuf();
      Write(fmt::format("sys/kernel/tracing/events/sched/{}/format", event), text.str());
    }
  }
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = dir_.File(relative);
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }

 private:
  TempDir dir_;
};

LinuxOptions DryOptions(const FakeHost& host, const char* map) {
  LinuxOptions options;
  auto parsed = ParseDomainMap(map);
  REQUIRE(parsed.has_value());
  options.domain_map = parsed.value();
  options.auto_kvm_domains = false;
  options.dry_run = true;
  options.mhz = 2000;
  options.paths = host.paths();
  options.read_elf = false;
  options.callchain_depth = 8;
  return options;
}

const CollectedSample* FindIp(const std::vector<CollectedSample>& samples, uint64_t ip) {
  for (const CollectedSample& sample : samples) {
    if (sample.record.ip == ip) return &sample;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("perf samples land in the right domain, ring and mode", "[linux][routing]") {
  FakeHost host;
  auto created = LinuxMachine::Create(DryOptions(host, "pid:100=1,kvm:300=2"));
  REQUIRE(created.has_value());
  LinuxMachine& machine = *created.value();
  CHECK(std::string(machine.driver()->cpu_type()) == "linux/software");

  SessionOptions session_options;
  session_options.passive = {1, 2};
  session_options.backtrace_depth = 8;
  EngineSession session(machine, session_options);
  session.Start();

  PerfPmuDriver& driver = machine.perf_driver();
  const uint64_t id0 = driver.IdOf(0, 0);
  const uint64_t id1 = driver.IdOf(1, 0);
  REQUIRE(id0 != 0);
  REQUIRE(id1 != 0);
  REQUIRE(id0 != id1);
  // CPU_CLK_UNHALTED:100000 at 2000 MHz is a 50 us cpu-clock period.
  REQUIRE(driver.counters()[0].period == 50000);

  RecordBuilder b(driver.layout());
  const uint64_t kKernel = 0xffffffff81001000;
  b.Sample(kMiscUser, id0, 0x401000, 50, 50, 100, 0, 50000,
           {kContextUser, 0x401000, 0x401100, 0x401200});
  b.Sample(kMiscKernel, id0, kKernel, 50, 50, 110, 0, 50000,
           {kContextKernel, kKernel, 0xffffffff81002000, kContextUser, 0x401000});
  b.Sample(kMiscKernel, id0, 0xffffffff81003000, 0, 0, 120, 0, 50000);  // idle
  b.Sample(kMiscUser, id0, 0x402000, 100, 100, 130, 0, 50000);
  // The child's sample comes before its FORK in the bytes, after it in time.
  b.Sample(kMiscUser, id1, 0x402100, 101, 101, 150, 1, 50000);
  RecordBuilder::Sid fork_sid{100, 100, 140, 0, 1};
  b.Fork(101, 100, 101, 100, fork_sid);
  b.Sample(kMiscGuestKernel, id0, 0xffffffff80001000, 300, 302, 160, 0, 50000);
  b.Sample(kMiscGuestUser, id0, 0x7000, 300, 301, 170, 0, 50000);
  b.Sample(kMiscKernel, id0, 0xffffffff81004000, 300, 302, 180, 0, 50000);  // KVM, for vCPU 1
  b.Sample(kMiscUser, id0, 0x7f0000001000, 300, 303, 185, 0, 50000);        // the VMM's I/O
  b.Sample(kMiscGuestKernel, id0, 0xffffffff80002000, 400, 401, 190, 0, 50000);  // no domain
  b.Sample(kMiscUser, 999999, 0x403000, 50, 50, 195, 0, 50000);  // an id nobody opened
  RecordBuilder::Sid sid{0, 0, 200, 0, id0};
  b.Throttle(true, 200, id0, sid);
  sid.time = 201;
  b.Lost(id0, 5, sid);
  sid.time = 202;
  b.Throttle(false, 202, id0, sid);
  const DrainResult drained = machine.InjectRecords(0, b.bytes());
  CHECK(drained.samples == 10);
  session.DrainRings();
  const auto& samples = session.samples();

  SECTION("host user: dom0, user mode, the CPU's ring, perf's time, cycles, user frames") {
    const CollectedSample* s = FindIp(samples, 0x401000);
    REQUIRE(s != nullptr);
    CHECK(s->region_owner == 0);
    CHECK(s->ring == 0);
    CHECK(s->record.domain == 0);
    CHECK(s->record.vcpu == 0);
    CHECK(s->record.mode == static_cast<uint8_t>(ring::Mode::kUser));
    CHECK(s->record.pid == 50);
    CHECK(s->record.tid == 50);
    CHECK(s->record.address_space == 50);
    CHECK(s->record.flags == (ring::kFlagPidValid | ring::kFlagAddressSpaceValid));
    CHECK(s->record.time_ns == 100);
    CHECK(s->record.period == 100000);
    CHECK(s->frames == std::vector<uint64_t>{0x401100, 0x401200});
  }
  SECTION("host kernel: the kernel mode of the running process's domain") {
    const CollectedSample* s = FindIp(samples, kKernel);
    REQUIRE(s != nullptr);
    CHECK(s->record.domain == 0);
    CHECK(s->record.mode == static_cast<uint8_t>(ring::Mode::kKernel));
    CHECK((s->record.flags & ring::kFlagGuest) == 0);
    CHECK(s->record.pid == 50);
    CHECK(s->frames == std::vector<uint64_t>{0xffffffff81002000});  // kernel frames only
  }
  SECTION("idle: the primary's pCPU ring") {
    const CollectedSample* s = FindIp(samples, 0xffffffff81003000);
    REQUIRE(s != nullptr);
    CHECK(s->region_owner == 0);
    CHECK(s->ring == 2);  // two vCPU rings, then pCPU 0
    CHECK(s->record.domain == kDomainIdle);
    CHECK(s->record.mode == static_cast<uint8_t>(ring::Mode::kHypervisor));
  }
  SECTION("a pid: tree, root and forked child, is its own domain") {
    const CollectedSample* root = FindIp(samples, 0x402000);
    REQUIRE(root != nullptr);
    CHECK(root->region_owner == 1);
    CHECK(root->record.domain == 1);
    CHECK(root->record.mode == static_cast<uint8_t>(ring::Mode::kUser));
    const CollectedSample* child = FindIp(samples, 0x402100);
    REQUIRE(child != nullptr);
    CHECK(child->region_owner == 1);
    CHECK(child->record.pid == 101);
    CHECK(child->ring == 1);  // taken on CPU 1
  }
  SECTION("KVM guest kernel and user: the VMM's domain, its thread's vCPU, guest flag") {
    const CollectedSample* kernel = FindIp(samples, 0xffffffff80001000);
    REQUIRE(kernel != nullptr);
    CHECK(kernel->region_owner == 2);
    CHECK(kernel->record.domain == 2);
    CHECK(kernel->record.vcpu == 1);
    CHECK(kernel->ring == 1);
    CHECK(kernel->record.mode == static_cast<uint8_t>(ring::Mode::kKernel));
    CHECK((kernel->record.flags & ring::kFlagGuest) != 0);
    CHECK((kernel->record.flags & ring::kFlagPidValid) == 0);
    CHECK(kernel->record.pid == ring::kNoPid);
    const CollectedSample* user = FindIp(samples, 0x7000);
    REQUIRE(user != nullptr);
    CHECK(user->record.domain == 2);
    CHECK(user->record.vcpu == 0);
    CHECK(user->record.mode == static_cast<uint8_t>(ring::Mode::kUser));
    CHECK((user->record.flags & ring::kFlagGuest) != 0);
  }
  SECTION("host kernel in a vCPU thread is the guest's hypervisor time; the VMM's I/O is dom0's") {
    const CollectedSample* exit = FindIp(samples, 0xffffffff81004000);
    REQUIRE(exit != nullptr);
    CHECK(exit->record.domain == 2);
    CHECK(exit->record.vcpu == 1);
    CHECK(exit->record.mode == static_cast<uint8_t>(ring::Mode::kHypervisor));
    CHECK((exit->record.flags & ring::kFlagGuest) == 0);
    const CollectedSample* io = FindIp(samples, 0x7f0000001000);
    REQUIRE(io != nullptr);
    CHECK(io->record.domain == 0);
    CHECK(io->record.mode == static_cast<uint8_t>(ring::Mode::kUser));
  }
  SECTION("unmapped guests, unknown ids, throttling and perf's losses are all counted") {
    CHECK(FindIp(samples, 0xffffffff80002000) == nullptr);
    CHECK(FindIp(samples, 0x403000) == nullptr);
    const hvpmu::Status status = session.Status();
    CHECK(status.lost[static_cast<uint32_t>(ring::LossReason::kUnprofiledDomain)] == 1);
    CHECK(machine.router_stats().unmapped_guest == 1);
    CHECK(machine.cpu_stats()[0].throttles == 1);
    CHECK(machine.cpu_stats()[0].unthrottles == 1);
    CHECK(machine.cpu_stats()[0].lost == 5);
    CHECK(machine.cpu_stats()[0].samples[0] == 9);
    CHECK(machine.cpu_stats()[1].samples[0] == 1);
    const hvprof::context::PlatformStats stats = machine.Stats();
    CHECK(stats.source == "cpu-clock");
    CHECK(stats.totals.throttles == 1);
    CHECK(stats.totals.lost == 5);
    CHECK(stats.totals.unknown_sample_ids == 1);
    REQUIRE(stats.counters.size() >= 1);
    CHECK(stats.counters[0].period == 50000);
    CHECK(stats.counters[0].requested_hz_per_cpu == Approx(20000));
    CHECK(stats.throttled);
    bool throttle_note = false, lost_note = false, guest_note = false;
    for (const std::string& note : machine.notes()) {
      throttle_note |= note.find("throttled sampling") != std::string::npos;
      lost_note |= note.find("perf lost 5 records") != std::string::npos;
      guest_note |= note.find("without a domain") != std::string::npos;
    }
    CHECK(throttle_note);
    CHECK(lost_note);
    CHECK(guest_note);
  }
  SECTION("domains and context") {
    const std::vector<hvprof::context::DomainInfo> domains = machine.Domains();
    REQUIRE(domains.size() == 3);
    CHECK(domains[0].name == "Domain-0");
    CHECK(domains[1].type == "host");
    CHECK(domains[2].type == "hvm");
    CHECK(domains[2].vcpus == 2);  // "CPU 0/KVM", "CPU 1/KVM"
    CHECK(domains[0].kernel == "/proc/kallsyms");
    CHECK(domains[2].kernel.empty());
    CHECK(machine.Images(0).hypervisor == "/proc/kallsyms");
    CHECK(machine.Images(1).hypervisor.empty());
    CHECK(machine.Images(1).kernel == "/proc/kallsyms");
    CHECK(machine.Images(2).kernel.empty());
  }
}

TEST_CASE("throttled time is counted as samples lost at the rate asked", "[linux][routing][throttle]") {
  FakeHost host;
  auto created = LinuxMachine::Create(DryOptions(host, ""));
  REQUIRE(created.has_value());
  LinuxMachine& machine = *created.value();
  EngineSession session(machine, SessionOptions{});
  session.Start();
  PerfPmuDriver& driver = machine.perf_driver();
  const uint64_t id0 = driver.IdOf(0, 0);
  const uint64_t id1 = driver.IdOf(1, 0);
  const double hz = driver.counters()[0].requested_hz;
  REQUIRE(hz == Approx(20000));  // a 50 us period

  RecordBuilder cpu0(driver.layout());
  RecordBuilder::Sid sid{0, 0, 0, 0, id0};
  cpu0.Sample(kMiscUser, id0, 0x401000, 50, 50, 500'000, 0, 50000);
  // Throttled for 4 ms: 80 samples of 50 us were not taken.
  sid.time = 1'000'000;
  cpu0.Throttle(true, 1'000'000, id0, sid);
  sid.time = 5'000'000;
  cpu0.Throttle(false, 5'000'000, id0, sid);
  // An UNTHROTTLE without its THROTTLE, and one for an id nobody opened, count nothing.
  sid.time = 6'000'000;
  cpu0.Throttle(false, 6'000'000, id0, sid);
  cpu0.Throttle(true, 6'000'000, 999999, sid);
  cpu0.Sample(kMiscUser, id0, 0x401000, 50, 50, 10'000'000, 0, 50000);
  machine.InjectRecords(0, cpu0.bytes());

  // CPU 1 is throttled at 9 ms and still is at the last record seen (10 ms): 1 ms, 20 samples.
  RecordBuilder cpu1(driver.layout());
  RecordBuilder::Sid sid1{0, 0, 9'000'000, 1, id1};
  cpu1.Throttle(true, 9'000'000, id1, sid1);
  machine.InjectRecords(1, cpu1.bytes());

  CHECK(machine.cpu_stats()[0].throttles == 2);
  CHECK(machine.cpu_stats()[0].unthrottles == 2);
  CHECK(machine.cpu_stats()[0].throttled_ns[0] == 4'000'000);
  hvprof::context::PlatformStats stats = machine.Stats();
  REQUIRE(stats.cpus.size() >= 2);
  CHECK(stats.cpus[0].throttled == 80);
  CHECK(stats.cpus[0].throttled_ns == 4'000'000);
  CHECK(stats.cpus[1].throttled == 20);
  CHECK(stats.totals.throttled == 100);
  bool said = false;
  for (const std::string& note : machine.notes()) {
    said |= note.find("the 100 samples it did not take are counted as lost (throttled)") != std::string::npos;
  }
  CHECK(said);

  // A throttle that no tick ended for 50 ms spanned an idle stretch without ticks (NOHZ): idle
  // time, not lost work. CPU 1's open throttle has now lasted 61 ms: the same.
  RecordBuilder idle(driver.layout());
  sid.time = 20'000'000;
  idle.Throttle(true, 20'000'000, id0, sid);
  sid.time = 70'000'000;
  idle.Throttle(false, 70'000'000, id0, sid);
  machine.InjectRecords(0, idle.bytes());
  stats = machine.Stats();
  REQUIRE(stats.cpus.size() >= 2);
  CHECK(stats.cpus[0].idle_throttled_ns == 50'000'000);
  CHECK(stats.cpus[0].throttled == 80);
  CHECK(stats.cpus[1].throttled == 0);
  CHECK(stats.totals.throttled == 80);
}

namespace {

// A raw record of sched_switch, sched_waking or sched_migrate_task as the fixtures' kernel lays
// it out (fixtures/tracefs).
std::vector<uint8_t> SwitchRaw(int32_t prev, int64_t prev_state, int32_t next) {
  std::vector<uint8_t> raw(64, 0);
  const uint16_t id = 372;
  std::memcpy(raw.data(), &id, 2);
  std::memcpy(raw.data() + 24, &prev, 4);
  std::memcpy(raw.data() + 32, &prev_state, 8);
  std::memcpy(raw.data() + 56, &next, 4);
  return raw;
}
std::vector<uint8_t> WakingRaw(int32_t pid, int32_t target_cpu) {
  std::vector<uint8_t> raw(36, 0);
  const uint16_t id = 375;
  std::memcpy(raw.data(), &id, 2);
  std::memcpy(raw.data() + 24, &pid, 4);
  std::memcpy(raw.data() + 32, &target_cpu, 4);
  return raw;
}
std::vector<uint8_t> MigrateRaw(int32_t pid, int32_t from, int32_t to) {
  std::vector<uint8_t> raw(28, 0);
  const uint16_t id = 371;
  std::memcpy(raw.data(), &id, 2);
  std::memcpy(raw.data() + 12, &pid, 4);
  std::memcpy(raw.data() + 20, &from, 4);
  std::memcpy(raw.data() + 24, &to, 4);
  return raw;
}

struct Expected {
  ring::SchedType type;
  ring::Runstate from, to;
  DomainId domain;
  uint16_t vcpu;
  uint32_t tid;  // kNoPid: a vCPU
};

void CheckRecord(const ring::SchedRecord& r, const Expected& e, uint64_t time, uint16_t pcpu) {
  CHECK(r.type == static_cast<uint8_t>(e.type));
  CHECK(r.old_state == static_cast<uint8_t>(e.from));
  CHECK(r.new_state == static_cast<uint8_t>(e.to));
  CHECK(r.domain == e.domain);
  CHECK(r.vcpu == e.vcpu);
  CHECK(r.tid == e.tid);
  CHECK(((r.flags & ring::kSchedPidValid) != 0) == (e.tid != ring::kNoPid));
  CHECK(r.time_ns == time);
  CHECK(r.pcpu == pcpu);
}

}  // namespace

TEST_CASE("scheduler tracepoints become the engine's scheduling records", "[linux][routing][sched]") {
  FakeHost host;
  host.Tracefs();
  host.Write("proc/105/status", "Name:\ttree-worker\nUmask:\t0022\nState:\tS\nTgid:\t100\nNgid:\t0\nPid:\t105\n");
  auto created = LinuxMachine::Create(DryOptions(host, "pid:100=1,kvm:300=2"));
  REQUIRE(created.has_value());
  LinuxMachine& machine = *created.value();
  PerfPmuDriver& driver = machine.perf_driver();

  SECTION("without --sched no tracepoint is opened") {
    EngineSession session(machine, SessionOptions{});
    CHECK(driver.sched() == nullptr);
    CHECK(driver.TracepointIdOf(0, SchedTracepoint::kSwitch) == 0);
    CHECK(driver.layout().other_ids.empty());
  }
  SECTION("with --sched") {
    SessionOptions options;
    options.passive = {1, 2};
    options.sched = true;
    EngineSession session(machine, options);
    REQUIRE(driver.sched() != nullptr);
    uint64_t ids[2][kSchedTracepoints] = {};
    for (uint32_t cpu = 0; cpu < 2; ++cpu) {
      for (uint32_t k = 0; k < kSchedTracepoints; ++k) {
        ids[cpu][k] = driver.TracepointIdOf(cpu, static_cast<SchedTracepoint>(k));
        REQUIRE(ids[cpu][k] != 0);
      }
    }
    const auto sw = [&](uint32_t cpu) { return ids[cpu][static_cast<uint32_t>(SchedTracepoint::kSwitch)]; };
    CHECK(driver.layout().other_ids.size() == 2 * kSchedTracepoints);

    // Before profiling starts nothing is recorded.
    RecordBuilder early(driver.layout());
    early.Tracepoint(sw(0), 0, 0, 50, 0, SwitchRaw(0, 0, 50));
    machine.InjectRecords(0, early.bytes());

    session.Start();
    RecordBuilder cpu0(driver.layout());
    cpu0.Tracepoint(sw(0), 0, 0, 100, 0, SwitchRaw(0, 0, 50));  // idle -> hostapp
    cpu0.Sample(kMiscUser, driver.IdOf(0, 0), 0x401000, 50, 50, 150, 0, 50000);  // a sample between
    cpu0.Tracepoint(ids[0][static_cast<uint32_t>(SchedTracepoint::kWaking)], 50, 50, 200, 0, WakingRaw(302, 1));
    cpu0.Tracepoint(sw(0), 50, 50, 300, 0, SwitchRaw(50, 0x1, 105));    // hostapp sleeps; a thread of 100 runs
    cpu0.Comm(100, 105, "tree-worker", false, RecordBuilder::Sid{100, 105, 350, 0, sw(0)});  // names itself
    cpu0.Tracepoint(sw(0), 100, 105, 400, 0, SwitchRaw(105, 0x10, 0));  // and exits
    cpu0.Tracepoint(sw(0), 0, 0, 450, 0, std::vector<uint8_t>(64, 0));  // not a sched_switch record
    const DrainResult drained = machine.InjectRecords(0, cpu0.bytes());
    CHECK(drained.samples == 1);
    RecordBuilder cpu1(driver.layout());
    cpu1.Tracepoint(ids[1][static_cast<uint32_t>(SchedTracepoint::kMigrate)], 0, 0, 210, 1, MigrateRaw(302, 0, 1));
    cpu1.Tracepoint(sw(1), 0, 0, 250, 1, SwitchRaw(0, 0, 302));  // idle -> the guest's vCPU 1
    machine.InjectRecords(1, cpu1.bytes());
    session.Stop();

    std::vector<ring::SchedRecord> on[2];
    for (const ring::SchedRecord& r : session.sched()) {
      REQUIRE(r.pcpu < 2);
      on[r.pcpu].push_back(r);
    }
    using ring::Runstate;
    using ring::SchedType;
    const uint32_t none = ring::kNoPid;
    REQUIRE(on[0].size() == 7);
    CheckRecord(on[0][0], {SchedType::kRunstate, Runstate::kRunning, Runstate::kRunnable, kDomainIdle, 0, none}, 100, 0);
    CheckRecord(on[0][1], {SchedType::kRunstate, Runstate::kRunnable, Runstate::kRunning, 0, 0, 50}, 100, 0);
    CHECK(on[0][1].pid == 50);
    // The wake-up of the guest's vCPU 1 by hostapp, to run on CPU 1.
    CheckRecord(on[0][2], {SchedType::kWakeup, Runstate::kBlocked, Runstate::kRunnable, 2, 1, none}, 200, 0);
    CHECK((on[0][2].flags & ring::kSchedOtherValid) != 0);
    CHECK(on[0][2].other_domain == 0);
    CHECK(on[0][2].other_tid == 50);
    CHECK(on[0][2].to_pcpu == 1);
    CheckRecord(on[0][3], {SchedType::kRunstate, Runstate::kRunning, Runstate::kBlocked, 0, 0, 50}, 300, 0);
    // Thread 105 is process 100's (/proc/105/status), so domain 1 (pid:100=1).
    CheckRecord(on[0][4], {SchedType::kRunstate, Runstate::kRunnable, Runstate::kRunning, 1, 0, 105}, 300, 0);
    CHECK(on[0][4].pid == 100);
    CheckRecord(on[0][5], {SchedType::kRunstate, Runstate::kRunning, Runstate::kOffline, 1, 0, 105}, 400, 0);
    CheckRecord(on[0][6], {SchedType::kRunstate, Runstate::kRunnable, Runstate::kRunning, kDomainIdle, 0, none}, 400, 0);
    REQUIRE(on[1].size() == 3);
    CheckRecord(on[1][0], {SchedType::kMigrate, Runstate::kRunnable, Runstate::kRunnable, 2, 1, none}, 210, 1);
    CHECK(on[1][0].from_pcpu == 0);
    CHECK(on[1][0].to_pcpu == 1);
    CheckRecord(on[1][1], {SchedType::kRunstate, Runstate::kRunning, Runstate::kRunnable, kDomainIdle, 1, none}, 250, 1);
    CheckRecord(on[1][2], {SchedType::kRunstate, Runstate::kRunnable, Runstate::kRunning, 2, 1, none}, 250, 1);

    const hvprof::context::PlatformStats stats = machine.Stats();
    CHECK(stats.totals.sched_samples == 8);
    CHECK(stats.totals.sched_undecodable == 1);
    CHECK(stats.totals.unknown_sample_ids == 0);
    CHECK(session.samples().size() == 1);
    // The tasks the records name, by name, in their domains' context events for the session,
    // the last naming of a task winning as in the session's index (tree-worker was named
    // before its COMM came, then again with it); none in the guest, whose are vCPUs.
    std::map<std::string, std::string> names;
    for (const hvprof::context::ContextEvent& event : machine.TakeContextEvents(1, SIZE_MAX).events) {
      if (event.kind == hvprof::context::ContextKind::kTask) {
        names[fmt::format("dom{} {}/{}", event.domain, event.pid, event.tid)] = event.comm;
      }
    }
    std::set<std::string> tasks;
    for (const auto& [task, comm] : names) tasks.insert(task + " " + comm);
    CHECK(tasks == std::set<std::string>{"dom0 50/50 hostapp", "dom1 100/105 tree-worker"});
  }
}

TEST_CASE("the software driver validates counts against the timer's floor", "[linux][routing]") {
  FakeHost host;
  auto created = LinuxMachine::Create(DryOptions(host, ""));
  REQUIRE(created.has_value());
  PmuDriver& driver = *created.value()->driver();
  CounterConfig config;
  config.enabled = true;
  config.event = 0x3C;
  config.count = 100000;
  CHECK(driver.Validate(0, config) == ErrorCode::kOk);
  CHECK(driver.Validate(4, config) == ErrorCode::kBadCounter);
  config.count = 49999;  // under the table's minimum
  CHECK(driver.Validate(0, config) == ErrorCode::kCountTooSmall);
  config.event = 0x01;  // CPU_CLOCK, in ns
  config.count = 9999;
  CHECK(driver.Validate(0, config) == ErrorCode::kCountTooSmall);
  config.count = 10000;
  CHECK(driver.Validate(0, config) == ErrorCode::kOk);
  config.unit_mask = 1;
  CHECK(driver.Validate(0, config) == ErrorCode::kBadUnitMask);
  config.event = 0x77;
  CHECK(driver.Validate(0, config) == ErrorCode::kUnknownEvent);
  InitV2 init{};
  driver.Describe(&init);
  CHECK(init.pmu_kind == static_cast<uint32_t>(PmuKind::kExternal));
  CHECK(init.num_gp_counters == kSoftwareCounters);
}

TEST_CASE("raw hardware events are encoded as the engine's drivers encode them",
          "[linux][routing]") {
  CounterConfig config;
  config.event = 0x1A0;  // Zen 4 DISPATCH_SLOTS_EMPTY: event bits 11:8 go to 35:32
  config.unit_mask = 0x1E;
  config.kernel = true;
  config.user = true;
  CHECK(RawEventConfig(PmuKind::kAmdCore, config) == 0x100001EA0ull);
  config.event = 0x2E;  // Intel LLC_MISSES
  config.unit_mask = 0x41;
  CHECK(RawEventConfig(PmuKind::kIntelArchPerfmon, config) == 0x412Eull);
}

TEST_CASE("refusals of perf_event_open say why and what to change", "[linux][routing]") {
  FakeHost host;
  const HostPaths paths = host.paths();
  const std::string denied = PerfOpenError(EACCES, "cpu-clock", 0, paths).message();
  CHECK(denied.find("perf_event_open of cpu-clock on CPU 0") == 0);
  CHECK((denied.find("paranoid") != std::string::npos || denied.find("seccomp") != std::string::npos));
  CHECK(PerfOpenError(ENOSYS, "x", 0, paths).message().find("CONFIG_PERF_EVENTS") != std::string::npos);
  CHECK(PerfOpenError(EMFILE, "x", 0, paths).message().find("ulimit -n") != std::string::npos);
  CHECK(PerfOpenError(ENOENT, "x", 0, paths).message().find("cpu-clock fallback") != std::string::npos);
  CHECK(PerfMmapError(EPERM, 524288, 1, paths).message().find("perf_event_mlock_kb") != std::string::npos);
}
