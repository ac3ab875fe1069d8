#include "hvprof/base/progress.h"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

namespace hvprof {

namespace {

// HVPROF_PROGRESS_DELAY_MS replaces the delay (tests show the line at once with 0).
std::chrono::milliseconds DelayFor(std::chrono::milliseconds delay) {
  const char* text = std::getenv("HVPROF_PROGRESS_DELAY_MS");
  if (text == nullptr || *text == '\0') return delay;
  char* end = nullptr;
  const long long ms = std::strtoll(text, &end, 10);
  return *end == '\0' && ms >= 0 ? std::chrono::milliseconds(ms) : delay;
}

void WriteAll(int fd, const std::string& text) {
  size_t at = 0;
  while (at < text.size()) {
    const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
    if (n <= 0) return;  // a progress line is not worth failing or retrying for
    at += static_cast<size_t>(n);
  }
}

}  // namespace

Progress::Progress(std::string what, uint64_t total) : Progress(std::move(what), total, Options{}) {}

Progress::Progress(std::string what, uint64_t total, Options options)
    : what_(std::move(what)), total_(total), options_(options), enabled_(::isatty(options.fd) == 1),
      start_(std::chrono::steady_clock::now()) {
  options_.delay = DelayFor(options_.delay);
}

Progress::~Progress() { Done(); }

void Progress::Set(uint64_t done) {
  done_ = done;
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < options_.delay) return;
  if (drawn_ && now - last_draw_ < options_.interval) return;
  last_draw_ = now;
  Draw();
}

void Progress::Rename(std::string what, uint64_t total) {
  what_ = std::move(what);
  total_ = total;
  done_ = 0;
  // A new phase is drawn at once (once the delay has passed), whenever the last line was.
  if (!enabled_ || finished_ || std::chrono::steady_clock::now() - start_ < options_.delay) return;
  last_draw_ = std::chrono::steady_clock::now();
  Draw();
}

void Progress::Draw() {
  std::string line = total_ != 0 ? fmt::format("{}: {}/{}", what_, done_, total_) : fmt::format("{}: {}", what_, done_);
  const size_t width = line.size();
  // Spaces over what is left of a longer line drawn before.
  if (width < width_) line.append(width_ - width, ' ');
  line.insert(line.begin(), '\r');
  WriteAll(options_.fd, line);
  width_ = width;
  drawn_ = true;
}

void Progress::Done() {
  if (finished_) return;
  finished_ = true;
  if (!drawn_) return;
  // Built in place: GCC 12 at -O3 warns falsely (-Wrestrict) about "literal" + std::string.
  std::string blank(width_ + 2, ' ');
  blank.front() = '\r';
  blank.back() = '\r';
  WriteAll(options_.fd, blank);
}

}  // namespace hvprof
