// Call stacks end to end: the sim's default scenario (whose functions have known callers)
// profiled with --callgraph, and `hvprof-report --format=folded` checked against the sim's
// exact ground truth, stack by stack.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "host_harness.h"
#include "stacks_support.h"
#include "skip.h"

using hvprof::testing::CommandResult;
using hvprof::testing::DefaultScenario;
using hvprof::testing::Host;
using hvprof::testing::Bucket;
using hvprof::testing::NamedFunctions;
using hvprof::testing::ParseFolded;
using hvprof::testing::PprofTop;
using hvprof::testing::TruthStacks;
using hvprof::testing::ProfileWithChains;
using Json = nlohmann::json;

namespace {

uint32_t FirstCounter(const Host& host) {
  std::ifstream in(host.current() + "/session.json");
  const Json session = Json::parse(in, nullptr, false);
  REQUIRE(session.is_object());
  return session["events"][0]["counter"].get<uint32_t>();
}

void CheckAgainstTruth(uint32_t depth) {
  Host host(DefaultScenario());
  ProfileWithChains(host, depth);
  const hvprof::context::GroundTruth truth = host.GroundTruth(false);
  // Every stack of the truth, the idle loop's included.
  const CommandResult folded = host.Report({"--format=folded", "--include-idle"});
  INFO(folded.err);
  REQUIRE(folded.status == 0);
  const std::set<std::string> named = NamedFunctions(DefaultScenario());
  std::map<std::string, uint64_t> seen, expected;
  for (const auto& [stack, count] : ParseFolded(folded.out)) seen[Bucket(stack, named)] += count;
  for (const auto& [stack, count] : TruthStacks(truth, FirstCounter(host), depth,
                                                {{0, "dom0"}, {1, "dom1 (build-vm)"}, {2, "dom2 (web-vm)"}, {0x7FFF, "idle"}})) {
    expected[Bucket(stack, named)] += count;
  }
  REQUIRE(expected.size() > 10);
  size_t with_callers = 0, compared = 0;
  for (const auto& [stack, count] : expected) {
    if (stack.find(" [") != std::string::npos) continue;  // kernel modules: named otherwise by the report
    INFO(stack);
    ++compared;
    with_callers += std::count(stack.begin(), stack.end(), ';') > 2;
    REQUIRE(seen.count(stack) == 1);
    CHECK(seen.at(stack) == count);
  }
  CHECK(compared > 10);
  if (depth >= 2) CHECK(with_callers >= 2);
  // Nothing is counted twice or invented: the folded total is the session's.
  uint64_t folded_total = 0, truth_total = 0;
  for (const auto& [stack, count] : seen) folded_total += count;
  for (const auto& [stack, count] : expected) truth_total += count;
  CHECK(folded_total == truth_total);
}

}  // namespace

TEST_CASE("folded stacks match the sim's ground truth, stack by stack", "[report][stacks]") {
  SECTION("chains deeper than any in the scenario") { CheckAgainstTruth(8); }
  SECTION("chains cut at one frame") { CheckAgainstTruth(1); }
  SECTION("no chains: one frame per stack") { CheckAgainstTruth(0); }
}

