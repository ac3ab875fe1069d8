// The operation dispatcher and state machine: every op in every state, for the primary and
// for a guest; the activation rule; the Xen quirks that hvprof fixes; and bad input.
#include <array>
#include <cstring>
#include <memory>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "engine_test_support.h"

using namespace hvpmu;
using hvprof::testing::EngineHarness;

namespace {

enum State { kI, kN, kC, kR, kP, kStates };
const char* const kStateNames[] = {"IDLE", "INITIALIZED", "COUNTERS_RESERVED", "READY",
                                   "PROFILING"};

// Builds an engine in the given state. dom0 is the primary; dom1 is on the active list from
// COUNTERS_RESERVED on, and has its buffer and has called enable_virq only in PROFILING.
std::unique_ptr<EngineHarness> InState(State state) {
  auto h = std::make_unique<EngineHarness>();
  auto must = [](ErrorCode error) { REQUIRE(error == ErrorCode::kOk); };
  if (state >= kN) must(h->Init(0));
  if (state >= kC) {
    must(h->GetBufferV2(0));
    must(h->SetActive(0));
    must(h->SetActive(1));
    must(h->Op(0, legacy::kOpReserveCounters));
    must(h->Counter());
  }
  if (state >= kR) must(h->Op(0, legacy::kOpSetupEvents));
  if (state >= kP) {
    must(h->Op(0, legacy::kOpEnableVirq));
    must(h->Init(1));
    must(h->GetBufferV2(1));
    must(h->Op(1, legacy::kOpEnableVirq));
    must(h->Op(0, legacy::kOpStart));
  }
  REQUIRE(static_cast<int>(h->engine->state()) == state);
  return h;
}

struct OpCase {
  const char* name;
  std::function<ErrorCode(EngineHarness&, DomainId caller)> run;
  // Expected result per state for the primary (dom0), then for a guest (dom1).
  std::array<ErrorCode, kStates> primary;
  std::array<ErrorCode, kStates> guest;
};

constexpr ErrorCode Ok = ErrorCode::kOk;
constexpr ErrorCode NotPrimary = ErrorCode::kNotPrimary;
constexpr ErrorCode BadState = ErrorCode::kBadState;
constexpr ErrorCode Profiling = ErrorCode::kProfiling;
constexpr ErrorCode NotListed = ErrorCode::kNotListed;
constexpr ErrorCode NoBuffer = ErrorCode::kNoBuffer;
constexpr ErrorCode NotActive = ErrorCode::kNotActive;
constexpr ErrorCode NotActivated = ErrorCode::kNotActivated;
constexpr ErrorCode AlreadyActivated = ErrorCode::kAlreadyActivated;
constexpr ErrorCode NotSupported = ErrorCode::kNotSupported;
constexpr std::array<ErrorCode, kStates> kAll(ErrorCode e) { return {e, e, e, e, e}; }

template <typename T>
ErrorCode WithArg(EngineHarness& h, DomainId caller, uint32_t op, T arg) {
  return h.Op(caller, op, &arg);
}

InitV2 InitV2Arg() {
  InitV2 init{};
  init.struct_size = sizeof init;
  init.abi_version = kAbiVersion;
  return init;
}

const std::vector<OpCase>& Cases() {
  static const std::vector<OpCase> cases = {
      {"init", [](EngineHarness& h, DomainId c) { return h.Init(c); },
       {Ok, Ok, BadState, BadState, Profiling}, kAll(Ok)},
      {"init_v2", [](EngineHarness& h, DomainId c) { return WithArg(h, c, kOpInitV2, InitV2Arg()); },
       {Ok, Ok, BadState, BadState, Profiling}, kAll(Ok)},
      {"reset_active_list", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpResetActiveList); },
       {NotPrimary, Ok, Ok, Ok, Profiling}, kAll(NotPrimary)},
      {"reset_passive_list", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpResetPassiveList); },
       {NotPrimary, Ok, Ok, Ok, Profiling}, kAll(NotPrimary)},
      {"set_active", [](EngineHarness& h, DomainId c) { return WithArg(h, c, legacy::kOpSetActive, legacy::DomainIdArg{2}); },
       {NotPrimary, Ok, BadState, BadState, BadState}, kAll(NotPrimary)},
      {"set_passive", [](EngineHarness& h, DomainId c) {
         legacy::Passive passive{};
         passive.domain_id = 3;
         passive.max_samples = 64;
         return WithArg(h, c, legacy::kOpSetPassive, passive);
       },
       {NotPrimary, Ok, BadState, BadState, BadState}, kAll(NotPrimary)},
      {"set_passive_v2", [](EngineHarness& h, DomainId c) {
         BufferV2 buffer{};
         buffer.struct_size = sizeof buffer;
         buffer.abi_version = kAbiVersion;
         buffer.domain = 3;
         return WithArg(h, c, kOpSetPassiveV2, buffer);
       },
       {NotPrimary, Ok, BadState, BadState, BadState}, kAll(NotPrimary)},
      {"reserve_counters", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpReserveCounters); },
       {NotPrimary, Ok, BadState, BadState, Profiling}, kAll(NotPrimary)},
      {"counter", [](EngineHarness& h, DomainId c) {
         legacy::Counter counter{};
         counter.count = 100000;
         counter.enabled = 1;
         counter.event = 0xC0;
         counter.ind = 1;
         return WithArg(h, c, legacy::kOpCounter, counter);
       },
       {NotPrimary, BadState, Ok, BadState, BadState}, kAll(NotPrimary)},
      {"setup_events", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpSetupEvents); },
       {NotPrimary, BadState, Ok, BadState, BadState}, kAll(NotPrimary)},
      {"enable_virq", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpEnableVirq); },
       {NotListed, BadState, BadState, Ok, Profiling},
       {NotListed, NotListed, NoBuffer, NoBuffer, AlreadyActivated}},
      {"start", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpStart); },
       {NotPrimary, BadState, BadState, NotActivated, Profiling}, kAll(NotPrimary)},
      {"stop", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpStop); },
       {NotPrimary, BadState, BadState, BadState, Ok}, kAll(NotPrimary)},
      {"disable_virq", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpDisableVirq); },
       {NotActive, NotActive, Ok, Ok, Profiling},
       {NotActive, NotActive, NotActive, NotActive, Profiling}},
      {"release_counters", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpReleaseCounters); },
       {NotPrimary, BadState, Ok, Ok, Profiling}, kAll(NotPrimary)},
      {"shutdown", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpShutdown); },
       {NotPrimary, Ok, BadState, BadState, Profiling}, kAll(NotPrimary)},
      {"get_buffer", [](EngineHarness& h, DomainId c) { return h.GetBufferLegacy(c); },
       {Ok, Ok, Ok, Ok, Profiling}, {Ok, Ok, Ok, Ok, Profiling}},
      {"get_buffer_v2", [](EngineHarness& h, DomainId c) { return h.GetBufferV2(c); },
       {Ok, Ok, Ok, Ok, Profiling}, {Ok, Ok, Ok, Ok, Profiling}},
      {"set_backtrace", [](EngineHarness& h, DomainId c) { return WithArg(h, c, legacy::kOpSetBacktrace, legacy::BacktraceDepthArg{4}); },
       {NotPrimary, Ok, Ok, Ok, Ok}, kAll(NotPrimary)},
      {"get_ibs_caps", [](EngineHarness& h, DomainId c) { return h.Op(c, legacy::kOpGetIbsCaps); },
       {NotPrimary, NotSupported, NotSupported, NotSupported, NotSupported}, kAll(NotPrimary)},
      {"ibs_counter", [](EngineHarness& h, DomainId c) { return WithArg(h, c, legacy::kOpIbsCounter, legacy::IbsCounter{}); },
       {NotPrimary, NotSupported, NotSupported, NotSupported, NotSupported}, kAll(NotPrimary)},
      {"status", [](EngineHarness& h, DomainId c) { h.Status(c); return h.last_status_error; },
       kAll(Ok), kAll(Ok)},
  };
  return cases;
}

