// The processes a session's user-mode samples ran in (context.hvc): which process held a pid at a
// given time, what it had mapped where, and the files those mappings were of. The platform (on
// linux, hvprof-hv's process table, from perf's FORK, COMM, MMAP2 and EXIT records) tells the agent
// what it learns as a stream of events with their times; the agent writes them as they come, in
// chunks (chunk_file.h's framing), each distinct file once (an image record) and every mapping by
// the image's number. So a session of hours on a host that starts processes all day holds its
// context in a file that grows with what was mapped and ran, read in one pass, and session.json
// stays metadata. docs/session-format.md has the bytes.
//
// A process is one run of a program under a pid: from its birth (fork, or exec: a new image for
// the same pid is a new process) to its exit. A sample of (domain, pid) at time t belongs to the
// last process of that pid born at or before t; a mapping of it holds an address from the mapping's
// time on, until a later mapping over the same addresses (ContextIndex); a mapping told again
// with the same time (the platform's answer for a file it first guessed) takes the first's place.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/context/context_event.h"
#include "hvprof/store/chunk_file.h"

namespace hvprof::store {

inline constexpr const char* kContextFile = "context.hvc";
inline constexpr char kContextFileMagic[8] = {'H', 'V', 'P', 'R', 'O', 'F', 'C', '1'};
inline constexpr uint32_t kContextFileVersion = 1;
inline constexpr uint32_t kContextChunkMagic = 0x43435648;  // "HVCC"

using context::ContextEvent;
using context::ContextKind;

// Where an address of a process's user space was: the image's number and the address in the
// image (what the symbolizer looks up: runtime address - bias).
struct ResolvedAddress {
  uint32_t image = 0;
  uint64_t address = 0;
};

struct ContextImage {
  uint32_t id = 0;
  std::string path;
  std::string build_id;
};

// The processes of a stream of events, as of any time: which process of a pid was alive, what it
// had mapped, its name. Fed in the order the events were made.
class ContextIndex {
 public:
  // Applies one event. A mapping with a path (the platform's form) is numbered here: Apply returns
  // its image's number and whether the image is new (the file writer then writes the image first);
  // one with an image number (the file's form) refers to an image applied before. Returns 0 for
  // other events.
  struct Applied {
    uint32_t image = 0;
    bool new_image = false;
  };
  Applied Apply(const ContextEvent& event);

  // The file mapping of (domain, pid)'s process at `time_ns` that holds `ip`; nothing when none
  // does (anonymous memory, a JIT's code) or the process is unknown.
  std::optional<ResolvedAddress> Resolve(uint16_t domain, uint32_t pid, uint64_t time_ns, uint64_t ip) const;
  // The path of the mapping that holds `ip` then, whatever it is (a file, "[anon]", "//anon",
  // "/memfd:..."), or nothing.
  const std::string* MappingPath(uint16_t domain, uint32_t pid, uint64_t time_ns, uint64_t ip) const;
  // The mapping that holds `ip` then, whatever it is: its file's image (0 when it names no file:
  // "/memfd:...", a device, SysV shared memory, a JIT's code often) and the address in it, its
  // range, when it was mapped and its path. Resolve and MappingPath are its two halves.
  struct Located {
    uint32_t image = 0;
    uint64_t address = 0;  // ip - bias
    uint64_t start = 0;
    uint64_t end = 0;
    uint64_t time_ns = 0;
    const std::string* path = nullptr;
  };
  std::optional<Located> Locate(uint16_t domain, uint32_t pid, uint64_t time_ns, uint64_t ip) const;
  // The name of (domain, pid)'s process at `time_ns` (its last name before then), or nothing.
  const std::string* Comm(uint16_t domain, uint32_t pid, uint64_t time_ns) const;
  // Whether the stream told any process of the domain (a platform that knows none leaves user
  // samples unresolved).
  bool HasDomain(uint16_t domain) const;
  // The domains it told processes of, in order.
  std::vector<uint16_t> Domains() const;
  // Every process of `domain` (pid and last name), in order of pid, each pid once: its latest.
  std::vector<std::pair<uint32_t, std::string>> Processes(uint16_t domain) const;
  // The executables of `domain`'s processes: each one's first file mapping (what it exec'd).
  std::set<std::string> MainImages(uint16_t domain) const;
  // The tasks kTask named, per domain: (pid, tid) -> comm.
  const std::map<std::pair<uint32_t, uint32_t>, std::string>* Tasks(uint16_t domain) const;

