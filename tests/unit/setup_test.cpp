// The setup file (daemonrc.json) the daemon reads as root: the same field reader as every other
// file, and the same number checks as the command line.
#include <catch2/catch.hpp>

#include "hvpmu/events.h"
#include "hvprof/setup/setup.h"

using hvprof::setup::CheckNumber;
using hvprof::setup::SetupOptions;

TEST_CASE("setup file: round trip, and bad fields named with what was expected", "[setup][bad-input]") {
  SetupOptions options;
  options.platform = "linux";
  options.active_domains = {"1", "web"};
  options.buffer_size = 4096;
  options.callgraph = 8;
  auto back = SetupOptions::FromJson(options.ToJson().dump(), "daemonrc.json");
  REQUIRE(back.has_value());
  CHECK(back.value().ToJson() == options.ToJson());

  auto error = [](const std::string& text) {
    auto parsed = SetupOptions::FromJson(text, "daemonrc.json");
    REQUIRE_FALSE(parsed.has_value());
    return parsed.error().message();
  };
  CHECK(error(R"({"domain": 70000})") == "daemonrc.json: domain: expected a whole number from 0 to 65535, got 70000");
  CHECK(error(R"({"active_domains": ["1", 2]})") == "daemonrc.json: active_domains[1]: expected a string, got 2");
  CHECK(error(R"({"verbose": "yes"})") == "daemonrc.json: verbose: expected true or false, got the string \"yes\"");
  CHECK(error(R"({"buffer_size": 1000})").find("--buffer-size=1000: samples per ring must be a power of two") == 0);
  CHECK(error("{").find("daemonrc.json: not valid JSON") == 0);
}

TEST_CASE("numeric options: ranges by platform, nearest good values", "[setup][bad-input]") {
  CHECK(CheckNumber("buffer-size", 0, "sim").value() == 0);
  CHECK(CheckNumber("buffer-size", 4096, "linux").value() == 4096);
  CHECK(CheckNumber("buffer-size", 15, "xen").value() == 15);  // Xen's rings take any size
  CHECK(CheckNumber("buffer-size", 3000, "sim").error().message().find("the nearest is 2048") != std::string::npos);
  CHECK(CheckNumber("buffer-size", 3100, "sim").error().message().find("the nearest is 4096") != std::string::npos);
  CHECK(CheckNumber("callgraph", 64, "sim").value() == 64);
  CHECK(CheckNumber("callgraph", 65, "sim").error().message() ==
        "--callgraph=65: call chains can be 0 to 64 frames deep; the nearest is 64");
  CHECK(CheckNumber("poll-interval", -3, "sim").error().message().find("the nearest is 0") != std::string::npos);
}

TEST_CASE("domains by id or name, and `all` for every other guest", "[setup]") {
  using hvprof::setup::DomainInfo;
  using hvprof::setup::ResolveDomains;
  const std::vector<DomainInfo> domains{{0, "dom0", "pv", 2, ""}, {1, "web", "pv", 1, ""}, {2, "db", "hvm", 2, ""},
                                        {5, "build", "pv", 4, ""}};
  auto named = ResolveDomains({"db", "1"}, domains, "passive-domains");
  REQUIRE(named.has_value());
  CHECK(named.value() == std::vector<uint16_t>{2, 1});
  // `all`: every domain but dom0 and those profiled the other way, in the platform's order.
  auto all = ResolveDomains({"all"}, domains, "passive-domains", {0, 5});
  REQUIRE(all.has_value());
  CHECK(all.value() == std::vector<uint16_t>{1, 2});
  auto mixed = ResolveDomains({"all", "1"}, domains, "passive-domains");
  REQUIRE_FALSE(mixed.has_value());
  CHECK(mixed.error().message().find("--passive-domains: 'all' stands alone") == 0);
  auto missing = ResolveDomains({"mail"}, domains, "passive-domains");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message() ==
        "--passive-domains: no domain 'mail' on this host; it has dom0, dom1 (web), dom2 (db), dom5 (build)");
}