TEST_CASE("folded stacks: roots, filters and bad options", "[report][stacks]") {
  Host host(DefaultScenario());
  ProfileWithChains(host, 8, "100ms");
  const auto by_domain = ParseFolded(host.Report({"--format=folded"}).out);
  const auto by_mode = ParseFolded(host.Report({"--format=folded", "--stack-root=mode"}).out);
  const auto bare = ParseFolded(host.Report({"--format=folded", "--stack-root=none"}).out);
  auto total = [](const std::map<std::string, uint64_t>& stacks) {
    uint64_t sum = 0;
    for (const auto& [stack, count] : stacks) sum += count;
    return sum;
  };
  CHECK(total(by_domain) == total(by_mode));
  CHECK(total(by_domain) == total(bare));
  CHECK(by_mode.count("[kernel];do_syscall_64;ksys_read;vfs_read") == 1);
  CHECK(bare.count("do_syscall_64;ksys_read;vfs_read") == 1);
  const auto dom0_kernel = ParseFolded(host.Report({"--format=folded", "--domain=dom0", "--mode=kernel"}).out);
  REQUIRE(!dom0_kernel.empty());
  for (const auto& [stack, count] : dom0_kernel) CHECK(stack.rfind("dom0;[kernel];", 0) == 0);
  // Written to a file with -o, the same lines.
  const std::string file = host.session_root() + "/../stacks.folded";
  REQUIRE(host.Report({"--format=folded", "-o", file}).status == 0);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(ParseFolded(text.str()) == by_domain);
  for (const std::vector<std::string>& refused :
       {std::vector<std::string>{"--format=folded", "--image=libc*"}, {"--format=folded", "-t", "1"},
        {"--format=folded", "--all-domains"}, {"-c", "--merge=cpu"}}) {
    const CommandResult result = host.Report(refused);
    INFO(refused[1]);
    CHECK(result.status == 2);
    CHECK(result.out.empty());
  }
  // -c --symbol: the call graph focused on vfs_read, its one node counting every stack through it.
  const CommandResult focused = host.Report({"-c", "--symbol=vfs_read", "--format=json"});
  REQUIRE(focused.status == 0);
  const Json graph = Json::parse(focused.out);
  REQUIRE(graph["nodes"].size() == 1);
  CHECK(graph["nodes"][0]["symbol"] == "vfs_read");
  uint64_t through = 0;
  for (const auto& [stack, count] : by_domain) {
    if ((stack + ";").find(";vfs_read;") != std::string::npos) through += count;
  }
  CHECK(through > 0);
  CHECK(graph["nodes"][0]["inclusive"].get<uint64_t>() == through);
  bool from_ksys_read = false;
  for (const Json& caller : graph["nodes"][0]["callers"]) from_ksys_read |= caller["symbol"] == "ksys_read";
  CHECK(from_ksys_read);
  const CommandResult bad = host.Report({"--format=folded", "--stack-root=cpu"});
  CHECK(bad.status == 2);
  CHECK(bad.err.find("--stack-root=cpu: expected domain") != std::string::npos);
}

