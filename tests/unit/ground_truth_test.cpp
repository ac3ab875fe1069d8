// The simulator's ground truth (context/ground_truth.h) as hvprof-hv sends and writes it: it reads
// back as written, member by member; a required member that is missing is refused by its path,
// and so are rows whose counts do not match the counters and modes that name none; a row's
// callers may be absent.
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "hvprof/base/json_fields.h"
#include "hvprof/context/ground_truth.h"
#include "hvprof/facts/sample.h"

namespace {

using hvprof::ErrorKind;
using hvprof::Mode;
using hvprof::context::GroundTruth;

constexpr const char* kOrigin = "hvprof-hv's ground truth";

GroundTruth Sample() {
  GroundTruth t;
  t.scenario = "three-guests";
  t.seed = 7;
  t.run_seed = 11;
  t.sim_time_ns = 150'000'123;
  t.cpus = 4;
  t.pmu = "intel-arch-v4";
  t.pmis = 48'213;
  t.ticks = 17;
  t.timer = false;
  t.counters.push_back({.index = 0, .enabled = true, .event = 0x3c, .unit_mask = 0x00, .os = true, .usr = true,
                        .fixed = false, .counts = "cycles"});
  t.counters.push_back({.index = 1, .enabled = false, .event = 0xc0, .unit_mask = 0x41, .os = false, .usr = true,
                        .fixed = true, .counts = "instructions"});
  t.rows.push_back({.domain = 0, .vcpu = 1, .mode = Mode::kUser, .image = "/usr/lib/libz.so.1",
                    .function = "inflate", .start = 0x7f12'3456'7890, .image_address = 0x7890,
                    .events = {1'000'000, 2'500'000}, .overflows = {50, 0}, .callers = {}});
  t.rows.push_back({.domain = 0, .vcpu = 0, .mode = Mode::kKernel, .image = "/boot/vmlinux",
                    .function = "vfs_read", .start = 0xffff'ffff'8120'0000, .image_address = 0xffff'ffff'8120'0000,
                    .events = {UINT64_MAX - 1, 3}, .overflows = {(1ULL << 40) + 9, 1},
                    .callers = {"ksys_read", "do_syscall_64"}});
  t.rows.push_back({.domain = hvprof::kIdleDomain, .vcpu = 3, .mode = Mode::kHypervisor, .image = "xen-syms",
                    .function = "mwait_idle", .start = 0xffff'82d0'4020'1000, .image_address = 0xffff'82d0'4020'1000,
                    .events = {900, 0}, .overflows = {4, 0}, .callers = {}});
  t.rows.push_back({.domain = 2, .vcpu = 0, .mode = Mode::kKernel, .image = "/lib/modules/e1000.ko",
                    .function = "e1000_intr [e1000]", .start = 0xffff'ffff'c000'2000, .image_address = 0x2000,
                    .events = {0, 77}, .overflows = {0, 2}, .callers = {"handle_irq"}});
  t.sched.since_ns = 1'000;
  t.sched.now_ns = 150'001'000;
  t.sched.vcpus.push_back({.domain = 0, .vcpu = 0, .running_ns = 90'000'000, .runnable_ns = 5'000'000,
                           .blocked_ns = 55'000'000, .offline_ns = 0, .wakeups = 31, .migrations = 2});
  t.sched.vcpus.push_back({.domain = 2, .vcpu = 1, .running_ns = 10'000'000, .runnable_ns = 20'000'000,
                           .blocked_ns = 100'000'000, .offline_ns = 20'000'000, .wakeups = 8, .migrations = 5});
  t.sched.cpus.push_back({.cpu = 0, .idle_ns = 40'000'000, .busy_ns = 110'000'000});
  t.sched.cpus.push_back({.cpu = 3, .idle_ns = 150'000'000, .busy_ns = 0});
  return t;
}

// `json` as the reply carries it and the file holds it (text), read back.
hvprof::Result<GroundTruth> Read(const nlohmann::json& json) {
  HVPROF_TRY(root, hvprof::json::Node::Parse(json.dump(1), kOrigin, ErrorKind::kProtocol));
  return hvprof::context::ParseGroundTruth(root);
}

// Every member of `back` is `written`'s.
void CheckSame(const GroundTruth& back, const GroundTruth& written) {
  CHECK(back.scenario == written.scenario);
  CHECK(back.seed == written.seed);
  CHECK(back.run_seed == written.run_seed);
  CHECK(back.sim_time_ns == written.sim_time_ns);
  CHECK(back.cpus == written.cpus);
  CHECK(back.pmu == written.pmu);
  CHECK(back.pmis == written.pmis);
  CHECK(back.ticks == written.ticks);
  CHECK(back.timer == written.timer);
  REQUIRE(back.counters.size() == written.counters.size());
  for (size_t i = 0; i < written.counters.size(); ++i) {
    INFO("counters[" << i << "]");
    const hvprof::context::TruthCounter& got = back.counters[i];
    const hvprof::context::TruthCounter& want = written.counters[i];
    CHECK(got.index == want.index);
    CHECK(got.enabled == want.enabled);
    CHECK(got.event == want.event);
    CHECK(got.unit_mask == want.unit_mask);
    CHECK(got.os == want.os);
    CHECK(got.usr == want.usr);
    CHECK(got.fixed == want.fixed);
    CHECK(got.counts == want.counts);
  }
  REQUIRE(back.rows.size() == written.rows.size());
  for (size_t i = 0; i < written.rows.size(); ++i) {
    INFO("rows[" << i << "]");
    const hvprof::context::TruthRow& got = back.rows[i];
    const hvprof::context::TruthRow& want = written.rows[i];
    CHECK(got.domain == want.domain);
    CHECK(got.vcpu == want.vcpu);
    CHECK(got.mode == want.mode);
    CHECK(got.image == want.image);
    CHECK(got.function == want.function);
    CHECK(got.start == want.start);
    CHECK(got.image_address == want.image_address);
    CHECK(got.events == want.events);
    CHECK(got.overflows == want.overflows);
    CHECK(got.callers == want.callers);
  }
  CHECK(back.sched.since_ns == written.sched.since_ns);
  CHECK(back.sched.now_ns == written.sched.now_ns);
  REQUIRE(back.sched.vcpus.size() == written.sched.vcpus.size());
  for (size_t i = 0; i < written.sched.vcpus.size(); ++i) {
    INFO("sched.vcpus[" << i << "]");
    const hvprof::context::TruthVcpu& got = back.sched.vcpus[i];
    const hvprof::context::TruthVcpu& want = written.sched.vcpus[i];
    CHECK(got.domain == want.domain);
    CHECK(got.vcpu == want.vcpu);
    CHECK(got.running_ns == want.running_ns);
    CHECK(got.runnable_ns == want.runnable_ns);
    CHECK(got.blocked_ns == want.blocked_ns);
    CHECK(got.offline_ns == want.offline_ns);
    CHECK(got.wakeups == want.wakeups);
    CHECK(got.migrations == want.migrations);
  }
  REQUIRE(back.sched.cpus.size() == written.sched.cpus.size());
  for (size_t i = 0; i < written.sched.cpus.size(); ++i) {
    INFO("sched.cpus[" << i << "]");
    CHECK(back.sched.cpus[i].cpu == written.sched.cpus[i].cpu);
    CHECK(back.sched.cpus[i].idle_ns == written.sched.cpus[i].idle_ns);
    CHECK(back.sched.cpus[i].busy_ns == written.sched.cpus[i].busy_ns);
  }
}

// The message of a refusal of `json`, which must be refused.
std::string Refusal(const nlohmann::json& json) {
  const auto read = Read(json);
  REQUIRE_FALSE(read.has_value());
  CHECK(read.error().kind() == ErrorKind::kProtocol);
  return read.error().message();
}

}  // namespace