TEST_CASE("a sample rate sets the counts of time-like events given without one", "[setup][rate]") {
  using hvprof::setup::ParseEventSpec;
  using hvprof::setup::ResolveEventOptions;
  using hvprof::setup::SampleRate;
  const hvpmu::CpuEventTable* software = hvpmu::FindEventTable("linux/software");
  const hvpmu::CpuEventTable* intel = hvpmu::FindEventTable("i386/arch_perfmon");
  REQUIRE(software != nullptr);
  REQUIRE(intel != nullptr);
  hvpmu::InitV2 pmu{};
  pmu.num_counters = pmu.num_gp_counters = 4;
  pmu.max_count = uint64_t(1) << 47;
  pmu.gp_counter_width = 48;
  const SampleRate rate{4000, 2.6e9, "--rate"};

  // NAME alone parses, with its count to come.
  auto alone = ParseEventSpec("CPU_CLOCK");
  REQUIRE(alone.has_value());
  CHECK(alone.value().count == 0);
  CHECK_FALSE(ParseEventSpec("CPU_CLOCK:0").has_value());

  auto events = ResolveEventOptions({"CPU_CLOCK", "CPU_CLK_UNHALTED", "CPU_CLOCK:100000"}, *software, pmu, rate);
  REQUIRE(events.has_value());
  CHECK(events.value()[0].count == 250000);   // 1e9 ns / 4000
  CHECK(events.value()[1].count == 650000);   // 2.6e9 cycles / 4000
  CHECK(events.value()[2].count == 100000);   // a count given stays
  // The default event takes the rate too.
  auto by_default = ResolveEventOptions({}, *intel, pmu, rate);
  REQUIRE(by_default.has_value());
  CHECK(by_default.value()[0].count == 650000);
  // Without the rate, the default event keeps the table's count, and NAME alone needs one.
  CHECK(ResolveEventOptions({}, *intel, pmu).value()[0].count == intel->default_count);
  auto no_count = ResolveEventOptions({"CPU_CLOCK"}, *software, pmu);
  REQUIRE_FALSE(no_count.has_value());
  CHECK(no_count.error().message() == "--event=CPU_CLOCK: no count; give NAME:COUNT, or a rate with -F (--rate) for CPU_CLOCK");
  // Cycles need the clock; events that are not time cannot take a rate.
  auto no_clock = ResolveEventOptions({"CPU_CLK_UNHALTED"}, *software, pmu, SampleRate{4000, 0, "--rate"});
  REQUIRE_FALSE(no_clock.has_value());
  CHECK(no_clock.error().message().find("does not say its CPUs' clock") != std::string::npos);
  auto not_time = ResolveEventOptions({"LLC_MISSES"}, *intel, pmu, rate);
  REQUIRE_FALSE(not_time.has_value());
  CHECK(not_time.error().message().find("counts events, not time") != std::string::npos);
  // Faster than an event can sample: the fastest it can, and what samples faster.
  const hvpmu::EventDef* cycles = hvpmu::FindEventByName(*software, "CPU_CLK_UNHALTED");
  REQUIRE(cycles != nullptr);
  auto too_fast = ResolveEventOptions({"CPU_CLK_UNHALTED"}, *software, pmu, SampleRate{100000, 2.6e9, "-F"});
  REQUIRE_FALSE(too_fast.has_value());
  CHECK(too_fast.error().message().find(fmt::format("at most {:.0f} times a second", 2.6e9 / static_cast<double>(cycles->min_count))) !=
        std::string::npos);
  CHECK(too_fast.error().message().find("`-e CPU_CLOCK -F 100000` samples by time") != std::string::npos);
  // Its range.
  CHECK(CheckNumber("rate", 1000000, "linux").value() == 1000000);
  CHECK_FALSE(CheckNumber("rate", 1000001, "linux").has_value());
}

TEST_CASE("setup: --sched reaches the agent through the setup file on every platform", "[setup][sched]") {
  for (const char* platform : {"sim", "linux", "xen"}) {
    INFO(platform);
    SetupOptions options;
    options.platform = platform;
    options.sched = true;
    auto read = SetupOptions::FromJson(options.ToJson().dump(), "daemonrc.json");
    REQUIRE(read.has_value());
    CHECK(read.value().sched);
    options.sched = false;
    read = SetupOptions::FromJson(options.ToJson().dump(), "daemonrc.json");
    REQUIRE(read.has_value());
    CHECK_FALSE(read.value().sched);
  }
  // Left out, it is off; anything but a boolean is refused, naming the field.
  auto absent = SetupOptions::FromJson(R"({"platform": "sim"})", "daemonrc.json");
  REQUIRE(absent.has_value());
  CHECK_FALSE(absent.value().sched);
  auto wrong = SetupOptions::FromJson(R"({"platform": "sim", "sched": "yes"})", "daemonrc.json");
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().message().find("sched") != std::string::npos);
}
