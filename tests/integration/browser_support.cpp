#include "browser_support.h"

#include <unistd.h>

#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <png.h>

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

namespace {

// The browser's command line for `file` offline, doing `what` (--dump-dom, --screenshot=PATH).
std::vector<std::string> BrowserCommand(const std::string& chromium, const std::string& profile, const std::string& url,
                                        const std::string& window, const std::string& what) {
  std::vector<std::string> argv;
  // No network at all where a network namespace can be made; the browser is also told to use a
  // proxy that does not exist and to resolve no name, so nothing leaves even without one.
  if (RunProgram({"/usr/bin/unshare", "-n", "/bin/true"}).status == 0) argv = {"/usr/bin/unshare", "-n"};
  for (const std::string& arg :
       {std::string("/usr/bin/timeout"), std::string("120"), chromium, std::string("--headless"), std::string("--no-sandbox"),
        std::string("--disable-gpu"), std::string("--no-first-run"), "--user-data-dir=" + profile,
        std::string("--proxy-server=127.0.0.1:9"), std::string("--host-resolver-rules=MAP * ~NOTFOUND"),
        std::string("--enable-logging=stderr"), std::string("--log-level=0"), "--window-size=" + window,
        std::string("--hide-scrollbars"), std::string("--force-device-scale-factor=1"), what, url}) {
    argv.push_back(arg);
  }
  return argv;
}

}  // namespace

Page Open(const std::string& chromium, const std::string& file, const std::string& fragment) {
  TempDir profile;
  const CommandResult result =
      RunProgram(BrowserCommand(chromium, profile.path(), "file://" + file + fragment, "1200,900", "--dump-dom"));
  INFO(result.err.substr(0, 4000));
  REQUIRE(result.status == 0);
  return {result.out, result.err};
}

Screenshot Shoot(const std::string& chromium, const std::string& file, const std::string& fragment, uint32_t width,
                 uint32_t height) {
  TempDir profile;
  const std::string png = profile.File("screen.png");
  const CommandResult result = RunProgram(BrowserCommand(chromium, profile.path(), "file://" + file + fragment,
                                                         fmt::format("{},{}", width, height), "--screenshot=" + png));
  INFO(result.err.substr(0, 4000));
  REQUIRE(result.status == 0);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&image, png.c_str()) != 0);
  image.format = PNG_FORMAT_RGBA;
  Screenshot shot;
  shot.width = image.width;
  shot.height = image.height;
  shot.rgba.resize(PNG_IMAGE_SIZE(image));
  const bool read = png_image_finish_read(&image, nullptr, shot.rgba.data(), 0, nullptr) != 0;
  INFO(image.message);
  png_image_free(&image);
  REQUIRE(read);
  REQUIRE(shot.width == width);
  REQUIRE(shot.height == height);
  return shot;
}

std::string Unescape(std::string text) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&nbsp;", "\u00a0"}, {"&amp;", "&"}}) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  }
  return text;
}

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
