// hvprof-report --diff end to end: sessions of the simulated host made by the real programs,
// diffed by the real hvprof-report, checked against the simulator's ground truth.
#include <algorithm>
#include <array>
#include <cmath>
#include <regex>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hvprof/context/ground_truth.h"
#include "hvprof/report/load.h"
#include "hvprof/store/session.h"
#include "browser_support.h"
#include "host_harness.h"
#include "sim_harness.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::kIdleDomain;
using hvprof::Mode;
using hvprof::testing::CommandResult;
using hvprof::testing::Host;
using hvprof::testing::TestScenario;
using Json = nlohmann::json;
namespace context = hvprof::context;
namespace report = hvprof::report;
namespace store = hvprof::store;

namespace {

// The tests' scenario, or with guest1 spending more of its hypervisor time in do_mmu_update
// (weight 12 of 15 instead of 3 of 6, and 18% of its time in the hypervisor instead of 15%).
Json Scenario(bool changed) {
  Json json = TestScenario("intel-arch-v4", 7);
  if (changed) {
    json["domains"][1]["workload"]["hypervisor"]["functions"][0]["weight"] = 12;
    json["domains"][1]["workload"]["hypervisor"]["share"] = 18;
    json["domains"][1]["workload"]["user"]["share"] = 47;
  }
  return json;
}

// One profile of `ms` simulated milliseconds, kept as `name`; returns its directory, and the
// ground truth of the profiled time in `truth`.
std::string Profile(Host& host, const std::string& name, int ms = 150, const std::string& callgraph = "0",
                    context::GroundTruth* truth = nullptr) {
  REQUIRE(host.Hvprof({"--start-daemon", "--passive-domains=guest1,guest2,guest3", "--callgraph=" + callgraph,
                       "--event=CPU_CLK_UNHALTED:60000"})
              .status == 0);
  (void)host.GroundTruth(true);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--run-sim=" + std::to_string(ms) + "ms"}).status == 0);
  if (truth != nullptr) *truth = host.GroundTruth(false);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  REQUIRE(host.Hvprof({"--save=" + name}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  return host.session_root() + "/samples/" + name;
}

// guest1's do_mmu_update: its share of counter 0's overflows in the ground truth.
double TruthShare(const context::GroundTruth& truth) {
  // The one counter that counted (the event's logical counter).
  std::vector<double> per_counter;
  for (const context::TruthRow& row : truth.rows) {
    per_counter.resize(std::max(per_counter.size(), row.overflows.size()));
    for (size_t i = 0; i < row.overflows.size(); ++i) per_counter[i] += static_cast<double>(row.overflows[i]);
  }
  REQUIRE(!per_counter.empty());
  const size_t counter = std::max_element(per_counter.begin(), per_counter.end()) - per_counter.begin();
  // Shares are of the samples outside the idle loop (the idle domain), as the report's are.
  double total = 0, function = 0;
  for (const context::TruthRow& row : truth.rows) {
    const double overflows = static_cast<double>(row.overflows.at(counter));
    if (row.domain != kIdleDomain) total += overflows;
    if (row.domain == 1 && row.mode == Mode::kHypervisor && row.function == "do_mmu_update") function += overflows;
  }
  return function / total;
}

const Json* FindRow(const Json& diff, const std::string& domain_part, const std::string& image_part,
                    const std::string& symbol) {
  for (const Json& row : diff["rows"]) {
    if (row.value("symbol", "") == symbol && row.value("domain", "").find(domain_part) != std::string::npos &&
        row.value("image", "").find(image_part) != std::string::npos) {
      return &row;
    }
  }
  return nullptr;
}

int Significant(const Json& diff) {
  int count = 0;
  for (const Json& row : diff["rows"]) count += row["significant"].get<bool>();
  return count;
}

}  // namespace

TEST_CASE("diff: two seeds of one scenario flag nothing, a 2-point move is flagged and measured", "[diff]") {
  Host first(Scenario(false), 11);
  Host second(Scenario(false), 12);
  Host changed(Scenario(true), 13);
  context::GroundTruth truth_a, truth_c;
  const std::string a = Profile(first, "a", 150, "0", &truth_a);
  const std::string b = Profile(second, "b");
  const std::string c = Profile(changed, "c", 150, "0", &truth_c);

  // The null pair.
  CommandResult null_diff = first.Report({"--diff", a, b, "-l", "--by-domain", "--format=json"});
  REQUIRE(null_diff.status == 0);
  const Json nothing = Json::parse(null_diff.out);
  CHECK(nothing["schema"] == "hvprof-diff");
  CHECK(nothing["rows_tested"].get<int>() > 50);
  CHECK(Significant(nothing) == 0);
  CHECK(nothing["test"].get<std::string>().find("dispersion") != std::string::npos);

  // The changed workload: guest1's do_mmu_update grew by about 2 points of all samples.
  CommandResult moved = first.Report({"--diff", a, c, "-l", "--by-domain", "--format=json"});
  REQUIRE(moved.status == 0);
  const Json diff = Json::parse(moved.out);
  const Json* row = FindRow(diff, "guest1", "xen", "do_mmu_update");
  REQUIRE(row != nullptr);
  INFO(row->dump());
  CHECK((*row)["significant"].get<bool>());
  // Every overflow is a sample here (nothing was lost), so each side's share is the truth's.
  CHECK((*row)["base_percent"].get<double>() == Approx(100 * TruthShare(truth_a)).epsilon(1e-6));
  CHECK((*row)["new_percent"].get<double>() == Approx(100 * TruthShare(truth_c)).epsilon(1e-6));
  const double truth_points = 100 * (TruthShare(truth_c) - TruthShare(truth_a));
  CHECK(truth_points > 1.5);
  CHECK((*row)["change_points"].get<double>() == Approx(truth_points).epsilon(1e-6));
  CHECK((*row)["interval_points"][0].get<double>() > 0);
  CHECK((*row)["p_adjusted"].get<double>() < 0.05);

  // Text: significant rows marked, the largest change first; the gate fails on it.
  CommandResult text = first.Report({"--diff", a, c, "-l", "--by-domain"});
  REQUIRE(text.status == 0);
  CHECK(text.out.find("Holm") != std::string::npos);
  const size_t first_row = text.out.find("\n*");
  REQUIRE(first_row != std::string::npos);
  CHECK(text.out.substr(first_row, text.out.find('\n', first_row + 1) - first_row).find("do_mmu_update") !=
        std::string::npos);
  CommandResult gate = first.Report({"--diff", a, c, "-l", "--by-domain", "--fail-on-regression=1"});
  CHECK(gate.status == 5);
  CHECK(gate.err.find("do_mmu_update") != std::string::npos);
  CHECK(first.Report({"--diff", a, b, "-l", "--fail-on-regression"}).status == 0);
  // The reverse diff sees the same row shrink, and a gate on growth passes.
  CHECK(first.Report({"--diff", c, a, "-l", "--by-domain", "--fail-on-regression=1"}).status == 0);

  // Benjamini-Hochberg finds at least what Holm finds.
  const Json fdr = Json::parse(first.Report({"--diff", a, c, "-l", "--by-domain", "--fdr", "--format=json"}).out);
  CHECK(fdr["correction"] == "benjamini-hochberg");
  CHECK(Significant(fdr) >= Significant(diff));

  // Pseudo-repeats: the rank test over slices, with its caveat.
  CommandResult sliced = first.Report({"--diff", a, c, "-l", "--by-domain", "--slices=8"});
  REQUIRE(sliced.status == 0);
  CHECK(sliced.out.find("Mann-Whitney") != std::string::npos);
  CHECK(sliced.out.find("caveat") != std::string::npos);
}

TEST_CASE("diff: each row's time slices add up to it, from the aggregate's spans or from one pass", "[diff]") {
  Host host(Scenario(false), 14);
  const std::string session = Profile(host, "a", 150);
  // hvprofd's aggregate counts equal spans of time (up to 64, widening as the session grows).
  auto stored = store::ReadAggregate(session + "/" + store::kAggregateFile);
  REQUIRE(stored.has_value());
  const uint32_t spans = stored.value().time_slices;
  REQUIRE(spans >= 2);
  REQUIRE(spans < store::kMaxTimeSlices);
  std::map<std::string, uint64_t> counts;  // per entry, as the aggregate alone counts them
  for (const uint32_t slices : {0u, 2u, store::kMaxTimeSlices}) {
    INFO(slices << " slices");
    report::LoadOptions options;
    options.time_slices = slices;
    auto loaded = report::LoadProfile(session, options);
    REQUIRE(loaded.has_value());
    const report::Profile& profile = loaded.value();
    CHECK(profile.timings().from_aggregate);
    // As many slices as the spans or fewer come from them; more, from one pass over samples.hvs,
    // whose user samples are counted by image through the whole context, as hvprofd counted them.
    CHECK(profile.timings().samples_passes == (slices > spans ? 1u : 0u));
    REQUIRE(profile.time_slices() == slices);
    REQUIRE(profile.slice_counts().size() == profile.entries().size() * slices);
    uint64_t mismatched = 0, user_rows = 0;
    for (size_t e = 0; e < profile.entries().size(); ++e) {
      const report::Entry& entry = profile.entries()[e];
      const std::string key = fmt::format("{}/{}/{}/{:x}", entry.domain, entry.mode, entry.pid, entry.ip);
      if (slices == 0) {
        counts[key] = entry.count;
        continue;
      }
      CHECK(counts[key] == entry.count);
      uint64_t sum = 0;
      for (uint32_t k = 0; k < slices; ++k) sum += profile.slice_counts()[e * slices + k];
      mismatched += sum != entry.count;
      user_rows += entry.mode == hvprof::sample_mode::kUser && entry.count != 0;
    }
    CHECK(mismatched == 0);
    if (slices != 0) CHECK(user_rows > 0);
  }
}

TEST_CASE("diff: several runs a side are compared by rank, spelled as OProfile does", "[diff]") {
  std::vector<std::unique_ptr<Host>> hosts;
  std::vector<std::string> base, next;
  for (int i = 0; i < 6; ++i) {
    hosts.push_back(std::make_unique<Host>(Scenario(i >= 3), 100 + i));
    (i >= 3 ? next : base).push_back(Profile(*hosts.back(), "run", 60));
  }
  std::vector<std::string> args = {"{"};
  args.insert(args.end(), base.begin(), base.end());
  args.insert(args.end(), {"}", "{"});
  args.insert(args.end(), next.begin(), next.end());
  args.insert(args.end(), {"}", "-l", "--by-domain", "--format=json"});
  CommandResult braces = hosts[0]->Report(args);
  REQUIRE(braces.status == 0);
  const Json diff = Json::parse(braces.out);
  CHECK(diff["test"] == "Mann-Whitney U");
  CHECK(diff["base"]["sessions"].size() == 3);
  // Three runs a side cannot reach significance after the correction, and it says so.
  CHECK(Significant(diff) == 0);
  bool warned = false;
  for (const Json& note : diff["notes"]) warned |= note.get<std::string>().find("nothing can be significant") != std::string::npos;
  CHECK(warned);
  const Json* row = FindRow(diff, "guest1", "xen", "do_mmu_update");
  REQUIRE(row != nullptr);
  // Every run of the new side has the larger share: the rank test's best p for 3 and 3.
  CHECK((*row)["p"].get<double>() == Approx(0.1));
  CHECK((*row)["change_points"].get<double>() > 1.5);
  // The same with --diff and comma-separated sets.
  std::string base_set = base[0] + "," + base[1] + "," + base[2];
  std::string next_set = next[0] + "," + next[1] + "," + next[2];
  const Json commas = Json::parse(hosts[0]->Report({"--diff", base_set, next_set, "-l", "--by-domain", "--format=json"}).out);
  CHECK(commas["rows"] == diff["rows"]);
}

TEST_CASE("diff: stacks as differential folded input and as a coloured flame graph", "[diff]") {
  Host first(Scenario(false), 21);
  Host changed(Scenario(true), 22);
  const std::string a = Profile(first, "a", 100, "16");
  const std::string c = Profile(changed, "c", 100, "16");
  CommandResult folded = first.Report({"--diff", a, c, "--format=folded"});
  REQUIRE(folded.status == 0);
  // "stack BASE NEW" per line; the counts add up to each side's samples of the stacks view.
  uint64_t base_sum = 0, new_sum = 0;
  bool found = false;
  std::istringstream lines(folded.out);
  for (std::string line; std::getline(lines, line);) {
    const size_t second = line.rfind(' ');
    const size_t first_space = line.rfind(' ', second - 1);
    REQUIRE(first_space != std::string::npos);
    base_sum += std::stoull(line.substr(first_space + 1, second - first_space - 1));
    new_sum += std::stoull(line.substr(second + 1));
    found |= line.rfind("dom1 (guest1)", 0) == 0 && line.find(";do_mmu_update ") != std::string::npos;
  }
  CHECK(found);
  const Json stacks = Json::parse(first.Report({"--diff", a, c, "--format=json", "-c"}).out);
  CHECK(stacks["view"] == "stack");
  CHECK(stacks["base"]["samples"].get<uint64_t>() == base_sum);
  CHECK(stacks["new"]["samples"].get<uint64_t>() == new_sum);
  bool flagged = false;
  for (const Json& row : stacks["rows"]) {
    const auto& frames = row["stack"];
    if (frames.back() == "do_mmu_update" && frames.front().get<std::string>().find("guest1") != std::string::npos &&
        row["significant"].get<bool>() && row["change_points"].get<double>() > 0) {
      flagged = true;
    }
  }
  INFO(folded.out);
  for (const Json& row : stacks["rows"]) {
    if (row["stack"].back() == "do_mmu_update") UNSCOPED_INFO(row.dump());
  }
  CHECK(flagged);
  const std::string page = first.session_root() + "/diff.html";
  REQUIRE(first.Report({"--diff", a, c, "--format=html", "-o", page}).status == 0);
  std::ifstream in(page);
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(html.find("\"base_counts\"") != std::string::npos);
  CHECK(html.find("hvprof diff:") != std::string::npos);
}

TEST_CASE("diff: what cannot be compared is refused with the reason", "[diff]") {
  Host host(Scenario(false), 31);
  const std::string a = Profile(host, "a", 40);
  CommandResult one = host.Report({"--diff", a});
  CHECK(one.status == 2);
  CHECK(one.err.find("two sides") != std::string::npos);
  CommandResult details = host.Report({"--diff", a, a, "-d"});
  CHECK(details.status == 2);
  CommandResult braces = host.Report({"{", a, "}", "{", a});
  CHECK(braces.status == 2);
  CHECK(braces.err.find("closed") != std::string::npos);
  CommandResult missing = host.Report({"--diff", a, host.session_root() + "/samples/nothing-here"});
  CHECK(missing.status == 1);
  CHECK(missing.err.find("new side") != std::string::npos);
  CommandResult event = host.Report({"--diff", a, a, "--event=BR_INST_RETIRED"});
  CHECK(event.status == 2);
  CHECK(host.Report({"--fdr"}).status == 2);
  CHECK(host.Report({"--diff", a, a, "-c", "--slices=8"}).status == 2);
  CHECK(host.Report({"--diff", a, a, "--slices=1"}).status == 2);
  // A session against itself: every row the same, nothing significant, every ratio 1.
  const Json same = Json::parse(host.Report({"--diff", a, a, "-l", "--format=json"}).out);
  CHECK(Significant(same) == 0);
  for (const Json& row : same["rows"]) CHECK(row["change_points"].get<double>() == 0);
}

TEST_CASE("hvprof run --baseline gates a benchmark on significant regressions", "[diff][run]") {
  Host before(Scenario(false), 41);
  const std::string baseline = Profile(before, "before");
  hvprof::testing::TempDir dir;
  auto run = [&](Host& host, const std::string& json) {
    return host.Hvprof({"run", "--passive-domains=guest1,guest2,guest3", "--event=CPU_CLK_UNHALTED:60000",
                        "--duration=150ms", "--baseline=" + baseline, "--fail-on-regression=1", "--json=" + json});
  };
  // The same workload on another seed passes, and says it found nothing.
  Host same(Scenario(false), 42);
  CommandResult passed = run(same, dir.File("same.json"));
  INFO(passed.out << passed.err);
  CHECK(passed.status == 0);
  CHECK(passed.out.find("Against the baseline") != std::string::npos);
  std::ifstream same_file(dir.File("same.json"));
  const Json same_summary = Json::parse(same_file);
  CHECK(same_summary["baseline"]["verdict"]["passed"] == true);
  // The changed workload fails the gate with the rows that did it.
  Host changed(Scenario(true), 43);
  CommandResult failed = run(changed, dir.File("changed.json"));
  INFO(failed.out << failed.err);
  CHECK(failed.status == 5);
  CHECK(failed.err.find("regression against the baseline") != std::string::npos);
  CHECK(failed.err.find("do_mmu_update") != std::string::npos);
  std::ifstream changed_file(dir.File("changed.json"));
  const Json changed_summary = Json::parse(changed_file);
  CHECK(changed_summary["baseline"]["verdict"]["passed"] == false);
  CHECK(changed_summary["baseline"]["verdict"]["regressions"].get<int>() >= 1);
  // A gate needs a baseline; a baseline that is not there is a warning, and fails the gate.
  CHECK(changed.Hvprof({"run", "--duration=20ms", "--fail-on-regression"}).status == 2);
  CommandResult nowhere = changed.Hvprof({"run", "--event=CPU_CLK_UNHALTED:60000", "--duration=20ms",
                                          "--baseline=/nonexistent/session", "--fail-on-regression"});
  INFO(nowhere.err);
  CHECK(nowhere.status == 1);
  CHECK(nowhere.err.find("--baseline") != std::string::npos);
  CHECK(changed.Hvprof({"--stop", "--baseline=x"}).status == 2);
}

TEST_CASE("a gate never passes on nothing: no empty session is saved and an empty side is its own error", "[diff][run]") {
  Host host(Scenario(false), 51);
  const std::string a = Profile(host, "a", 40);
  // After `hvprof run` (which saves its run itself), --save has nothing of the run to save.
  REQUIRE(host.Hvprof({"run", "--event=CPU_CLK_UNHALTED:60000", "--duration=40ms"}).status == 0);
  CommandResult after_run = host.Hvprof({"--save=before"});
  INFO(after_run.out << after_run.err);
  CHECK(after_run.status == 1);
  CHECK_FALSE(std::filesystem::exists(host.session_root() + "/samples/before"));
  // A session profiled for no time has no samples: not saved, with what to do.
  REQUIRE(host.Hvprof({"--start-daemon", "--event=CPU_CLK_UNHALTED:60000"}).status == 0);
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  CommandResult empty_save = host.Hvprof({"--save=empty"});
  INFO(empty_save.out << empty_save.err);
  CHECK(empty_save.status == 1);
  CHECK(empty_save.err.find("has no samples: nothing was saved") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(host.session_root() + "/samples/empty"));
  // A name taken is refused before anything is paused or written: profiling goes on.
  REQUIRE(host.Hvprof({"--start"}).status == 0);
  CommandResult taken = host.Hvprof({"--save=a"});
  INFO(taken.out << taken.err);
  CHECK(taken.status == 1);
  CHECK(taken.err.find("a session named 'a' exists already") != std::string::npos);
  CHECK(host.Hvprof({"--status"}).out.find("profiling on") != std::string::npos);
  REQUIRE(host.Hvprof({"--stop"}).status == 0);
  REQUIRE(host.Hvprof({"--shutdown"}).status == 0);
  // Without hvprofd the same is refused.
  CHECK(host.Hvprof({"--save=empty"}).status == 1);
  CHECK_FALSE(std::filesystem::exists(host.session_root() + "/samples/empty"));

  // That empty session on either side of a diff: exit 6, naming it; never "no change".
  const std::string empty = host.session_root() + "/samples/current";
  REQUIRE(std::filesystem::exists(empty + "/session.json"));
  CommandResult base_empty = host.Report({"--diff", empty, a, "-l", "--fail-on-regression=1"});
  INFO(base_empty.out << base_empty.err);
  CHECK(base_empty.status == 6);
  CHECK(base_empty.err.find("(base side) has no samples") != std::string::npos);
  CommandResult new_empty = host.Report({"--diff", a, empty});
  CHECK(new_empty.status == 6);
  CHECK(new_empty.err.find("(new side) has no samples") != std::string::npos);
  // And as a run's baseline: the gate fails with 6, not "no significant change".
  CommandResult gated = host.Hvprof({"run", "--event=CPU_CLK_UNHALTED:60000", "--duration=40ms", "--baseline=" + empty,
                                     "--fail-on-regression=1"});
  INFO(gated.out << gated.err);
  CHECK(gated.status == 6);
  CHECK(gated.err.find("has no samples") != std::string::npos);
  CHECK(gated.out.find("no significant change") == std::string::npos);
}

TEST_CASE("diff: the differential flame graph opens offline in Chromium, grown frames red and shrunk blue",
          "[diff][browser]") {
  const std::string chromium = hvprof::testing::Chromium();
  if (chromium.empty() && hvprof::testing::SkipTest("needs Chromium (Debian package chromium) to open the page")) {
    return;
  }
  Host first(Scenario(false), 51);
  Host changed(Scenario(true), 52);
  const std::string a = Profile(first, "a", 100, "16");
  const std::string c = Profile(changed, "c", 100, "16");
  const std::string file = first.session_root() + "/../diff.html";
  REQUIRE(first.Report({"--diff", a, c, "--format=html", "-o", file}).status == 0);
  const hvprof::testing::Page page = hvprof::testing::Open(chromium, file, "");
  hvprof::testing::CheckClean(page);
  CHECK(page.dom.find("data-diff=\"true\"") != std::string::npos);
  // rgb(R, G, B) of a frame's background.
  auto rgb = [](const std::string& background) {
    std::smatch match;
    REQUIRE(std::regex_search(background, match, std::regex(R"(rgb\((\d+), (\d+), (\d+)\))")));
    return std::array<int, 3>{std::stoi(match[1]), std::stoi(match[2]), std::stoi(match[3])};
  };
  bool grew = false, shrank = false;
  bool in_guest1 = false;
  for (const hvprof::testing::Frame& frame : hvprof::testing::Frames(page.dom)) {
    if (frame.depth == 1) in_guest1 = frame.name == "dom1 (guest1)";
    if (!in_guest1 || frame.depth != 3) continue;
    const auto colour = rgb(frame.background);
    INFO(frame.name << " " << frame.background);
    if (frame.name == "do_mmu_update") {
      CHECK(colour[0] > colour[2] + 60);  // strongly red: the largest growth
      grew = true;
    }
    if (frame.name == "pv_hypercall") {
      CHECK(colour[2] > colour[0]);  // blue: its share shrank
      shrank = true;
    }
  }
  CHECK(grew);
  CHECK(shrank);
}

TEST_CASE("diff: an archive on either side compares as its session did", "[diff][archive]") {
  Host first(Scenario(false), 61);
  Host changed(Scenario(true), 62);
  const std::string a = Profile(first, "a", 100);
  const std::string c = Profile(changed, "c", 100);
  const CommandResult direct = first.Report({"--diff", a, c, "-l", "--by-domain", "--format=json"});
  REQUIRE(direct.status == 0);
  const std::string tar = first.session_root() + "/../a.tar";
  const CommandResult archived = hvprof::testing::RunProgram(
      {hvprof::testing::Binary("hvprof"), "archive", "--session-dir=" + first.session_root(), "a", "-o", tar});
  INFO(archived.err);
  REQUIRE(archived.status == 0);
  std::filesystem::remove_all(a);
  const CommandResult from_archive = first.Report({"--diff", "archive:" + tar, c, "-l", "--by-domain", "--format=json"});
  INFO(from_archive.err);
  REQUIRE(from_archive.status == 0);
  Json expected = Json::parse(direct.out), got = Json::parse(from_archive.out);
  CHECK(got["rows"] == expected["rows"]);
  CHECK(got["base"]["samples"] == expected["base"]["samples"]);
  CHECK(got["base"]["sessions"][0] == "archive:" + tar);
}