TEST_CASE("the ground truth reads back from its JSON text as it was written, member by member", "[ground-truth]") {
  const GroundTruth written = Sample();
  const nlohmann::json json = hvprof::context::ToJson(written);
  CHECK(json["source"] == "pmu");
  const auto read = Read(json);
  INFO((read ? std::string() : read.error().message()));
  REQUIRE(read.has_value());
  CheckSame(read.value(), written);

  // Sampled by the engine's timer: its one counter, in ns and ticks.
  GroundTruth timed = Sample();
  timed.timer = true;
  const nlohmann::json timed_json = hvprof::context::ToJson(timed);
  CHECK(timed_json["source"] == "timer");
  const auto timed_read = Read(timed_json);
  REQUIRE(timed_read.has_value());
  CHECK(timed_read.value().timer);
}

TEST_CASE("a ground truth without a required member is refused, and the message names the member", "[ground-truth]") {
  const nlohmann::json whole = hvprof::context::ToJson(Sample());
  for (const char* pointer : {"/scenario", "/seed", "/run_seed", "/sim_time_ns", "/cpus", "/pmu", "/pmis", "/ticks",
                              "/source", "/counters", "/rows", "/sched", "/rows/0/mode", "/rows/0/events",
                              "/sched/vcpus/0/running_ns", "/counters/0/event"}) {
    INFO(pointer);
    nlohmann::json spoiled = whole;
    const nlohmann::json::json_pointer where(pointer);
    REQUIRE(spoiled.contains(where));
    spoiled.at(where.parent_pointer()).erase(where.back());
    // "/sched/vcpus/0/running_ns" is named "sched.vcpus[0].running_ns".
    std::string named = std::string(pointer + 1);
    for (size_t at = named.find('/'); at != std::string::npos; at = named.find('/')) named[at] = '.';
    if (const size_t at = named.find(".0"); at != std::string::npos) named.replace(at, 2, "[0]");
    const std::string message = Refusal(spoiled);
    INFO(message);
    CHECK(message == fmt::format("{}: {}: required field is missing", kOrigin, named));
  }
}