// The parts of the status that a refused op must leave unchanged.
std::string Snapshot(EngineHarness& h) {
  Status status = h.Status(0);
  std::string out = "state=" + std::to_string(status.state) + " primary=" +
                    std::to_string(status.primary) + " active=" +
                    std::to_string(status.num_active) + " activated=" +
                    std::to_string(status.num_activated) + " passive=" +
                    std::to_string(status.num_passive) + " counters=" +
                    std::to_string(status.enabled_counters) + " bt=" +
                    std::to_string(status.backtrace_depth);
  for (uint32_t i = 0; i < status.num_domains; ++i) {
    const DomainStatus& d = status.domains[i];
    out += " [" + std::to_string(d.domain) + " role=" + std::to_string(d.role) + " act=" +
           std::to_string(d.activated) + " fmt=" + std::to_string(d.ring_format) + " shared=" +
           std::to_string(d.shared) + "]";
  }
  return out;
}

}  // namespace

TEST_CASE("every op in every state, for the primary and for a guest", "[ops]") {
  for (const OpCase& op : Cases()) {
    for (int state = 0; state < kStates; ++state) {
      for (DomainId caller : {DomainId{0}, DomainId{1}}) {
        INFO(op.name << " by dom" << caller << " in " << kStateNames[state]);
        auto h = InState(static_cast<State>(state));
        const std::string before = Snapshot(*h);
        const ErrorCode expected = caller == 0 ? op.primary[state] : op.guest[state];
        const ErrorCode got = op.run(*h, caller);
        CHECK(ErrorName(got) == std::string(ErrorName(expected)));
        if (got != ErrorCode::kOk) CHECK(Snapshot(*h) == before);
        CHECK(h->platform.violations().empty());
      }
    }
  }
}

