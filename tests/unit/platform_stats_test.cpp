// What the platform says of itself: its account of its sampling (context/platform_stats.h) as
// session.json keeps it, which reads back as written, is refused by name without a required
// member and reads counts added later as 0 in older sessions; and its domain list
// (context/domains.h).
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/context/domains.h"
#include "hvprof/context/platform_stats.h"
#include "hvprof/store/session.h"

namespace {

using hvprof::context::PlatformStats;

PlatformStats Sample() {
  PlatformStats s;
  s.platform = "linux";
  s.source = "hardware";
  s.cpu_type = "i386/arch_perfmon";
  s.nominal_mhz = 2893.5;
  s.mhz_source = "tsc";
  s.max_sample_rate = 12500;
  s.max_sample_rate_at_setup = 100000;
  s.cpu_time_max_percent = 25;
  s.profiling_ns = 3'000'000'000;
  s.counters.push_back({.counter = 1, .event = 0x2e, .unit_mask = 0x41, .count = 6000, .perf_event = "raw",
                        .perf_config = "0x412e", .period = 6000, .period_unit = "events", .requested_hz_per_cpu = 250.5});
  for (uint32_t cpu = 0; cpu < 2; ++cpu) {
    hvprof::context::CpuRate& c = s.cpus.emplace_back();
    c.cpu = cpu;
    c.samples = 700 + cpu;
    c.requested_hz = 250.5;
    c.achieved_hz = 233.25;
    c.throttles = 3;
    c.unthrottles = 2;
    c.lost_records = 1;
    c.lost = 9;
    c.lost_samples = 4;
    c.throttled_ns = 5'000'000;
    c.idle_throttled_ns = 6'000'000;
    c.throttled = 17;
    c.counters.push_back({.counter = 1, .samples = 700 + cpu, .requested_hz = 250.5, .achieved_hz = 233.25,
                          .time_enabled_ns = 3'000'000'000, .time_running_ns = 2'500'000'000});
  }
  s.totals = {.samples = 1401, .throttles = 6, .lost = 18, .lost_samples = 8, .throttled = 34,
              .unknown_sample_ids = 1, .samples_without_engine = 2, .sched_samples = 3, .sched_undecodable = 4,
              .malformed_records = 5, .unknown_records = 6, .corrupt_ring_reads = 7};
  s.routing = {.host_user = 10, .host_kernel = 11, .idle = 12, .guest_kernel = 13, .guest_user = 14, .unmapped_guest = 15};
  s.processes = {.entries = 20, .mappings = 21, .discovered_in_samples = 22, .unreadable_images = 23,
                 .context_events = 24, .context_dropped = 25};
  s.throttled = true;
  s.notes = {"perf throttled CPU 1"};
  return s;
}

hvprof::store::SessionMetadata WithStats(const PlatformStats& stats) {
  hvprof::store::SessionMetadata m;
  m.platform = "linux";
  m.machine = "host";
  m.platform_stats = stats;
  return m;
}

}  // namespace

TEST_CASE("the platform's statistics read back from session.json as they were written", "[store][platform-stats]") {
  const PlatformStats written = Sample();
  const auto read = hvprof::store::ParseMetadata(hvprof::store::SerializeMetadata(WithStats(written)), "session.json");
  INFO((read ? std::string() : read.error().message()));
  REQUIRE(read);
  REQUIRE(read.value().platform_stats);
  // Every member, compared through the one writer: a member the reader dropped or misread
  // would write differently.
  CHECK(hvprof::context::ToJson(*read.value().platform_stats) == hvprof::context::ToJson(written));
  const PlatformStats& back = *read.value().platform_stats;
  CHECK(back.cpus.size() == 2);
  CHECK(back.cpus[1].samples == 701);
  CHECK(back.cpus[0].idle_throttled_ns == 6'000'000);
  CHECK(back.totals.corrupt_ring_reads == 7);
  CHECK(back.Lost() == 26);
  CHECK(back.nominal_mhz == 2893.5);
  // A session without platform stats (the sim, Xen) has none.
  hvprof::store::SessionMetadata none = WithStats(written);
  none.platform_stats.reset();
  const auto without = hvprof::store::ParseMetadata(hvprof::store::SerializeMetadata(none), "session.json");
  REQUIRE(without);
  CHECK_FALSE(without.value().platform_stats);
}

