#include "browser_support.h"

#include <unistd.h>

#include <regex>
#include <sstream>

#include <catch2/catch.hpp>

#include "programs.h"
#include "temp_dir.h"

namespace hvprof::testing {

std::string Chromium() {
  if (const char* path = std::getenv("HVPROF_CHROMIUM")) return path;
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

Page Open(const std::string& chromium, const std::string& file, const std::string& fragment) {
  TempDir profile;
  std::vector<std::string> argv;
  // No network at all where a network namespace can be made; the browser is also told to use a
  // proxy that does not exist and to resolve no name, so nothing leaves even without one.
  if (RunProgram({"/usr/bin/unshare", "-n", "/bin/true"}).status == 0) argv = {"/usr/bin/unshare", "-n"};
  for (const std::string& arg :
       {std::string("/usr/bin/timeout"), std::string("120"), chromium, std::string("--headless"), std::string("--no-sandbox"),
        std::string("--disable-gpu"), std::string("--no-first-run"), "--user-data-dir=" + profile.path(),
        std::string("--proxy-server=127.0.0.1:9"), std::string("--host-resolver-rules=MAP * ~NOTFOUND"),
        std::string("--enable-logging=stderr"), std::string("--log-level=0"), std::string("--window-size=1200,900"),
        std::string("--dump-dom"), "file://" + file + fragment}) {
    argv.push_back(arg);
  }
  const CommandResult result = RunProgram(argv);
  INFO(result.err.substr(0, 4000));
  REQUIRE(result.status == 0);
  return {result.out, result.err};
}

namespace {

std::string Unescape(std::string text) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}}) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  }
  return text;
}

}  // namespace

std::vector<Frame> Frames(const std::string& dom) {
  static const std::regex frame(
      R"re(<div class="frame( ancestor)?( match)?" data-name="([^"]*)" data-count="(\d+)" data-depth="(\d+)" style="[^"]*top: (\d+)px;[^"]*background: ([^;"]*))re");
  std::vector<Frame> frames;
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), frame); it != std::sregex_iterator(); ++it) {
    frames.push_back({Unescape((*it)[3]), std::stoull((*it)[4]), std::stoi((*it)[5]), (*it)[1].matched,
                      std::stoi((*it)[6]), (*it)[7]});
  }
  return frames;
}

void CheckClean(const Page& page) {
  // Chromium logs every console message, error and refused load (the page's policy refuses
  // any) as "CONSOLE"; the page logs none of its own.
  std::istringstream log(page.log);
  std::string console;
  for (std::string line; std::getline(log, line);) {
    if (line.find(":CONSOLE") != std::string::npos) console += line + "\n";
  }
  INFO("console messages:\n" << console);
  CHECK(console.empty());
  CHECK(page.dom.find("data-ready=\"true\"") != std::string::npos);
  CHECK(page.dom.find("<pre id=\"errors\" hidden=\"\"></pre>") != std::string::npos);
}


}  // namespace hvprof::testing