TEST_CASE("stack views read the aggregate's stacks, and give what the raw samples give", "[report][stacks]") {
  Host host(DefaultScenario());
  ProfileWithChains(host, 8, "100ms");
  const std::string aggregate = host.current() + "/aggregate.hva";
  REQUIRE(std::filesystem::exists(aggregate));
  auto read = [&](const std::vector<std::string>& args, const std::string& file) {
    std::vector<std::string> all = args;
    all.insert(all.end(), {"-o", file});
    const CommandResult result = host.Report(all);
    INFO(result.err);
    REQUIRE(result.status == 0);
    std::ifstream in(file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string dir = host.session_root() + "/..";
  for (const std::vector<std::string>& view :
       {std::vector<std::string>{"--format=folded"}, {"--format=pprof"}, {"-c", "--format=json"}}) {
    INFO(view[0]);
    const std::string cached = read(view, dir + "/cached.out");
    REQUIRE(cached.size() > 100);
    std::vector<std::string> raw = view;
    raw.push_back("--raw-samples");
    CHECK(read(raw, dir + "/raw.out") == cached);
  }
  // Timing says which was read.
  const CommandResult timed = host.Report({"--format=folded", "--timing"});
  CHECK(timed.err.find("read samples (aggregate; 0 passes over samples.hvs)") != std::string::npos);
  // Without the aggregate, the samples are read, to the same stacks.
  const std::string folded = host.Report({"--format=folded"}).out;
  std::filesystem::remove(aggregate);
  const CommandResult without = host.Report({"--format=folded", "--timing"});
  CHECK(without.err.find("read samples (raw; 1 pass over samples.hvs)") != std::string::npos);
  CHECK(without.out == folded);
}

TEST_CASE("the call graph (-c, --children) matches the sim's ground truth", "[report][stacks][callgraph]") {
  Host host(DefaultScenario());
  ProfileWithChains(host, 8);
  const hvprof::context::GroundTruth truth = host.GroundTruth(false);
  const uint32_t counter = FirstCounter(host);
  // dom0's own samples of a function (all its vCPUs), from the truth.
  auto in_dom0 = [&](const std::string& function) {
    uint64_t sum = 0;
    for (const hvprof::context::TruthRow& row : truth.rows) {
      if (row.domain == 0 && row.function == function) sum += row.overflows.at(counter);
    }
    return sum;
  };
  const uint64_t vfs_read = in_dom0("vfs_read"), do_syscall = in_dom0("do_syscall_64");
  const uint64_t mmu_update = in_dom0("do_mmu_update");
  REQUIRE(vfs_read > 0);
  REQUIRE(do_syscall > 0);
  REQUIRE(mmu_update > 0);

  const CommandResult result = host.Report({"-c", "--children", "--domain=dom0", "--format=json"});
  INFO(result.err);
  REQUIRE(result.status == 0);
  const Json graph = Json::parse(result.out);
  std::map<std::string, Json> nodes;
  for (const Json& node : graph["nodes"]) nodes[node["symbol"].get<std::string>()] = node;
  auto arc = [](const Json& arcs, const std::string& symbol) {
    for (const Json& a : arcs) {
      if (a["symbol"] == symbol) return a["samples"].get<uint64_t>();
    }
    return uint64_t{0};
  };
  REQUIRE(nodes.count("vfs_read") == 1);
  CHECK(nodes["vfs_read"]["samples"].get<uint64_t>() == vfs_read);
  CHECK(nodes["vfs_read"]["inclusive"].get<uint64_t>() == vfs_read);
  CHECK(arc(nodes["vfs_read"]["callers"], "ksys_read") == vfs_read);
  REQUIRE(nodes.count("ksys_read") == 1);
  CHECK(nodes["ksys_read"]["samples"].get<uint64_t>() == 0);  // never sampled itself
  CHECK(nodes["ksys_read"]["inclusive"].get<uint64_t>() == vfs_read);
  CHECK(arc(nodes["ksys_read"]["callers"], "do_syscall_64") == vfs_read);
  REQUIRE(nodes.count("do_syscall_64") == 1);
  CHECK(nodes["do_syscall_64"]["samples"].get<uint64_t>() == do_syscall);
  CHECK(nodes["do_syscall_64"]["inclusive"].get<uint64_t>() == do_syscall + vfs_read);
  CHECK(arc(nodes["do_syscall_64"]["callees"], "ksys_read") == vfs_read);
  REQUIRE(nodes.count("pv_hypercall") == 1);
  CHECK(arc(nodes["pv_hypercall"]["callees"], "do_mmu_update") == mmu_update);
  // Ranked by inclusive samples, most first.
  uint64_t previous = UINT64_MAX;
  for (const Json& node : graph["nodes"]) {
    CHECK(node["inclusive"].get<uint64_t>() <= previous);
    previous = node["inclusive"].get<uint64_t>();
  }
  // Without --children, by self samples, and a threshold hides the small ones.
  const Json flat = Json::parse(host.Report({"-c", "--domain=dom0", "--format=json", "-t", "2"}).out);
  REQUIRE(!flat["nodes"].empty());
  for (const Json& node : flat["nodes"]) {
    CHECK(100.0 * node["samples"].get<double>() / flat["samples"].get<double>() >= 2.0);
  }
  // The text form, opreport -c style: callers above, the symbol, callees below.
  const std::string text = host.Report({"-c", "--domain=dom0", "--mode=kernel"}).out;
  const size_t self = text.find("vfs_read [self]");
  REQUIRE(self != std::string::npos);
  const size_t caller = text.rfind("ksys_read", self);
  CHECK(caller != std::string::npos);
  CHECK(text.find("-c is a view of its own") == std::string::npos);
  // CSV: one row per caller, node and callee.
  const std::string csv = host.Report({"-c", "--domain=dom0", "--mode=kernel", "--format=csv"}).out;
  CHECK(csv.rfind("node,role,domain,image,symbol,samples,%\n", 0) == 0);
  CHECK(csv.find(fmt::format(",self,,[kernel.kallsyms],vfs_read,{},", vfs_read)) != std::string::npos);
  CHECK(csv.find(fmt::format(",caller,,[kernel.kallsyms],ksys_read,{},", vfs_read)) != std::string::npos);
  const CommandResult mixed = host.Report({"-c", "-l"});
  CHECK(mixed.status == 2);
  CHECK(mixed.err.find("-c is a view of its own") != std::string::npos);
}

TEST_CASE("stack views of two events: one at a time, or added up with --merge", "[report][stacks][callgraph]") {
  Host host(DefaultScenario());
  ProfileWithChains(host, 8, "200ms", {"--event=CPU_CLK_UNHALTED:20000", "--event=INST_RETIRED:30000"});
  const hvprof::context::GroundTruth truth = host.GroundTruth(false);
  std::ifstream in(host.current() + "/session.json");
  const Json session = Json::parse(in, nullptr, false);
  REQUIRE(session["events"].size() == 2);
  const uint32_t cycles = session["events"][0]["counter"].get<uint32_t>();
  const uint32_t instructions = session["events"][1]["counter"].get<uint32_t>();
  auto dom0 = [&](uint32_t counter, const std::string& function) {
    uint64_t sum = 0;
    for (const hvprof::context::TruthRow& row : truth.rows) {
      if (row.domain == 0 && (function.empty() || row.function == function)) sum += row.overflows.at(counter);
    }
    return sum;
  };
  REQUIRE(dom0(cycles, "vfs_read") > 0);
  REQUIRE(dom0(instructions, "vfs_read") > 0);
  auto graph = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"-c", "--domain=dom0", "--format=json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandResult result = host.Report(args);
    INFO(result.err);
    REQUIRE(result.status == 0);
    return Json::parse(result.out);
  };
  auto self = [](const Json& g, const std::string& symbol) {
    for (const Json& node : g["nodes"]) {
      if (node["symbol"] == symbol) return node["samples"].get<uint64_t>();
    }
    return uint64_t{0};
  };
  // No --event: the first one, named.
  const Json first = graph({});
  CHECK(first["event"] == "CPU_CLK_UNHALTED");
  CHECK(first["samples"].get<uint64_t>() == dom0(cycles, ""));
  CHECK(self(first, "vfs_read") == dom0(cycles, "vfs_read"));
  const Json second = graph({"--event=INST_RETIRED"});
  CHECK(second["event"] == "INST_RETIRED");
  CHECK(self(second, "vfs_read") == dom0(instructions, "vfs_read"));
  // Added up: every count is the sum of the two events'.
  const Json merged = graph({"--merge=all"});
  CHECK(merged["event"] == "CPU_CLK_UNHALTED + INST_RETIRED");
  CHECK(merged["samples"].get<uint64_t>() == dom0(cycles, "") + dom0(instructions, ""));
  CHECK(self(merged, "vfs_read") == dom0(cycles, "vfs_read") + dom0(instructions, "vfs_read"));
  // Folded, too.
  uint64_t folded_total = 0;
  for (const auto& [stack, count] : ParseFolded(host.Report({"--format=folded", "--merge=all", "--domain=dom0"}).out)) {
    folded_total += count;
  }
  CHECK(folded_total == dom0(cycles, "") + dom0(instructions, ""));
  // Two events without a merge, or two names to merge by unit mask: refused, with the way out.
  const CommandResult two = host.Report({"-c", "--event=CPU_CLK_UNHALTED,INST_RETIRED"});
  CHECK(two.status == 2);
  CHECK(two.err.find("--merge=all") != std::string::npos);
  const CommandResult names = host.Report({"--format=folded", "--merge=unitmask", "--event=CPU_CLK_UNHALTED,INST_RETIRED"});
  CHECK(names.status == 2);
  CHECK(names.err.find("one event's unit masks") != std::string::npos);
  // A unit-mask merge of one event counts that event alone.
  CHECK(graph({"--merge=unitmask"})["samples"].get<uint64_t>() == dom0(cycles, ""));
}

TEST_CASE("pprof: go tool pprof reads the file and agrees with hvprof-report", "[report][stacks][pprof]") {
  if (!std::filesystem::exists("/usr/bin/go")) {
    (void)hvprof::testing::SkipTest("go tool pprof (Debian golang-go) is not installed: scripts/install-deps.sh installs it");
    return;
  }
  Host host(DefaultScenario());
  ProfileWithChains(host, 8);
  const std::string file = host.session_root() + "/../profile.pb.gz";
  const CommandResult written = host.Report({"--format=pprof", "-o", file});
  INFO(written.err);
  REQUIRE(written.status == 0);

  // dom0's top 10 symbols: the same counts in both.
  const Json flat = Json::parse(host.Report({"-l", "--domain=dom0", "--format=json"}).out);
  const auto dom0 = PprofTop(file, {"-tagfocus=domain_name=dom0"});
  size_t compared = 0;
  for (const Json& row : flat["rows"]) {
    if (compared == 10) break;
    const std::string symbol = row["symbol"].get<std::string>();
    INFO(symbol);
    REQUIRE(dom0.count(symbol) == 1);
    CHECK(dom0.at(symbol) == row["samples"][0].get<uint64_t>());
    ++compared;
  }
  CHECK(compared == 10);
  // A domain selected by its number holds that domain's samples only.
  uint64_t domain1 = 0;
  for (const auto& [stack, count] : ParseFolded(host.Report({"--format=folded", "--domain=1"}).out)) domain1 += count;
  uint64_t tagged = 0;
  for (const auto& [function, count] : PprofTop(file, {"-tagfocus=domain=1"})) tagged += count;
  CHECK(domain1 > 0);
  CHECK(tagged == domain1);
  // dom0's number is 0: the label's unit keeps it from reading as absent.
  uint64_t dom0_folded = 0, dom0_tagged = 0;
  for (const auto& [stack, count] : ParseFolded(host.Report({"--format=folded", "--domain=dom0"}).out)) {
    dom0_folded += count;
  }
  for (const auto& [function, count] : PprofTop(file, {"-tagfocus=domain=0"})) dom0_tagged += count;
  CHECK(dom0_folded > 0);
  CHECK(dom0_tagged == dom0_folded);
  // Where each sample ran: the 4 physical CPUs' samples add up to all of them, and every
  // sample carries its vCPU and thread.
  uint64_t all = 0, by_pcpu = 0;
  for (const auto& [function, count] : PprofTop(file, {})) all += count;
  for (int cpu = 0; cpu < 4; ++cpu) {
    uint64_t on_cpu = 0;
    for (const auto& [function, count] : PprofTop(file, {fmt::format("-tagfocus=pcpu={}", cpu)})) on_cpu += count;
    INFO("pcpu " << cpu);
    CHECK(on_cpu > 0);
    by_pcpu += on_cpu;
  }
  CHECK(by_pcpu == all);
  const CommandResult tags = hvprof::testing::RunProgram({"/usr/bin/go", "tool", "pprof", "-tags", file});
  for (const char* key : {" vcpu:", " pcpu:", " tid:", " pid:", " domain_name:"}) {
    INFO(key);
    CHECK(tags.out.find(key) != std::string::npos);
  }
  // Call chains survive: pprof's callers of vfs_read.
  const CommandResult peek = hvprof::testing::RunProgram({"/usr/bin/go", "tool", "pprof", "-peek=^vfs_read$", file});
  CHECK(peek.out.find("ksys_read") != std::string::npos);
  // pprof is binary: not to a terminal, but -o or a pipe.
  const CommandResult bad = host.Report({"--format=pprof", "-c"});
  CHECK(bad.status == 2);
}
