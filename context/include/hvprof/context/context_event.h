// What a platform knows of the processes its samples run in, as a stream of events with their
// times: a process born under a pid (fork, or exec: a new image under the same pid is a new
// process), renamed, mapping a file (or anonymous memory) at an address, exiting; and the threads
// that scheduling records name. hvprof-hv's hosts make them (on linux, from perf's FORK, COMM,
// MMAP2 and EXIT records); the agent receives them over hvprof-hv's protocol and keeps them in the
// session's context.hvc (store/context_file.h), in this one encoding.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace hvprof::context {

enum class ContextKind : uint8_t {
  kImage = 1,    // image: its number, path and build-id (the file form: before its first mapping)
  kProcess = 2,  // a process of (domain, pid) is born at time_ns, named comm
  kMapping = 3,  // the current process of (domain, pid) maps [start, end) of a file from time_ns
  kComm = 4,     // the current process of (domain, pid) is named comm from time_ns
  kExit = 5,     // the current process of (domain, pid) exits at time_ns
  kTask = 6,     // thread tid of (domain, pid) is named comm (scheduling records name it)
};
inline constexpr uint8_t kMaxContextKind = 6;

// One event of a process's life. The fields each kind uses are in ContextKind's comments. A
// mapping names its file by path and build-id as the platform sends it (image 0), and by the
// image's number in the file (path and build-id empty).
struct ContextEvent {
  ContextKind kind = ContextKind::kProcess;
  uint16_t domain = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t time_ns = 0;
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t bias = 0;  // symbolizer bias: runtime address = image address + bias
  uint32_t image = 0;
  std::string path;
  std::string build_id;
  std::string comm;
  bool operator==(const ContextEvent&) const = default;
};

// Events as a platform hands them on, from a point in its sequence: what hvprof-hv's
// ContextEvents reply carries, and what the linux process table, the simulated machine and an
// agent's link each give. `first` is events[0]'s number (above what was asked for when some were
// lost untaken); `next` is what to ask from next time. `more`: the batch stopped at its bound
// with events already waiting after `next`; ask again now. Without it the asker has caught up
// with what the platform had when it answered: events that come after belong to samples not yet
// drained, and a caller that kept asking while events came would chase a busy host's forks.
struct ContextEventBatch {
  uint64_t first = 0;
  uint64_t next = 0;
  bool more = false;
  std::vector<ContextEvent> events;
};

// The one encoding of events, for the file's chunks and for what the platform sends the agent:
// appends `event` to `out`.
void EncodeContextEvent(const ContextEvent& event, std::string& out);
// Decodes the events of `bytes` in order; false at the first malformed one (those before it are
// delivered).
bool DecodeContextEvents(std::span<const uint8_t> bytes, const std::function<void(ContextEvent&&)>& on_event,
                         uint64_t* decoded = nullptr);

}  // namespace hvprof::context
