// The scheduling records of a session (sched.hvs, issue 21): runstate changes, wake-ups,
// migrations and records-lost marks, as the scheduling rings carried them, in the chunks of
// chunk_file.h (checksummed, each decodable alone; a crash loses at most the chunk being
// written). A session that recorded no scheduling has no sched.hvs, so older readers and
// sample-only sessions are untouched. The byte format is in docs/session-format.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "hvprof/base/result.h"
#include "hvprof/facts/sample.h"
#include "hvprof/store/chunk_file.h"

namespace hvprof::store {

inline constexpr const char* kSchedFile = "sched.hvs";
inline constexpr char kSchedFileMagic[8] = {'H', 'V', 'S', 'C', 'H', 'E', 'D', '1'};
inline constexpr uint32_t kSchedFileVersion = 1;
inline constexpr uint32_t kSchedChunkMagic = 0x53435648;  // "HVCS"

// The values of the scheduling rings' ABI (hvpmu/abi/ring.h: SchedType, Runstate, kSched*
// flags), which the store keeps as numbers: it sits below the engine's headers.
inline constexpr uint8_t kSchedRunstate = 1;  // the subject went from old_state to new_state
inline constexpr uint8_t kSchedWakeup = 2;    // the subject was woken (by other_* when known)
inline constexpr uint8_t kSchedMigrate = 3;   // the subject moved from from_pcpu to to_pcpu
inline constexpr uint8_t kSchedLost = 4;      // `count` records were lost on pcpu before this one
inline constexpr uint8_t kMaxStoredSchedType = 4;
inline constexpr uint8_t kSchedFlagTask = 1u << 0;   // pid/tid name the subject
inline constexpr uint8_t kSchedFlagOther = 1u << 1;  // other_* name someone (the waker)
inline constexpr uint8_t kMaxStoredState = 15;       // states above are kept as 15 (unknown)

// One scheduling record as the store keeps it: the fields of a ring's SchedRecord that carry
// meaning. What a record's flags and type say is not there is not kept, and reads back as the
// defaults below (pid/tid without kSchedFlagTask, other_* without kSchedFlagOther, count and
// aux but for kSchedLost).
struct StoredSched {
  uint8_t type = 0;  // kSched*: 1 .. kMaxStoredSchedType
  uint8_t flags = 0;
  uint16_t pcpu = 0;  // whose scheduler recorded it
  uint8_t old_state = 0;
  uint8_t new_state = 0;
  uint64_t time_ns = 0;
  uint16_t domain = 0;
  uint16_t vcpu = 0;
  uint32_t pid = kNoPid;
  uint32_t tid = kNoPid;
  uint16_t other_domain = 0;
  uint16_t other_vcpu = 0;
  uint32_t other_pid = kNoPid;
  uint32_t other_tid = kNoPid;
  uint16_t from_pcpu = kUnknownPcpu;
  uint16_t to_pcpu = kUnknownPcpu;
  uint64_t count = 0;  // kSchedLost: records lost
  uint64_t aux = 0;    // kSchedLost: the time of the first of them
  bool operator==(const StoredSched&) const = default;
};

struct SchedWriterStats : ChunkWriterStats {
  uint64_t unknown_type = 0;  // records of a type the file cannot hold: not written
};

class SchedWriter : public RecordFileWriter {
 public:
  // Opens the sched.hvs of the session directory `directory` for appending: creates it, or
  // continues it when it is this session's (numbering on after its chunks, a torn tail cut
  // off and counted in stats().torn_bytes); a file of another session is refused.
  static Result<SchedWriter> Open(const std::string& directory, std::span<const uint8_t, 16> session_id);

  void Add(const StoredSched& record);
  // Writes the chunk in progress (about every second): a crash of the agent loses at most
  // what came since. Not synced.
  Result<void> Flush() { return chunks_.Flush(false); }
  // Writes the chunk in progress and syncs the file (dump, stop). A chunk that cannot be
  // written is cut off and its records counted (stats().failed), as for samples.
  Result<void> Dump() { return chunks_.Flush(true); }
  SchedWriterStats stats() const;
  const std::string& path() const { return path_; }

 private:
  SchedWriter(std::string path, ChunkWriter chunks) : RecordFileWriter(std::move(chunks)), path_(std::move(path)) {}

  std::string path_;
  uint64_t unknown_type_ = 0;
  // Delta-encoding state, reset at each chunk so chunks decode on their own.
  StoredSched previous_;
};

struct SchedReadSummary : ChunkReadSummary {
  bool present = false;  // the session has a sched.hvs
};

// Reads every intact chunk of the sched.hvs at `path`, calling `on_record` for each record in
// file order (records of several pCPUs interleave: time may go back from one to the next). A
// chunk that does not decode whole (an unknown type, a field out of range) is damaged and none
// of its records is delivered; damaged, torn, foreign and repeated chunks are reported in the
// summary and skipped, and reading goes on. `session_id` is session.json's (32 hex digits; empty:
// the file header's). A missing file is no error: `present` is false and nothing is read. Fails
// when the file cannot be read, or belongs to another session (nothing is delivered then).
Result<SchedReadSummary> ReadSchedFile(const std::string& path, std::string_view session_id,
                                       const std::function<void(const StoredSched&)>& on_record);
// The same over bytes in memory (the fuzzer, tests): a file of another session is a problem,
// and its chunks foreign.
SchedReadSummary ReadSched(std::span<const uint8_t> bytes, const std::function<void(const StoredSched&)>& on_record,
                           std::optional<std::span<const uint8_t, 16>> session_id = std::nullopt);

// Whether the session directory `directory` has scheduling records (a sched.hvs).
bool HasSched(const std::string& directory);

}  // namespace hvprof::store
