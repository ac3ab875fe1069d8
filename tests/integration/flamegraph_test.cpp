// The HTML flame graph in a real browser: headless Chromium, with the network cut off, opens
// the page `hvprof-report --format=html` wrote for a sim session, without a console message,
// and draws the frames the folded output counts. Zoom, search and orientation are driven
// through the page's URL fragment, and a domain named like markup stays text.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "browser_support.h"
#include "host_harness.h"
#include "hvprof/base/escape.h"
#include "hvprof/base/files.h"
#include "programs.h"
#include "skip.h"
#include "stacks_support.h"
#include "temp_dir.h"

using hvprof::testing::CheckClean;
using hvprof::testing::Chromium;
using hvprof::testing::CommandResult;
using hvprof::testing::Frame;
using hvprof::testing::Frames;
using hvprof::testing::Open;
using hvprof::testing::Page;
using hvprof::testing::Host;
using hvprof::testing::ParseFolded;
using hvprof::testing::RunProgram;
using hvprof::testing::SplitFrames;
using hvprof::testing::TempDir;
using Json = nlohmann::json;

namespace {

constexpr const char* kMarkupName = "web<svg\fonload=document.body.dataset.injected=1>";

Json Scenario() {
  Json scenario = hvprof::testing::DefaultScenario();
  // A guest's name is the guest's choice: this one is markup, and must be shown as text.
  for (Json& domain : scenario["domains"]) {
    if (domain["id"] == 2) domain["name"] = kMarkupName;
  }
  return scenario;
}

}  // namespace

TEST_CASE("the HTML flame graph opens offline in headless Chromium and draws what folded counts",
          "[report][stacks][browser]") {
  const std::string chromium = Chromium();
  if (chromium.empty() && hvprof::testing::SkipTest("needs Chromium (Debian package chromium) to open the page")) {
    return;
  }
  Host host(Scenario());
  hvprof::testing::ProfileWithChains(host, 16);

  const std::string file = host.session_root() + "/../flame.html";
  const CommandResult written = host.Report({"--format=html", "-o", file});
  INFO(written.err);
  REQUIRE(written.status == 0);
  const auto read = hvprof::ReadFileToString(file);
  REQUIRE(read.has_value());
  const std::string& html = read.value();
  // Nothing in the file points anywhere: no address, no element that loads one.
  CHECK_FALSE(std::regex_search(html, std::regex(R"(\b(https?|ftp|wss?):)", std::regex::icase)));
  for (const char* loader : {"src=", "href=", "<link", "<img", "<iframe", "@import", "url("}) {
    INFO(loader);
    CHECK(html.find(loader) == std::string::npos);
  }
  // The markup the guest chose for its name is data in the file, never a tag.
  CHECK(html.find("<svg") == std::string::npos);

  const auto folded = ParseFolded(host.Report({"--format=folded"}).out);
  std::map<std::string, uint64_t> roots, dom0_modes;
  uint64_t total = 0;
  for (const auto& [stack, count] : folded) {
    const auto frames = SplitFrames(stack);
    REQUIRE(frames.size() >= 2);
    roots[frames[0]] += count;
    if (frames[0] == "dom0") dom0_modes[frames[1]] += count;
    total += count;
  }
  REQUIRE(total > 10000);
  REQUIRE(roots.size() >= 3);

  const Page page = Open(chromium, file, "");
  CheckClean(page);
  CHECK(page.dom.find("data-injected") == std::string::npos);
  const std::vector<Frame> frames = Frames(page.dom);
  REQUIRE(frames.size() > 20);
  std::map<std::string, uint64_t> drawn_roots, drawn_dom0_modes;
  bool under_dom0 = false;
  for (const Frame& frame : frames) {
    if (frame.depth == 0) {
      CHECK(frame.name == "all");
      CHECK(frame.count == total);
    }
    if (frame.depth == 1) {
      // As folded writes names: escaped for a terminal (the page shows them as they are).
      drawn_roots[hvprof::EscapeForTerminal(frame.name)] = frame.count;
      under_dom0 = frame.name == "dom0";
    }
    if (frame.depth == 2 && under_dom0) drawn_dom0_modes[frame.name] = frame.count;
  }
  // The root's children: every one folded counts is drawn (none here is too narrow to draw,
  // the narrowest drawn is half a pixel), with the same count; the guest's markup name is text.
  for (const auto& [name, count] : roots) {
    INFO(name);
    if (count * 1000 < total) continue;
    REQUIRE(drawn_roots.count(name) == 1);
    CHECK(drawn_roots[name] == count);
  }
  for (const auto& [name, count] : drawn_roots) {
    INFO(name);
    CHECK(roots[name] == count);
  }
  CHECK(drawn_roots.count(hvprof::EscapeForTerminal(std::string("dom2 (") + kMarkupName + ")")) == 1);
  CHECK(page.dom.find(std::string("data-name=\"dom2 (web&lt;svg\fonload=document.body.dataset.injected=1&gt;)\"")) !=
        std::string::npos);
  CHECK(drawn_dom0_modes == dom0_modes);

  // Searched, zoomed into dom0's user mode, as an icicle: the status line counts the samples
  // under the zoom whose stacks have a matching frame, each once.
  uint64_t matched = 0, zoomed = 0;
  for (const auto& [stack, count] : folded) {
    if (stack.rfind("dom0;[user];", 0) != 0) continue;
    zoomed += count;
    const auto names = SplitFrames(stack);
    if (std::any_of(names.begin() + 2, names.end(), [](const std::string& name) {
          return std::regex_search(name, std::regex("lzma", std::regex::icase));
        })) {
      matched += count;
    }
  }
  REQUIRE(matched > 0);
  const Page searched = Open(chromium, file, "#zoom=dom0;%5Buser%5D&search=LZMA&view=icicle");
  CheckClean(searched);
  const std::string status = fmt::format("Matched: {} samples", matched);
  INFO(searched.dom.substr(0, 3000));
  CHECK(searched.dom.find(status) != std::string::npos);
  CHECK(searched.dom.find(fmt::format("({} samples, ", zoomed)) != std::string::npos);
  bool saw_focus = false;
  for (const Frame& frame : Frames(searched.dom)) {
    INFO(frame.name);
    // Icicle: the root is at the top, each level one row lower.
    CHECK(frame.top == frame.depth * 16);
    if (frame.depth < 2) CHECK(frame.ancestor);
    if (frame.depth == 2) {
      CHECK(frame.name == "[user]");
      CHECK(frame.count == zoomed);
      CHECK_FALSE(frame.ancestor);
      saw_focus = true;
    }
    // Under the zoom, only dom0's user stacks are drawn.
    if (frame.depth > 2) CHECK(frame.count <= zoomed);
  }
  CHECK(saw_focus);
}