TEST_CASE("platform statistics without a required member are left out by name, and later counts read as 0", "[store][platform-stats]") {
  const std::string text = hvprof::store::SerializeMetadata(WithStats(Sample()));
  const nlohmann::json whole = nlohmann::json::parse(text);
  for (const char* pointer : {"/platform_stats/source", "/platform_stats/cpus", "/platform_stats/totals",
                              "/platform_stats/cpus/1/achieved_hz", "/platform_stats/cpus/0/lost",
                              "/platform_stats/totals/lost_samples", "/platform_stats/nominal_mhz"}) {
    nlohmann::json spoiled = whole;
    const nlohmann::json::json_pointer where(pointer);
    spoiled.at(where.parent_pointer()).erase(where.back());
    // The session still reads: the statistics are left out, and a note says which member lacked.
    const auto read = hvprof::store::ParseMetadata(spoiled.dump(), "session.json");
    INFO(pointer);
    REQUIRE(read);
    CHECK_FALSE(read.value().platform_stats);
    // "/platform_stats/cpus/1/achieved_hz" is named "platform_stats.cpus[1].achieved_hz".
    std::string named = std::string(pointer + 1);
    for (size_t at = named.find('/'); at != std::string::npos; at = named.find('/')) named[at] = '.';
    for (const char* index : {".0", ".1"}) {
      if (const size_t at = named.find(index); at != std::string::npos) named.replace(at, 2, fmt::format("[{}]", index[1]));
    }
    REQUIRE_FALSE(read.value().notes.empty());
    const std::string& note = read.value().notes.back();
    INFO(note);
    CHECK(note.find("the platform's account of its sampling is left out") == 0);
    CHECK(note.find(named + ": required field is missing") != std::string::npos);
  }
  // A wrong type is refused too, not read as 0.
  nlohmann::json wrong = whole;
  wrong["platform_stats"]["totals"]["lost"] = "9";
  const auto typed = hvprof::store::ParseMetadata(wrong.dump(), "session.json");
  REQUIRE(typed);
  CHECK_FALSE(typed.value().platform_stats);
  // What sessions from before the later counts lack reads as 0 (or -1 for a limit not read).
  nlohmann::json old = whole;
  for (const char* key : {"routing", "processes", "max_sample_rate_at_setup", "mhz_source"}) {
    old["platform_stats"].erase(key);
  }
  for (nlohmann::json& cpu : old["platform_stats"]["cpus"]) {
    cpu.erase("idle_throttled_ns");
    cpu.erase("throttled");
    cpu.erase("counters");
  }
  old["platform_stats"]["totals"].erase("corrupt_ring_reads");
  old["platform_stats"]["totals"].erase("throttled");
  const auto read = hvprof::store::ParseMetadata(old.dump(), "session.json");
  INFO((read ? std::string() : read.error().message()));
  REQUIRE(read);
  const PlatformStats& stats = *read.value().platform_stats;
  CHECK(stats.routing.host_user == 0);
  CHECK(stats.processes.entries == 0);
  CHECK(stats.max_sample_rate_at_setup == -1);
  CHECK(stats.cpus[0].idle_throttled_ns == 0);
  CHECK(stats.cpus[0].counters.empty());
  CHECK(stats.totals.corrupt_ring_reads == 0);
  CHECK(stats.cpus[1].throttled == 0);
  CHECK(stats.totals.throttled == 0);
  CHECK(stats.totals.lost == 18);
}

TEST_CASE("the platform's domain list reads back as written, and a domain without its id, name or vCPUs is refused by name",
          "[store][platform-stats]") {
  const std::vector<hvprof::context::DomainInfo> written = {
      {.id = 0, .name = "Domain-0", .type = "pv", .vcpus = 2, .kernel = "/boot/vmlinux"},
      {.id = 7, .name = "web", .type = "hvm", .vcpus = 4, .kernel = ""}};
  auto node = [](const nlohmann::json& json) {
    return hvprof::json::Node::Root(json, "hvprof-hv's domain list", hvprof::ErrorKind::kProtocol);
  };
  const nlohmann::json json = hvprof::context::ToJson(written);
  const auto read = hvprof::context::ParseDomainList(node(json));
  REQUIRE(read);
  REQUIRE(read.value().size() == 2);
  CHECK(read.value()[1].id == 7);
  CHECK(read.value()[1].name == "web");
  CHECK(read.value()[1].vcpus == 4);
  CHECK(read.value()[0].kernel == "/boot/vmlinux");
  CHECK(hvprof::context::ToJson(read.value()) == json);
  for (const char* key : {"id", "name", "vcpus"}) {
    nlohmann::json spoiled = json;
    spoiled[1].erase(key);
    const auto refused = hvprof::context::ParseDomainList(node(spoiled));
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message() == fmt::format("hvprof-hv's domain list: [1].{}: required field is missing", key));
  }
  nlohmann::json too_big = json;
  too_big[1]["id"] = 70000;
  CHECK_FALSE(hvprof::context::ParseDomainList(node(too_big)));
  // Xen's list has no kernels: they read as empty.
  nlohmann::json no_kernel = json;
  no_kernel[0].erase("kernel");
  no_kernel[0].erase("type");
  const auto bare = hvprof::context::ParseDomainList(node(no_kernel));
  REQUIRE(bare);
  CHECK(bare.value()[0].kernel.empty());
  CHECK(bare.value()[0].type.empty());
}
