// hvprof's HTML pages of a linux session, as a perf user opens them: screenshots taken by headless
// Chromium (network off) and read pixel by pixel. The time line of `hvprof record --sched` shows
// which task ran where, coloured by process, with a lane per task on demand; the flame graph of
// `hvprof record -g` starts on the first screen however many warnings and notes the session has.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "browser_support.h"
#include "live_support.h"
#include "hvprof/store/session.h"
#include "run_support.h"
#include "skip.h"
#include "temp_dir.h"

using hvprof::testing::CommandResult;
using hvprof::testing::LinuxRun;
using hvprof::testing::PerfUsable;
using Json = nlohmann::json;

namespace {

// The page's lanes as drawn (the time line's canvas attributes in the DOM).
constexpr uint32_t kAxisHeight = 22;
constexpr uint32_t kLaneHeight = 18;

std::string Attribute(const std::string& dom, const std::string& name) {
  std::smatch found;
  if (!std::regex_search(dom, found, std::regex(name + R"re(="([^"]*)")re"))) return {};
  return found[1];
}

Json JsonAttribute(const std::string& dom, const std::string& name) {
  const std::string value = hvprof::testing::Unescape(Attribute(dom, name));
  INFO(name << ": " << value.substr(0, 300));
  REQUIRE(!value.empty());
  return Json::parse(value);
}

bool Background(uint32_t rgb) { return rgb == 0xFFFFFF || rgb == 0xF6F6F6; }

// The hue (degrees) of 0xRRGGBB.
double Hue(uint32_t rgb) {
  const double r = ((rgb >> 16) & 0xFF) / 255.0, g = ((rgb >> 8) & 0xFF) / 255.0, b = (rgb & 0xFF) / 255.0;
  const double high = std::max({r, g, b}), low = std::min({r, g, b});
  if (high == low) return 0;
  double hue = high == r ? (g - b) / (high - low) : high == g ? 2 + (b - r) / (high - low) : 4 + (r - g) / (high - low);
  hue *= 60;
  return hue < 0 ? hue + 360 : hue;
}

// How far apart two hues are, around the circle.
double HueDistance(double a, double b) {
  const double d = std::abs(a - b);
  return std::min(d, 360 - d);
}

// The colour most of a lane's slices are drawn in, from the row of pixels through its middle,
// and the share of the drawn (not background) pixels in its hue: the edges of a slice narrower
// than a pixel are its colour blended with the background, lighter but of the same hue.
struct LaneColour {
  uint32_t rgb = 0;
  double same_hue = 0;
  size_t drawn = 0;
};
LaneColour Dominant(const hvprof::testing::Screenshot& shot, uint32_t y, uint32_t x0) {
  std::map<uint32_t, size_t> counts;
  LaneColour out;
  for (uint32_t x = x0; x < shot.width; ++x) {
    const uint32_t rgb = shot.At(x, y);
    if (Background(rgb)) continue;
    ++counts[rgb];
    ++out.drawn;
  }
  size_t most = 0;
  for (const auto& [rgb, count] : counts) {
    if (count > most) {
      out.rgb = rgb;
      most = count;
    }
  }
  size_t same = 0;
  for (const auto& [rgb, count] : counts) same += HueDistance(Hue(rgb), Hue(out.rgb)) < 8 ? count : 0;
  if (out.drawn != 0) out.same_hue = static_cast<double>(same) / static_cast<double>(out.drawn);
  return out;
}

std::string Session(const LinuxRun& run) {
  const auto saved = hvprof::store::NewestSavedSession({run.session_root()});
  REQUIRE(saved.has_value());
  return *saved;
}

}  // namespace

TEST_CASE("linux: the --sched time line colours each process, with a legend, and keeps a task in one lane "
          "(screenshots in headless Chromium)",
          "[linux][live][sched][browser]") {
  if (!PerfUsable()) return;
  if (auto why = hvprof::testing::TracepointsUnusable(); why && hvprof::testing::SkipTest(*why)) return;
  const std::string chromium = hvprof::testing::Chromium();
  if (chromium.empty() && hvprof::testing::SkipTest("needs Chromium (Debian package chromium) to open the page")) {
    return;
  }
  LinuxRun run;
  // Five spinning threads and a napping one in one process, beside the host's own tasks.
  run.Run({"--sched", "--", HVPROF_LINUX_SCHED_MIX, "800", "5", "busy"});
  const std::string session = Session(run);
  hvprof::testing::TempDir dir;
  const std::string file = dir.File("timeline.html");
  const CommandResult written = run.ReportOn({session, "--timeline", "--format=html", "-o", file});
  INFO(written.err);
  REQUIRE((written.status == 0 || written.status == 3));
  const CommandResult sched = run.ReportOn({session, "--sched", "--format=json"});
  REQUIRE(!sched.out.empty());
  const Json report = Json::parse(sched.out);
  std::map<std::string, Json> ran;  // the tasks that ran, by label
  for (const Json& entity : report["entities"]) {
    if (entity["running_ns"].get<uint64_t>() > 0) ran[entity["label"].get<std::string>()] = entity;
  }
  REQUIRE(ran.size() >= 4);

  // A lane per task: as many lanes as tasks ran, each named by its process in the legend.
  const hvprof::testing::Page page = hvprof::testing::Open(chromium, file, "#lanes=task");
  hvprof::testing::CheckClean(page);
  CHECK(Attribute(page.dom, "data-mode") == "entity");
  CHECK(std::stoul(Attribute(page.dom, "data-lanes")) == ran.size());
  const Json lane_processes = JsonAttribute(page.dom, "data-lane-processes");
  const Json lane_labels = JsonAttribute(page.dom, "data-lane-labels");
  const Json lane_running = JsonAttribute(page.dom, "data-lane-running-ns");
  const Json lane_pcpus = JsonAttribute(page.dom, "data-lane-pcpus");
  REQUIRE(lane_processes.size() == ran.size());
  REQUIRE(lane_labels.size() == ran.size());
  // Each task's lane holds all of its running time, on whichever pCPUs: one that moved between
  // pCPUs has its stretches on each in its one lane.
  size_t moved = 0;
  for (size_t lane = 0; lane < lane_labels.size(); ++lane) {
    const std::string label = lane_labels[lane].get<std::string>();
    INFO(label);
    REQUIRE(ran.contains(label));
    CHECK(lane_running[lane].get<uint64_t>() == ran[label]["running_ns"].get<uint64_t>());
    if (ran[label]["migrations"]["derived"].get<uint64_t>() > 0) {
      CHECK(lane_pcpus[lane].get<uint32_t>() >= 2);
      ++moved;
    }
  }
  // Five spinners on this host's CPUs move now and then (in most runs here some task did); a
  // run where none did checks no lane across pCPUs, and says so.
  if (moved == 0) WARN("no task ran on two pCPUs in this run: no lane across pCPUs was checked");
  std::set<std::string> processes(lane_processes.begin(), lane_processes.end());
  CHECK(std::stoul(Attribute(page.dom, "data-keys")) == processes.size());
  const auto mix = std::find_if(processes.begin(), processes.end(),
                                [](const std::string& p) { return p.find("linux_sched_mix[") != std::string::npos; });
  REQUIRE(mix != processes.end());
  CHECK(page.dom.find("data-key=\"" + *mix + "\"") != std::string::npos);  // in the legend
  const uint32_t top = std::stoul(Attribute(page.dom, "data-top"));
  const uint32_t left = std::stoul(Attribute(page.dom, "data-left"));
  const uint32_t label_width = std::stoul(Attribute(page.dom, "data-label-width"));

  // What the screen shows: each task's lane in one colour wherever it ran (its slices on every
  // pCPU), the threads of one process in one hue, other processes in others.
  const hvprof::testing::Screenshot shot = hvprof::testing::Shoot(chromium, file, "#lanes=task");
  std::map<std::string, std::vector<LaneColour>> by_process;
  size_t checked = 0;
  for (size_t lane = 0; lane < lane_processes.size(); ++lane) {
    const uint32_t y = top + kAxisHeight + static_cast<uint32_t>(lane) * kLaneHeight + kLaneHeight / 2;
    if (y >= shot.height) break;
    const LaneColour colour = Dominant(shot, y, left + label_width + 1);
    if (colour.drawn < 20) continue;  // ran for less than 20 pixels' worth: edges only
    INFO(fmt::format("lane {} ({}): {:06x}, its hue in {:.0f}% of {} pixels", lane,
                     lane_processes[lane].get<std::string>(), colour.rgb, colour.same_hue * 100, colour.drawn));
    CHECK(colour.same_hue > 0.9);  // one task's colour wherever it ran
    by_process[lane_processes[lane].get<std::string>()].push_back(colour);
    ++checked;
  }
  CHECK(checked >= 4);
  REQUIRE(by_process.contains(*mix));
  CHECK(by_process[*mix].size() >= 3);  // its spinners, at least
  for (const LaneColour& thread : by_process[*mix]) {
    CHECK(HueDistance(Hue(thread.rgb), Hue(by_process[*mix].front().rgb)) < 16);
  }
  size_t others = 0;
  for (const auto& [process, lanes] : by_process) {
    if (process == *mix) continue;
    for (const LaneColour& other : lanes) {
      INFO(process << ": " << fmt::format("{:06x}", other.rgb));
      for (const LaneColour& mine : by_process[*mix]) CHECK(other.rgb != mine.rgb);
      ++others;
    }
  }
  CHECK(others >= 1);

  // A lane per pCPU: no longer one colour per lane; the sched_mix process's colours among them.
  const hvprof::testing::Page pcpus = hvprof::testing::Open(chromium, file, "");
  hvprof::testing::CheckClean(pcpus);
  CHECK(Attribute(pcpus.dom, "data-mode") == "pcpu");
  const uint32_t pcpu_top = std::stoul(Attribute(pcpus.dom, "data-top"));
  const uint32_t pcpu_x0 = std::stoul(Attribute(pcpus.dom, "data-left")) +
                           std::stoul(Attribute(pcpus.dom, "data-label-width")) + 1;
  const hvprof::testing::Screenshot pcpu_shot = hvprof::testing::Shoot(chromium, file, "");
  std::map<uint32_t, size_t> all_colours;
  size_t mixed_rows = 0;  // pCPU lanes with two colours or more, each of 2% of the row or more
  for (uint32_t c = 0; c < report["pcpus"].size(); ++c) {
    const uint32_t y = pcpu_top + kAxisHeight + c * kLaneHeight + kLaneHeight / 2;
    if (y >= pcpu_shot.height) break;
    std::map<uint32_t, size_t> colours;
    size_t drawn = 0;
    for (uint32_t x = pcpu_x0; x < pcpu_shot.width; ++x) {
      if (Background(pcpu_shot.At(x, y))) continue;
      ++colours[pcpu_shot.At(x, y)];
      ++all_colours[pcpu_shot.At(x, y)];
      ++drawn;
    }
    size_t visible = 0;
    for (const auto& [rgb, count] : colours) visible += count * 50 >= drawn ? 1 : 0;
    mixed_rows += visible >= 2 ? 1 : 0;
  }
  CHECK(mixed_rows >= 1);
  bool mix_shown = false;
  for (const LaneColour& thread : by_process[*mix]) mix_shown |= all_colours.contains(thread.rgb);
  CHECK(mix_shown);
}

TEST_CASE("linux: the flame graph of hvprof record -g folds its warnings and notes into one line and starts on "
          "the first screen (a screenshot in headless Chromium)",
          "[linux][live][browser]") {
  if (!PerfUsable()) return;
  const std::string chromium = hvprof::testing::Chromium();
  if (chromium.empty() && hvprof::testing::SkipTest("needs Chromium (Debian package chromium) to open the page")) {
    return;
  }
  LinuxRun run;
  run.Run({"-g", "--", HVPROF_LINUX_CALLPATHS, "--rounds", "300"});
  const std::string session = Session(run);
  hvprof::testing::TempDir dir;
  const std::string file = dir.File("flame.html");
  const CommandResult written = run.ReportOn({session, "--format=html", "-o", file});
  INFO(written.err);
  REQUIRE((written.status == 0 || written.status == 3));
  // On linux a stack starts at its process, as perf's flame graphs do: the fixture's stacks are
  // under "linux_callpaths (PID)", unless --stack-root says otherwise.
  const CommandResult folded_stacks = run.ReportOn({session, "--format=folded"});
  REQUIRE(!folded_stacks.out.empty());
  CHECK(std::regex_search(folded_stacks.out, std::regex(R"(^dom0;linux_callpaths \(\d+\);\[user\];.*callpaths_hot)",
                                                        std::regex::multiline)));
  const CommandResult by_domain = run.ReportOn({session, "--format=folded", "--stack-root=domain"});
  CHECK(std::regex_search(by_domain.out, std::regex(R"(^dom0;\[user\];.*callpaths_hot)", std::regex::multiline)));
  CHECK_FALSE(std::regex_search(by_domain.out, std::regex(R"(^dom0;linux_callpaths)", std::regex::multiline)));
  const hvprof::testing::Page page = hvprof::testing::Open(chromium, file, "");
  hvprof::testing::CheckClean(page);
  CHECK(page.dom.find("data-name=\"linux_callpaths (") != std::string::npos);  // the process's frame
  // Folded, closed: a linux session has its notes (the timer, the host kernel) and, with the
  // libraries built without frame pointers, warnings on its stacks.
  std::smatch folded;
  REQUIRE(std::regex_search(page.dom, folded, std::regex(R"re(<details id="folded-facts"([^>]*)>)re")));
  const std::string tag = folded[1];
  CHECK(tag.find(" open") == std::string::npos);  // closed until clicked
  const int hidden = std::stoi(Attribute(tag, "data-warnings")) + std::stoi(Attribute(tag, "data-notes"));
  CHECK(hidden >= 1);
  const std::regex summary(R"re(<summary[^>]*>(\d+) (warnings?|notes?))re");
  CHECK(std::regex_search(page.dom, summary));

  // The graph's frames, as the page coloured them: the topmost row of pixels in one of their
  // colours is where the graph starts on the screen.
  std::set<uint32_t> frame_colours;
  const std::regex rgb(R"(rgb\((\d+), (\d+), (\d+)\))");
  for (const hvprof::testing::Frame& frame : hvprof::testing::Frames(page.dom)) {
    std::smatch m;
    if (std::regex_search(frame.background, m, rgb)) {
      frame_colours.insert((std::stoul(m[1]) << 16) | (std::stoul(m[2]) << 8) | std::stoul(m[3]));
    }
  }
  REQUIRE(frame_colours.size() >= 3);
  // As an icicle the root frame ("all", the whole width) is the graph's first row.
  const hvprof::testing::Screenshot shot = hvprof::testing::Shoot(chromium, file, "#view=icicle");
  std::optional<uint32_t> graph_top;
  for (uint32_t y = 0; y < shot.height && !graph_top; ++y) {
    uint32_t in_frames = 0;
    for (uint32_t x = 0; x < shot.width; ++x) in_frames += frame_colours.contains(shot.At(x, y)) ? 1 : 0;
    if (in_frames >= shot.width / 2) graph_top = y;
  }
  REQUIRE(graph_top.has_value());
  INFO("the graph starts " << *graph_top << " pixels down a screen of " << shot.height << ", below "
                           << hidden << " folded warnings and notes");
  // Five warnings or notes unfolded took 85 pixels more, and 40% of the screen in all (issue 41).
  CHECK(*graph_top < shot.height * 3 / 10);
}
