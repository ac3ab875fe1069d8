// hvprofd's status record: what each kind of agent writes reads back the same, and a record
// with a required member missing or of the wrong type is refused by name, not read as 0.
#include <string>
#include <tuple>

#include <catch2/catch.hpp>

#include "hvprof/agent/agent_status.h"

namespace {

using hvprof::agent::AgentRole;
using hvprof::agent::AgentStatus;
using hvprof::agent::DomainRingsStatus;
using hvprof::agent::Losses;
using hvprof::agent::ParseAgentStatus;
using hvprof::agent::ToJson;
namespace sample_mode = hvprof::sample_mode;

AgentStatus Common(AgentRole role) {
  AgentStatus s;
  s.role = role;
  s.profiling = true;
  s.platform = "sim";
  s.machine = "two-guests";
  s.state = "profiling";
  s.cpu_type = "i386/arch_perfmon";
  s.cpus = 4;
  s.session = "/var/lib/hvprof/samples/current";
  s.samples_stored = 123456789012ull;
  s.store.failed = 7;
  s.store.failed_chunks = 2;
  s.store.error = "No space left on device";
  s.events.push_back({.counter = 1, .name = "LLC_MISSES", .count = 6000, .unit_mask = 0x41, .kernel = false, .user = true});
  s.ring_capacity = 16384;
  s.watermark = 12288;
  s.poll_interval_ms = 37;
  DomainRingsStatus d;
  d.id = 3;
  d.label = "dom3 (web)";
  d.role = "active";
  d.activated = false;
  d.rings = 2;
  d.capacity = 16384;
  d.max_fill = 9000;
  d.samples[sample_mode::kUser] = 11;
  d.samples[sample_mode::kKernel] = 22;
  d.samples[sample_mode::kHypervisor] = 33;
  d.lost = Losses{.ring_full = 4, .corrupt_index = 5, .no_ring = 6, .unprofiled_domain = std::nullopt};
  s.domains.push_back(d);
  return s;
}

void CheckSame(const AgentStatus& a, const AgentStatus& b) {
  CHECK(a.role == b.role);
  CHECK(a.profiling == b.profiling);
  CHECK(a.platform == b.platform);
  CHECK(a.machine == b.machine);
  CHECK(a.state == b.state);
  CHECK(a.cpu_type == b.cpu_type);
  CHECK(a.cpus == b.cpus);
  CHECK(a.session == b.session);
  CHECK(a.samples_stored == b.samples_stored);
  CHECK(a.store.failed == b.store.failed);
  CHECK(a.store.failed_chunks == b.store.failed_chunks);
  CHECK(a.store.error == b.store.error);
  REQUIRE(a.events.size() == b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    CHECK(a.events[i].counter == b.events[i].counter);
    CHECK(a.events[i].name == b.events[i].name);
    CHECK(a.events[i].count == b.events[i].count);
    CHECK(a.events[i].unit_mask == b.events[i].unit_mask);
    CHECK(a.events[i].kernel == b.events[i].kernel);
    CHECK(a.events[i].user == b.events[i].user);
  }
  CHECK(a.ring_capacity == b.ring_capacity);
  CHECK(a.watermark == b.watermark);
  CHECK(a.poll_interval_ms == b.poll_interval_ms);
  REQUIRE(a.domains.size() == b.domains.size());
  for (size_t i = 0; i < a.domains.size(); ++i) {
    const DomainRingsStatus& x = a.domains[i];
    const DomainRingsStatus& y = b.domains[i];
    CHECK(x.id == y.id);
    CHECK(x.label == y.label);
    CHECK(x.role == y.role);
    CHECK(x.activated == y.activated);
    CHECK(x.rings == y.rings);
    CHECK(x.capacity == y.capacity);
    CHECK(x.max_fill == y.max_fill);
    CHECK(x.samples == y.samples);
    CHECK(x.lost.ring_full == y.lost.ring_full);
    CHECK(x.lost.corrupt_index == y.lost.corrupt_index);
    CHECK(x.lost.no_ring == y.lost.no_ring);
    CHECK(x.lost.unprofiled_domain == y.lost.unprofiled_domain);
  }
  CHECK(a.domain == b.domain);
  CHECK(a.label == b.label);
  CHECK(a.joined == b.joined);
  CHECK(a.primary == b.primary);
  CHECK(a.lost.has_value() == b.lost.has_value());
  if (a.lost && b.lost) {
    CHECK(a.lost->ring_full == b.lost->ring_full);
    CHECK(a.lost->corrupt_index == b.lost->corrupt_index);
    CHECK(a.lost->no_ring == b.lost->no_ring);
    CHECK(a.lost->unprofiled_domain == b.lost->unprofiled_domain);
  }
  CHECK(a.idle_samples == b.idle_samples);
  CHECK(a.total_samples == b.total_samples);
  CHECK(a.backtrace_depth == b.backtrace_depth);
  CHECK(a.note == b.note);
  CHECK(a.sched.has_value() == b.sched.has_value());
  if (a.sched && b.sched) {
    CHECK(a.sched->source == b.sched->source);
    CHECK(a.sched->records == b.sched->records);
    CHECK(a.sched->lost.ring_full == b.sched->lost.ring_full);
    CHECK(a.sched->lost.unknown_type == b.sched->lost.unknown_type);
    CHECK(a.sched->notes == b.sched->notes);
  }
  CHECK(a.sim.has_value() == b.sim.has_value());
  if (a.sim && b.sim) {
    CHECK(a.sim->time_ns == b.sim->time_ns);
    CHECK(a.sim->pmis == b.sim->pmis);
    CHECK(a.sim->halted == b.sim->halted);
  }
  CHECK(a.continuous.has_value() == b.continuous.has_value());
  if (a.continuous && b.continuous) {
    const hvprof::agent::ContinuousStatus &x = *a.continuous, &y = *b.continuous;
    CHECK(std::tie(x.window_ns, x.index, x.start_ns, x.clock, x.windows, x.bytes, x.other_bytes, x.keep_bytes,
                   x.keep_age_ns, x.removed, x.thinned, x.last_problem) ==
          std::tie(y.window_ns, y.index, y.start_ns, y.clock, y.windows, y.bytes, y.other_bytes, y.keep_bytes,
                   y.keep_age_ns, y.removed, y.thinned, y.last_problem));
  }
}

AgentStatus RoundTrip(const AgentStatus& s) {
  // As the control channel carries it: text, then parsed.
  const auto parsed = ParseAgentStatus(nlohmann::json::parse(ToJson(s).dump()));
  INFO((parsed ? std::string() : parsed.error().message()));
  REQUIRE(parsed);
  return parsed.value();
}

}  // namespace