TEST_CASE("start waits until every active domain has called enable_virq", "[ops]") {
  auto h = InState(kR);
  REQUIRE(h->Op(0, legacy::kOpEnableVirq) == ErrorCode::kOk);
  CHECK(h->Op(0, legacy::kOpStart) == ErrorCode::kNotActivated);
  // The status op says exactly who is missing.
  Status status = h->Status(0);
  CHECK(status.num_active == 2);
  CHECK(status.num_activated == 1);
  const DomainStatus* guest = h->Find(status, 1);
  REQUIRE(guest != nullptr);
  CHECK(guest->role == static_cast<uint32_t>(DomainRole::kActive));
  CHECK(guest->activated == 0);
  CHECK(h->Find(status, 0)->activated == 1);

  REQUIRE(h->Init(1) == ErrorCode::kOk);
  REQUIRE(h->GetBufferV2(1) == ErrorCode::kOk);
  REQUIRE(h->Op(1, legacy::kOpEnableVirq) == ErrorCode::kOk);
  CHECK(h->Op(0, legacy::kOpStart) == ErrorCode::kOk);
  CHECK(h->platform.pmi_routed(0));
  CHECK(h->platform.pmi_routed(1));
}

TEST_CASE("a guest learns the PMU from init but is never primary", "[ops]") {
  EngineHarness h;
  legacy::Init init{};
  REQUIRE(h.Init(1, &init) == ErrorCode::kOk);
  CHECK(init.is_primary == 0);
  CHECK(init.num_events == 7);
  CHECK(std::string(init.cpu_type) == "i386/arch_perfmon");
  CHECK(h.engine->primary() == kDomainInvalid);
  REQUIRE(h.Init(0, &init) == ErrorCode::kOk);
  CHECK(init.is_primary == 1);
  CHECK(h.engine->primary() == 0);
  // A guest's status shows only itself.
  REQUIRE(h.GetBufferV2(1) == ErrorCode::kOk);
  Status status = h.Status(1);
  CHECK(status.num_domains == 1);
  CHECK(status.domains[0].domain == 1);
  CHECK(status.total_samples == 0);
}

TEST_CASE("status gives the engine's clock, and says whether the host names the guests' tasks", "[ops]") {
  EngineHarness h;
  const hvpmu::Status first = h.Status(0);
  REQUIRE(h.last_status_error == ErrorCode::kOk);
  const hvpmu::Status second = h.Status(1);  // any caller
  REQUIRE(h.last_status_error == ErrorCode::kOk);
  // The samples' clock, read when the op ran: it moves on.
  CHECK(first.now_ns != 0);
  CHECK(second.now_ns > first.now_ns);
  // A host like Xen (the fake's default) knows vCPUs, not tasks.
  CHECK((first.flags & hvpmu::kStatusNamesTasks) == 0);
}

TEST_CASE("status tells every caller what the counters count, once they are set up", "[ops]") {
  auto h = InState(kC);
  // Reserved and programmed, not set up: nothing to tell yet.
  CHECK(h->Status(1).counters[0].enabled == 0);
  REQUIRE(h->Op(0, legacy::kOpSetupEvents) == ErrorCode::kOk);
  for (DomainId caller : {DomainId{0}, DomainId{1}}) {
    const Status status = h->Status(caller);
    uint32_t enabled = 0;
    for (uint32_t i = 0; i < kMaxCounters; ++i) {
      if (status.counters[i].enabled == 0) continue;
      ++enabled;
      CHECK((status.enabled_counters & (1u << i)) != 0);
      CHECK(status.counters[i].event == 0x3C);
      CHECK(status.counters[i].count == 100000);
      CHECK(status.counters[i].kernel == 1);
      CHECK(status.counters[i].user == 1);
    }
    CHECK(enabled == 1);
  }
}

