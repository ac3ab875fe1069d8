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

// Text or an attribute's value as Chromium serialized it, its entities decoded.
std::string Unescape(std::string text);

// No console message, the page finished drawing, and its error box is empty.
void CheckClean(const Page& page);

// What the page looks like: a screenshot of its first screen (`width` x `height` CSS pixels, one
// pixel each), read with libpng.
struct Screenshot {
  uint32_t width = 0;
  uint32_t height = 0;
  std::vector<uint8_t> rgba;  // row by row, 4 bytes a pixel
  // The pixel at (x, y) as 0xRRGGBB.
  uint32_t At(uint32_t x, uint32_t y) const {
    const uint8_t* p = &rgba[(static_cast<size_t>(y) * width + x) * 4];
    return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
  }
};
Screenshot Shoot(const std::string& chromium, const std::string& file, const std::string& fragment,
                 uint32_t width = 1200, uint32_t height = 900);

}  // namespace hvprof::testing