  const ContextImage* image(uint32_t id) const { return id >= 1 && id <= images_.size() ? &images_[id - 1] : nullptr; }
  const std::vector<ContextImage>& images() const { return images_; }

  // Forgets the processes that exited before `before`: what a long run's agent no longer needs
  // once their samples are counted. (A live process keeps every mapping it made.)
  void Prune(uint64_t before);
  // The processes the stream told, those pruned included.
  size_t processes() const;
  size_t mappings() const;

 private:
  struct Mapping {
    uint64_t start = 0;
    uint64_t end = 0;
    uint64_t bias = 0;
    uint64_t time_ns = 0;
    uint32_t image = 0;       // 0: not a file (its path is in other_paths_)
    uint32_t other_path = 0;  // for image 0: index into other_paths_
  };
  struct Process {
    uint64_t birth_ns = 0;
    uint64_t exit_ns = UINT64_MAX;
    std::vector<std::pair<uint64_t, std::string>> comms;  // (from, name), in time order
    std::vector<Mapping> mappings;                        // in the order they were made
  };
  struct Domain {
    std::unordered_map<uint32_t, std::vector<Process>> by_pid;  // each pid's processes by birth
    size_t told = 0;  // processes added to by_pid, those Prune forgot included
    std::map<std::pair<uint32_t, uint32_t>, std::string> tasks;
  };
  const Process* Find(uint16_t domain, uint32_t pid, uint64_t time_ns) const;
  Process* Current(uint16_t domain, uint32_t pid);
  Process* At(uint16_t domain, uint32_t pid, uint64_t time_ns);  // Find, to change
  const Mapping* FindMapping(const Process& process, uint64_t time_ns, uint64_t ip) const;
  uint32_t Intern(const std::string& path, const std::string& build_id, bool* added);

  std::unordered_map<uint16_t, Domain> domains_;
  std::vector<ContextImage> images_;
  std::map<std::pair<std::string, std::string>, uint32_t> image_ids_;
  std::vector<std::string> other_paths_;
  std::unordered_map<std::string, uint32_t> other_path_ids_;
};

// Appends events to a session's context.hvc (chunk_file.h's framing), each image once.
class ContextWriter : public RecordFileWriter {
 public:
  // Opens (or continues) the file; an existing file's events are applied to `index` (so that the
  // images keep their numbers).
  static Result<ContextWriter> Open(const std::string& directory, std::span<const uint8_t, 16> session_id,
                                    ContextIndex& index);
  // Applies `event` (the platform's form) to `index` and writes it in the file's form.
  void Add(const ContextEvent& event, ContextIndex& index);
  Result<void> Flush(bool sync) { return chunks_.Flush(sync); }
  uint64_t events() const { return chunks_.stats().records; }

 private:
  explicit ContextWriter(ChunkWriter chunks) : RecordFileWriter(std::move(chunks)) {}
  void Write(const ContextEvent& event);
  std::string scratch_;
};

struct ContextReadSummary : ChunkReadSummary {
  bool present = false;  // the session has a context.hvc
};

// Reads every intact chunk of a context.hvc into `index` (damaged ones are reported and skipped).
// A missing file is no error (`present` false).
Result<ContextReadSummary> ReadContextFile(const std::string& path, std::string_view session_id, ContextIndex& index);
// The processes a session from before context.hvc listed in session.json (each alive the whole
// session, at its last mappings), applied to `index`.
struct SessionMetadata;
void ContextFromMetadata(const SessionMetadata& metadata, ContextIndex& index);

// Reads every intact chunk's events in the platform's form (a mapping names its file by path and
// build-id; the file's image records are not delivered): what a tool that rewrites a session's
// context reads (a test's edit, a copy).
Result<ContextReadSummary> ReadContextEvents(const std::string& path, std::string_view session_id,
                                             const std::function<void(ContextEvent&&)>& on_event);
// The same as ReadContextFile over bytes in memory (the fuzzer, tests).
ContextReadSummary ReadContext(std::span<const uint8_t> bytes, ContextIndex& index);

}  // namespace hvprof::store