TEST_CASE("quirk fixed: init while profiling is refused, counters keep running", "[ops][quirks]") {
  auto h = InState(kP);
  CHECK(h->Init(0) == ErrorCode::kProfiling);
  CHECK(h->engine->state() == EngineState::kProfiling);
  CHECK(h->platform.GetMsr(0, 0x38F) != 0);  // GLOBAL_CTRL still enabled
}

TEST_CASE("quirk fixed: reset_active_list releases listed-but-never-ready domains", "[ops][quirks]") {
  EngineHarness h;
  REQUIRE(h.Init(0) == ErrorCode::kOk);
  REQUIRE(h.SetActive(1) == ErrorCode::kOk);
  REQUIRE(h.SetActive(2) == ErrorCode::kOk);
  CHECK(h.platform.references(1) == 1);
  CHECK(h.platform.references(2) == 1);
  REQUIRE(h.Op(0, legacy::kOpResetActiveList) == ErrorCode::kOk);
  CHECK(h.platform.references(1) == 0);
  CHECK(h.platform.references(2) == 0);
  CHECK(h.Status(0).num_domains == 0);
  // Passive entries too, and their rings.
  REQUIRE(h.SetPassiveV2(3) == ErrorCode::kOk);
  CHECK(h.platform.references(3) == 1);
  CHECK(h.platform.live_regions() == 1);
  REQUIRE(h.Op(0, legacy::kOpResetPassiveList) == ErrorCode::kOk);
  CHECK(h.platform.references(3) == 0);
  CHECK(h.platform.live_regions() == 0);
  CHECK(h.platform.violations().empty());
}

TEST_CASE("quirk fixed: a second enable_virq is refused and does not count twice", "[ops][quirks]") {
  auto h = InState(kR);
  REQUIRE(h->Op(0, legacy::kOpEnableVirq) == ErrorCode::kOk);
  CHECK(h->Op(0, legacy::kOpEnableVirq) == ErrorCode::kAlreadyActivated);
  REQUIRE(h->Op(0, legacy::kOpResetActiveList) == ErrorCode::kOk);
  REQUIRE(h->Op(0, legacy::kOpReleaseCounters) == ErrorCode::kOk);
  // With only dom0 listed and activated, start works: the count was not doubled.
  REQUIRE(h->SetActive(0) == ErrorCode::kOk);
  REQUIRE(h->Op(0, legacy::kOpReserveCounters) == ErrorCode::kOk);
  REQUIRE(h->Counter() == ErrorCode::kOk);
  REQUIRE(h->Op(0, legacy::kOpSetupEvents) == ErrorCode::kOk);
  REQUIRE(h->GetBufferV2(0) == ErrorCode::kOk);
  REQUIRE(h->Op(0, legacy::kOpEnableVirq) == ErrorCode::kOk);
  CHECK(h->Op(0, legacy::kOpEnableVirq) == ErrorCode::kAlreadyActivated);
  CHECK(h->Op(0, legacy::kOpStart) == ErrorCode::kOk);
}

TEST_CASE("quirk fixed: PMU ownership is held while any domain has buffers", "[ops][quirks]") {
  EngineHarness h;
  REQUIRE(h.Init(0) == ErrorCode::kOk);
  CHECK_FALSE(h.platform.pmu_claimed());
  REQUIRE(h.GetBufferV2(0) == ErrorCode::kOk);
  REQUIRE(h.GetBufferV2(1) == ErrorCode::kOk);
  CHECK(h.platform.pmu_claimed());
  REQUIRE(h.Op(1, legacy::kOpDisableVirq) == ErrorCode::kOk);
  CHECK(h.platform.pmu_claimed());  // Xen would release it for everybody here
  REQUIRE(h.Op(0, legacy::kOpDisableVirq) == ErrorCode::kOk);
  CHECK_FALSE(h.platform.pmu_claimed());
  CHECK(h.platform.live_regions() == 0);

  // A failure after the claim gives it back.
  h.platform.SetAllocationFails(true);
  CHECK(h.GetBufferV2(1) == ErrorCode::kNoMemory);
  CHECK_FALSE(h.platform.pmu_claimed());
  h.platform.SetAllocationFails(false);
  h.platform.SetPmuTakenByOther(true);
  CHECK(h.GetBufferV2(1) == ErrorCode::kBusy);
  CHECK(h.platform.violations().empty());
}