TEST_CASE("a ground truth row whose counts are not one per counter is refused", "[ground-truth]") {
  const nlohmann::json whole = hvprof::context::ToJson(Sample());
  REQUIRE(whole["counters"].size() == 2);
  nlohmann::json fewer = whole;
  fewer["rows"][1]["events"].erase(1);
  std::string message = Refusal(fewer);
  INFO(message);
  CHECK(message.find("rows[1]") != std::string::npos);
  CHECK(message.find("events has 1 counts for 2 counters") != std::string::npos);
  nlohmann::json more = whole;
  more["rows"][1]["events"].push_back(5);
  message = Refusal(more);
  INFO(message);
  CHECK(message.find("rows[1]") != std::string::npos);
  CHECK(message.find("events has 3 counts for 2 counters") != std::string::npos);
}

TEST_CASE("a ground truth row whose mode names none is refused", "[ground-truth]") {
  nlohmann::json spoiled = hvprof::context::ToJson(Sample());
  spoiled["rows"][2]["mode"] = "bogus";
  const std::string message = Refusal(spoiled);
  INFO(message);
  CHECK(message.find("rows[2].mode") != std::string::npos);
  CHECK(message.find("\"bogus\"") != std::string::npos);
}

TEST_CASE("a ground truth row without callers reads as one with none", "[ground-truth]") {
  const GroundTruth written = Sample();
  REQUIRE_FALSE(written.rows[1].callers.empty());
  nlohmann::json json = hvprof::context::ToJson(written);
  CHECK_FALSE(json["rows"][0].contains("callers"));  // none are written as none
  json["rows"][1].erase("callers");
  const auto read = Read(json);
  INFO((read ? std::string() : read.error().message()));
  REQUIRE(read.has_value());
  REQUIRE(read.value().rows.size() == written.rows.size());
  CHECK(read.value().rows[0].callers.empty());
  CHECK(read.value().rows[1].callers.empty());
  CHECK(read.value().rows[1].function == written.rows[1].function);
  CHECK(read.value().rows[3].callers == written.rows[3].callers);
}
