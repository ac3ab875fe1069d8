// Reads the ELF headers (build-id, PT_LOAD segments) of the files processes map, off the thread
// that drains perf's rings: a file can be slow to read (a network or FUSE file system its owner
// serves), and the rings must not wait on it. The process table asks, goes on with a guessed
// bias, and takes the answers when it next looks (ProcessTable::SettleImages).
//
// A file is opened through /proc/PID/map_files/START-END while the mapping exists (the file
// the process really mapped), else by its path as OpenUserFile (base/files.h) allows: no link
// as the last component, no FIFO waited on, no device opened, and only a file that root or the
// process's own user owns, under directories only they can change.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hvprof/linux/elf_info.h"

namespace hvprof::linux_host {

class ImageReader {
 public:
  struct Request {
    std::string key;  // the process table's ELF cache key
    std::string proc_root;
    uint32_t pid = 0;
    uint64_t start = 0;
    uint64_t end = 0;
    std::string path;
  };
  struct Answer {
    std::string key;
    bool ok = false;
    ElfInfo info;
  };
  struct Limits {
    size_t max_queued = 4096;  // requests waiting; more are refused (the bias stays guessed)
    // A read that takes longer is given up on: its thread is left to finish alone (its answer
    // is still taken), and a new one serves the queue; at most max_stuck such threads.
    std::chrono::milliseconds stuck_after{5000};
    size_t max_stuck = 4;
  };

  using ReadFunction = std::function<Answer(const Request&)>;

  ImageReader();
  // `read`: how a request is answered (Read; tests give a read they hold up).
  explicit ImageReader(Limits limits, ReadFunction read = Read);
  ~ImageReader();
  ImageReader(const ImageReader&) = delete;
  ImageReader& operator=(const ImageReader&) = delete;

  // Queues a request without waiting; false when the queue is full or every thread is stuck.
  bool Submit(Request request);
  // The answers ready now, without waiting.
  std::vector<Answer> Take();
  // Whether answers are ready (cheap: for the ring thread's loop).
  bool HasAnswers() const;
  // Waits until nothing is queued or being read (or `timeout` passes): whether it got there.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Requests given up on: refused when full, or left with a thread that got stuck.
  uint64_t dropped() const;

  // Reads one request's file where the calling thread is (the worker's own step; for tests).
  static Answer Read(const Request& request);

 private:
  struct Lane;
  struct Shared;
  static void Serve(const std::shared_ptr<Shared>& shared, Lane* lane);
  void StartLane();
  void Unstick();
  std::shared_ptr<Shared> shared_;
  Limits limits_;
};

}  // namespace hvprof::linux_host