TEST_CASE("stop restores PMI routing, drains consumers, and does not wait", "[ops][quirks]") {
  auto h = InState(kP);
  h->platform.ClearNotifications();
  REQUIRE(h->Op(0, legacy::kOpStop) == ErrorCode::kOk);
  CHECK_FALSE(h->platform.pmi_routed(0));
  CHECK(h->platform.GetMsr(0, 0x38F) == 0);
  // One flush notification per ring of every activated domain: dom0 (2 vCPU rings and
  // 2 pCPU rings) and dom1 (2 vCPU rings).
  auto notifications = h->platform.notifications();
  CHECK(notifications.size() == 6);
  int to_guest = 0;
  for (const auto& n : notifications) to_guest += n.consumer == 1 && n.owner == 1;
  CHECK(to_guest == 2);
}

TEST_CASE("a full teardown leaves nothing behind", "[ops]") {
  auto h = InState(kP);
  REQUIRE(h->SetPassiveV2(3) == ErrorCode::kBadState);  // only in INITIALIZED
  REQUIRE(h->Op(0, legacy::kOpStop) == ErrorCode::kOk);
  REQUIRE(h->Op(1, legacy::kOpDisableVirq) == ErrorCode::kOk);
  REQUIRE(h->Op(0, legacy::kOpDisableVirq) == ErrorCode::kOk);
  REQUIRE(h->Op(0, legacy::kOpReleaseCounters) == ErrorCode::kOk);
  REQUIRE(h->Op(0, legacy::kOpShutdown) == ErrorCode::kOk);
  CHECK(h->engine->state() == EngineState::kIdle);
  CHECK(h->engine->primary() == kDomainInvalid);
  CHECK(h->platform.live_regions() == 0);
  CHECK_FALSE(h->platform.pmu_claimed());
  for (DomainId d = 0; d < 5; ++d) CHECK(h->platform.references(d) == 0);
  CHECK(h->Status(0).num_domains == 0);
  CHECK(h->platform.violations().empty());
  // And the machine can be profiled again from scratch.
  CHECK(h->Init(0) == ErrorCode::kOk);
}

