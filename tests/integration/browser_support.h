// Headless Chromium for the tests of hvprof's HTML pages: the page opened offline (no network
// namespace where one can be made, and no proxy or name resolution either way), its DOM after
// the script ran, the frames it drew and the console it left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hvprof::testing {

// The browser: $HVPROF_CHROMIUM, or Debian's; empty when there is none.
std::string Chromium();

// The DOM after the page's script ran, and what the browser logged.
struct Page {
  std::string dom;
  std::string log;
};
Page Open(const std::string& chromium, const std::string& file, const std::string& fragment);

struct Frame {
  std::string name;
  uint64_t count = 0;
  int depth = 0;
  bool ancestor = false;
  int top = 0;
  std::string background;  // the frame's style's background, as the browser wrote it
};
std::vector<Frame> Frames(const std::string& dom);

// No console message, the page finished drawing, and its error box is empty.
void CheckClean(const Page& page);

}  // namespace hvprof::testing
