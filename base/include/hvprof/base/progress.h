// A progress line on standard error for work that can take more than a couple of seconds:
//
//   Progress progress("symbolizing", images.size());
//   for (...) { ...; progress.Advance(); }      // or progress.Set(done)
//   // the line is erased when `progress` goes (or at Done())
//
// It prints "\r<what>: N/M" (or "<what>: N" when the total is unknown, 0), only when standard
// error is a terminal, only once `delay` has passed since it was made (quick work prints
// nothing), at most every `interval`, and erases itself at the end so what follows starts on a
// clean line. Not thread-safe: one thread advances it. The environment variable
// HVPROF_PROGRESS_DELAY_MS replaces the delay (tests set 0 to see the line at once).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace hvprof {

class Progress {
 public:
  struct Options {
    std::chrono::milliseconds delay{2000};     // nothing is shown before this
    std::chrono::milliseconds interval{250};   // at most one redraw per interval
    int fd = 2;                                // where to draw (a terminal, or nothing is drawn)
  };
  Progress(std::string what, uint64_t total);
  Progress(std::string what, uint64_t total, Options options);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Advance(uint64_t by = 1) { Set(done_ + by); }
  void Set(uint64_t done);  // draws if it is time to
  // Changes what is being done (a new phase, from 0), keeping the line; drawn at once.
  void Rename(std::string what, uint64_t total);
  // Erases the line (if one was drawn); later calls draw nothing.
  void Done();
  bool drawn() const { return drawn_; }

 private:
  void Draw();
  std::string what_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  Options options_;
  bool enabled_ = false;
  bool finished_ = false;
  bool drawn_ = false;
  size_t width_ = 0;  // of the last line drawn, to erase it
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace hvprof