TEST_CASE("a big host: hundreds of domains listed, status pages through them, the ring pool is shared", "[ops][scale]") {
  EngineHarness h(256);
  REQUIRE(h.Init(0) == ErrorCode::kOk);
  // 300 guests with ids from 1000, listed in an order that is not theirs.
  constexpr DomainId kFirst = 1000;
  constexpr uint32_t kGuests = 300;
  for (uint32_t i = 0; i < kGuests; ++i) h.platform.AddDomain(static_cast<DomainId>(kFirst + i), 4);
  for (uint32_t i = 0; i < kGuests; ++i) {
    const auto id = static_cast<DomainId>(kFirst + (i * 7) % kGuests);  // 7 and 300 are coprime
    REQUIRE(h.SetPassiveV2(id) == ErrorCode::kOk);
  }
  REQUIRE(h.SetActive(0) == ErrorCode::kOk);

  SECTION("status returns 64 a call, in id order, and says how many are left") {
    std::vector<DomainId> seen;
    uint32_t from = 0;
    for (int call = 0; call < 10; ++call) {
      auto status = std::make_unique<Status>();
      std::memset(status.get(), 0, sizeof *status);
      status->struct_size = sizeof(Status);
      status->abi_version = kAbiVersion;
      status->from_domain = from;
      REQUIRE(h.Op(0, kOpStatus, status.get()) == ErrorCode::kOk);
      CHECK(status->num_domains == std::min<uint32_t>(status->total_domains, kStatusMaxDomains));
      // Listed with an id >= from: the guests and dom0 (active, no rings yet), less those seen.
      CHECK(status->total_domains == kGuests + 1 - seen.size());
      for (uint32_t i = 0; i < status->num_domains; ++i) {
        const DomainStatus& entry = status->domains[i];
        seen.push_back(entry.domain);
        if (entry.domain == 0) continue;
        CHECK(entry.role == static_cast<uint32_t>(DomainRole::kPassive));
        CHECK(entry.num_rings == 4);
      }
      if (status->total_domains <= status->num_domains) break;
      from = seen.back() + 1u;
    }
    REQUIRE(seen.size() == kGuests + 1);
    CHECK(seen[0] == 0);
    for (uint32_t i = 0; i < kGuests; ++i) CHECK(seen[i + 1] == kFirst + i);
  }
  SECTION("the vCPU rings of all domains come from one pool: full is NoMemory, and freed rings are reused") {
    // 300 x 4 rings are taken; fill the pool with 128-vCPU guests until it refuses.
    const uint32_t left = kMaxVcpuRings - kGuests * 4;
    DomainId next = 5000;
    for (uint32_t i = 0; i < left / 128; ++i, ++next) {
      h.platform.AddDomain(next, 128);
      REQUIRE(h.SetPassiveV2(next) == ErrorCode::kOk);
    }
    h.platform.AddDomain(next, 128);
    // Fewer than 128 rings are left (left % 128): the next 128-vCPU guest does not fit.
    CHECK(h.SetPassiveV2(next) == ErrorCode::kNoMemory);
    CHECK(h.platform.violations().empty());
    // A refused domain leaves nothing behind, and the pool comes back whole after a reset.
    REQUIRE(h.Op(0, legacy::kOpResetPassiveList) == ErrorCode::kOk);
    for (DomainId d = 5000; d <= next; ++d) CHECK(h.platform.references(d) == 0);
    for (DomainId d = 5000; d < 5000 + kMaxVcpuRings / 128; ++d) {
      if (d > next) h.platform.AddDomain(d, 128);
      REQUIRE(h.SetPassiveV2(d) == ErrorCode::kOk);
    }
    CHECK(h.Status(0).num_passive == kMaxVcpuRings / 128);
  }
}

TEST_CASE("scheduling rings: the primary asks, gets one per pCPU, and they take records only while profiling",
          "[ops][sched]") {
  EngineHarness h(4);
  auto must = [](ErrorCode error) { REQUIRE(error == ErrorCode::kOk); };
  must(h.Init(0));
  BufferV2 buffer{};
  buffer.struct_size = sizeof buffer;
  buffer.abi_version = kAbiVersion;
  buffer.capacity = 64;
  buffer.flags = kBufferSchedRings;
  must(h.Op(0, kOpGetBufferV2, &buffer));
  CHECK((buffer.flags & kBufferSchedRings) != 0);
  CHECK((buffer.flags & kBufferHasPcpuRings) != 0);
  REQUIRE(buffer.nbuf_sched == 4);
  CHECK(buffer.nbuf == buffer.nbuf_vcpu + 4 + 4);  // vCPU rings, pCPU rings, scheduling rings
  auto* base = static_cast<uint8_t*>(h.platform.RegionBase(buffer.region_handle));
  auto header = [&](uint32_t index) {
    return reinterpret_cast<ring::RingHeader*>(base + uint64_t{index} * buffer.ring_bytes);
  };
  const uint32_t first_sched = buffer.nbuf - buffer.nbuf_sched;
  for (uint32_t i = 0; i < buffer.nbuf; ++i) {
    const bool sched = i >= first_sched;
    CHECK(header(i)->version == (sched ? ring::kVersionSched : ring::kVersion));
    CHECK(header(i)->ring_kind == static_cast<uint16_t>(sched ? ring::RingKind::kSched
                                                        : i < buffer.nbuf_vcpu ? ring::RingKind::kVcpu
                                                                               : ring::RingKind::kPcpu));
  }
  CHECK(header(first_sched + 2)->index == 2);

  ring::SchedRecord record{};
  record.type = static_cast<uint8_t>(ring::SchedType::kRunstate);
  record.domain = 1;
  record.new_state = static_cast<uint8_t>(ring::Runstate::kRunning);
  record.old_state = static_cast<uint8_t>(ring::Runstate::kRunnable);
  record.time_ns = 5;
  CHECK_FALSE(h.engine->sched_recording());
  h.engine->RecordSched(2, record);  // not profiling yet: not taken, not lost
  CHECK(header(first_sched + 2)->head == 0);

  must(h.SetActive(0));
  must(h.Op(0, legacy::kOpReserveCounters));
  must(h.Counter());
  must(h.Op(0, legacy::kOpSetupEvents));
  must(h.Op(0, legacy::kOpEnableVirq));
  must(h.Op(0, legacy::kOpStart));
  CHECK(h.engine->sched_recording());
  h.engine->RecordSched(2, record);
  h.engine->RecordSched(9, record);  // no such pCPU: ignored
  CHECK(header(first_sched + 2)->head == 1);
  CHECK(header(first_sched + 2)->sched_written == 1);
  CHECK(header(first_sched + 1)->head == 0);
  record.time_ns = 0;  // stamped with the platform's clock
  h.engine->RecordSched(1, record);
  const auto* written = reinterpret_cast<const ring::SchedRecord*>(reinterpret_cast<uint8_t*>(header(first_sched + 1)) +
                                                                    ring::kHeaderSize);
  CHECK(written->time_ns != 0);
  CHECK(written->pcpu == 1);
  must(h.Op(0, legacy::kOpStop));
  CHECK_FALSE(h.engine->sched_recording());
  h.engine->RecordSched(2, record);
  CHECK(header(first_sched + 2)->head == 1);
  CHECK(h.platform.violations().empty());
}