TEST_CASE("each agent's status reads back as it was written", "[agent][status]") {
  SECTION("dom0 with the engine: every loss, the idle loop, scheduling and the sim's clock") {
    AgentStatus s = Common(AgentRole::kDom0);
    s.lost = Losses{.ring_full = 1, .corrupt_index = 2, .no_ring = 3, .unprofiled_domain = 4};
    s.idle_samples = 99;
    s.total_samples = 1000;
    s.backtrace_depth = 16;
    hvprof::agent::SchedStatus& sched = s.sched.emplace();
    sched.source = "engine";
    sched.records = 5;
    sched.lost.ring_full = 8;
    sched.lost.unknown_type = 9;
    sched.notes = {"first", "second"};
    s.sim = hvprof::agent::SimClockStatus{.time_ns = 2'000'000'000, .pmis = 77, .halted = true};
    s.continuous = hvprof::agent::ContinuousStatus{.window_ns = 60'000'000'000, .index = 42, .start_ns = 17,
                                                   .clock = "sim", .windows = 41, .bytes = 1 << 30,
                                                   .other_bytes = 5, .keep_bytes = uint64_t{2} << 30,
                                                   .keep_age_ns = 6, .removed = 3, .thinned = 7,
                                                   .last_problem = "the disk is full"};
    CheckSame(RoundTrip(s), s);
  }
  SECTION("dom0 on Xen's legacy interface: full rings only, a note, no engine state") {
    AgentStatus s = Common(AgentRole::kDom0);
    s.store.error.reset();
    s.domains[0].activated.reset();  // dom0 cannot tell whether a guest joined
    s.domains[0].lost = Losses{};
    s.domains[0].lost.ring_full = 12;
    s.lost = s.domains[0].lost;
    s.backtrace_depth = 0;
    s.note = "Xen reports no state or losses of its own";
    const AgentStatus back = RoundTrip(s);
    CheckSame(back, s);
    CHECK_FALSE(back.domains[0].lost.corrupt_index);
    CHECK_FALSE(back.idle_samples);
  }
  SECTION("an active guest: its own domain, whether it joined, the primary") {
    AgentStatus s = Common(AgentRole::kGuest);
    s.domain = 3;
    s.label = "dom3 (web)";
    s.joined = true;
    s.primary = 0;
    const AgentStatus back = RoundTrip(s);
    CheckSame(back, s);
    // A guest's record carries nothing of dom0's.
    CHECK_FALSE(ToJson(s).contains("lost"));
    CHECK_FALSE(back.lost);
  }
}

TEST_CASE("a status record missing a member, or with one of the wrong type, is refused by name", "[agent][status]") {
  AgentStatus dom0 = Common(AgentRole::kDom0);
  dom0.lost = Losses{};
  AgentStatus guest = Common(AgentRole::kGuest);
  struct Case {
    const AgentStatus* status;
    std::string pointer;  // a JSON pointer to spoil
    bool remove;          // else: replace with a string
    std::string field;    // as the message names it
  };
  const Case cases[] = {
      {&dom0, "/cpus", true, "cpus"},
      {&dom0, "/role", true, "role"},
      {&dom0, "/samples_stored", false, "samples_stored"},
      {&dom0, "/lost", true, "lost"},
      {&dom0, "/lost/ring_full", true, "lost.ring_full"},
      {&dom0, "/buffers/poll_interval_ms", true, "buffers.poll_interval_ms"},
      {&dom0, "/store/failed", false, "store.failed"},
      {&dom0, "/events/0/count", true, "events[0].count"},
      {&dom0, "/domains/0/samples/hypervisor", true, "domains[0].samples.hypervisor"},
      {&dom0, "/domains/0/lost/no_ring", false, "domains[0].lost.no_ring"},
      {&dom0, "/domains/0/activated", false, "domains[0].activated"},
      {&guest, "/joined", true, "joined"},
      {&guest, "/domain", false, "domain"},
  };
  for (const Case& c : cases) {
    nlohmann::json json = ToJson(*c.status);
    const nlohmann::json::json_pointer pointer(c.pointer);
    if (c.remove) {
      json.at(pointer.parent_pointer()).erase(pointer.back());
    } else {
      json[pointer] = "7";
    }
    const auto parsed = ParseAgentStatus(json);
    INFO(c.pointer);
    REQUIRE_FALSE(parsed);
    const std::string message = parsed.error().message();
    INFO(message);
    CHECK(message.find("hvprofd's status: " + c.field + ":") != std::string::npos);
    CHECK(message.find("restart it") != std::string::npos);
  }
  // An unknown role is not taken for dom0.
  nlohmann::json json = ToJson(dom0);
  json["role"] = "domU";
  const auto parsed = ParseAgentStatus(json);
  REQUIRE_FALSE(parsed);
  CHECK(parsed.error().message().find("expected dom0 or guest") != std::string::npos);
}