TEST_CASE("scheduling rings are the primary's: a guest that asks is refused", "[ops][sched][security]") {
  auto h = InState(kN);
  REQUIRE(h->Init(1) == ErrorCode::kOk);
  BufferV2 buffer{};
  buffer.struct_size = sizeof buffer;
  buffer.abi_version = kAbiVersion;
  buffer.capacity = 64;
  buffer.flags = kBufferSchedRings;
  CHECK(h->Op(1, kOpGetBufferV2, &buffer) == ErrorCode::kNotPrimary);
  CHECK(h->platform.live_regions() == 0);
}

TEST_CASE("bad input gets a named error and changes nothing", "[ops][bad-input]") {
  auto h = InState(kN);
  const std::string before = Snapshot(*h);
  SECTION("out-of-range op numbers") {
    for (uint32_t op : {18u, 31u, 0xFFu, 0x104u, 0xFFFFFFFFu}) {
      CHECK(h->Op(0, op) == ErrorCode::kBadOp);
    }
  }
  SECTION("wrong argument sizes") {
    uint8_t big[512] = {};
    for (uint32_t op = 0; op <= legacy::kOpLast; ++op) {
      INFO("op " << op);
      CHECK(h->engine->DoOp(0, op, big, 3) == ErrorCode::kBadArgSize);
    }
    for (uint32_t op : {0x100u, 0x101u, 0x102u, 0x103u}) {
      CHECK(h->engine->DoOp(0, op, big, 8) == ErrorCode::kBadArgSize);
    }
    CHECK(h->engine->DoOp(0, legacy::kOpSetActive, nullptr, 2) == ErrorCode::kBadArgSize);
    // Extensible structs must name their own size and version.
    InitV2 init = InitV2Arg();
    init.struct_size = 100;
    CHECK(h->Op(0, kOpInitV2, &init) == ErrorCode::kBadArgSize);
    init = InitV2Arg();
    init.abi_version = 1;
    CHECK(h->Op(0, kOpInitV2, &init) == ErrorCode::kBadAbiVersion);
    init = InitV2Arg();
    init.reserved[3] = 1;
    CHECK(h->Op(0, kOpInitV2, &init) == ErrorCode::kReservedNotZero);
  }
  SECTION("a domain on both lists") {
    REQUIRE(h->SetActive(1) == ErrorCode::kOk);
    CHECK(h->SetPassiveV2(1) == ErrorCode::kActiveAndPassive);
    REQUIRE(h->SetPassiveV2(3) == ErrorCode::kOk);
    CHECK(h->SetActive(3) == ErrorCode::kActiveAndPassive);
    CHECK(h->SetPassiveV2(0) == ErrorCode::kActiveAndPassive);  // the primary is active
    CHECK(h->Status(0).num_active == 1);
    CHECK(h->Status(0).num_passive == 1);
  }
  SECTION("the same domain twice on a list") {
    REQUIRE(h->SetActive(1) == ErrorCode::kOk);
    CHECK(h->SetActive(1) == ErrorCode::kAlreadyListed);
    REQUIRE(h->SetPassiveV2(3) == ErrorCode::kOk);
    CHECK(h->SetPassiveV2(3) == ErrorCode::kAlreadyListed);
    CHECK(h->platform.references(1) == 1);
    CHECK(h->platform.references(3) == 1);
  }
  SECTION("unknown domains") {
    CHECK(h->SetActive(99) == ErrorCode::kNoSuchDomain);
    CHECK(h->SetActive(kDomainIdle) == ErrorCode::kNoSuchDomain);
    CHECK(h->SetPassiveV2(0x7FF0) == ErrorCode::kNoSuchDomain);
    CHECK(Snapshot(*h) == before);
  }
  SECTION("too many domains") {
    for (DomainId d = 100; d < 100 + kMaxListedDomains; ++d) h->platform.AddDomain(d, 1);
    for (DomainId d = 100; d < 100 + kMaxListedDomains; ++d) REQUIRE(h->SetActive(d) == ErrorCode::kOk);
    CHECK(h->SetActive(1) == ErrorCode::kTooManyDomains);
    CHECK(h->SetPassiveV2(3) == ErrorCode::kTooManyDomains);
    CHECK(h->Status(0).num_active == kMaxListedDomains);
  }
  SECTION("counter index, count, event and unit mask out of range") {
    REQUIRE(h->SetActive(0) == ErrorCode::kOk);
    REQUIRE(h->Op(0, legacy::kOpReserveCounters) == ErrorCode::kOk);
    CHECK(h->Counter(7) == ErrorCode::kBadCounter);
    CHECK(h->Counter(1000) == ErrorCode::kBadCounter);
    CHECK(h->Counter(0, 0) == ErrorCode::kCountTooSmall);
    CHECK(h->Counter(0, 1ULL << 60) == ErrorCode::kCountTooLarge);
    CHECK(h->Counter(0, 100000, 0x12345) == ErrorCode::kUnknownEvent);
    CHECK(h->Counter(0, 100000, 0x2E, 0x1FF) == ErrorCode::kBadUnitMask);
    CHECK(h->Op(0, legacy::kOpSetupEvents) == ErrorCode::kNoCounters);
    CHECK(h->engine->state() == EngineState::kCountersReserved);
  }
  SECTION("backtrace depth") {
    CHECK(WithArg(*h, 0, legacy::kOpSetBacktrace, legacy::BacktraceDepthArg{65}) ==
          ErrorCode::kBadBacktraceDepth);
    CHECK(Snapshot(*h) == before);
  }
  SECTION("buffer sizes") {
    CHECK(h->GetBufferLegacy(0, 1) == ErrorCode::kBadBufferSize);
    CHECK(h->GetBufferLegacy(0, -5) == ErrorCode::kBadBufferSize);
    CHECK(h->GetBufferV2(0, ring::kMaxCapacity + 1) == ErrorCode::kBadBufferSize);
    CHECK(h->platform.live_regions() == 0);
  }
  CHECK(h->platform.violations().empty());
}

TEST_CASE("buffers: effective sizes are reported, legacy sizing is Xen's", "[ops]") {
  EngineHarness h;
  REQUIRE(h.Init(0) == ErrorCode::kOk);
  BufferV2 buffer{};
  REQUIRE(h.GetBufferV2(0, 1000, &buffer) == ErrorCode::kOk);
  CHECK(buffer.capacity == 1024);  // rounded up to a power of two
  CHECK(buffer.watermark == 512);
  CHECK(buffer.nbuf_vcpu == 2);
  CHECK(buffer.nbuf == 4);  // the primary also gets one ring per physical CPU
  CHECK(buffer.flags == kBufferHasPcpuRings);
  CHECK(buffer.ring_bytes == ring::RingBytes(1024));
  CHECK(buffer.region_bytes == 4 * ring::RingBytes(1024));

  legacy::GetBuffer old{};
  REQUIRE(h.GetBufferLegacy(3 - 2, 100000, &old) == ErrorCode::kOk);  // dom1, 2 vCPUs
  const auto layout = legacy::ComputeLegacyBufferLayout(2, 100000);
  CHECK(old.nbuf == 2);
  CHECK(old.bufsize == layout.bufsize);
  auto* base = static_cast<uint8_t*>(h.platform.RegionBase(old.buf_gmaddr));
  REQUIRE(base != nullptr);
  auto* second = reinterpret_cast<legacy::XenoprofBuf*>(base + old.bufsize);
  CHECK(second->event_size == static_cast<uint32_t>(layout.max_samples));
  CHECK(second->vcpu_id == 1);
}
