// A session directory: session.json (what was profiled, how, and what was lost), samples.hvs
// (raw samples, samples_file.h), aggregate.hva (sample counts per address, written at dump and
// stop) and, when scheduling was recorded, sched.hvs (sched_file.h). docs/session-format.md
// describes them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/base/json_fields.h"
#include "hvprof/base/result.h"
#include "hvprof/context/platform_stats.h"
#include "hvprof/facts/sample.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/sched_file.h"
#include "hvprof/store/stack_counter.h"

namespace hvprof::store {

inline constexpr int kSessionFormatVersion = 1;
inline constexpr const char* kMetadataFile = "session.json";
inline constexpr const char* kSamplesFile = "samples.hvs";
inline constexpr const char* kAggregateFile = "aggregate.hva";

struct EventRecord {
  uint32_t counter = 0;          // logical counter: the `event` field of samples
  std::string name;              // CPU_CLK_UNHALTED
  uint16_t code = 0;
  uint8_t unit_mask = 0;
  std::string unit_mask_name;
  uint64_t count = 0;            // events per sample
  bool kernel = true;
  bool user = true;
  // What took the samples where no counter overflowed ("Linux's cpu-clock timer", "the
  // engine's timer interrupt"); empty for a hardware counter (and in sessions before it).
  std::string sampled_by;
};

struct MappingRecord {
  std::string path;
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t bias = 0;
  std::string build_id;
};

// Whether a mapping's path could be an image on disk: not "/memfd:...", "/SYSV...", a device,
// or a file deleted since it was mapped.
bool MappingNamesAFile(std::string_view path);

struct ProcessRecord {
  uint32_t pid = 0;
  std::string comm;
  std::vector<MappingRecord> mappings;
};

// An image the session needs for symbolization, with the build-id seen at profiling time.
struct ImageRecord {
  std::string role;    // "hypervisor", "kernel", "passive-kernel"
  std::optional<uint16_t> domain;  // for kernels
  std::string path;
  std::string format;  // "elf", "kallsyms", "system_map"
  std::string build_id;
  uint64_t bias = 0;   // KASLR offset / load bias
};

// A copy the agent kept of what a JIT runtime said of its code (a perf map or a jitdump), so
// that the report names that code after the process and its file are gone. The file is under
// the session directory (jit/), by domain, pid and start time.
struct JitRecord {
  uint16_t domain = 0;
  uint32_t pid = 0;
  uint64_t start_ticks = 0;  // the process's start time (/proc/PID/stat), telling reused pids apart
  std::string kind;          // "perf-map", "jitdump"
  std::string source;        // the runtime's file, as the process named it
  std::string file;          // the copy, relative to the session directory ("jit/0-1234-5678.map")
  uint64_t bytes = 0;        // copied
  bool cut = false;          // the runtime's file was larger than the agent copies
  std::string problem;       // why it was not (or no longer) copied; empty when all is well
};
inline constexpr const char* kJitDirectory = "jit";

// A task that scheduling records name (linux --sched), by its name: a thread of process `pid`.
struct TaskRecord {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string comm;
};

struct DomainRecord {
  uint16_t id = 0;
  std::string name;
  std::string role;  // "active" (dom0 included), "passive"
  uint16_t vcpus = 0;
  std::vector<ProcessRecord> processes;  // context records of its user space, if known
  std::vector<TaskRecord> tasks;         // tasks its scheduling records name, by tid
};

// Per ring: what the hypervisor put in (or lost), and what the agent stored. A scheduling
// ring ("sched") counts scheduling records where the others count samples.
struct RingRecord {
  uint16_t owner = 0;  // the domain whose region holds the ring
  uint32_t index = 0;
  std::string kind;    // "vcpu", "pcpu", "sched"
  uint64_t capacity = 0;
  uint64_t written = 0;          // samples the producer wrote (its header counts; sched: sched_written)
  uint64_t lost[8] = {};         // per hvpmu::ring::LossReason, producer side (sched: sched_lost)
  uint64_t drained = 0;          // samples the agent read out
  uint64_t malformed = 0;        // records the agent could not use
  uint64_t max_fill = 0;
};

struct LossRecord {
  // Engine-wide, per cause, from the hypervisor's own counters.
  uint64_t ring_full = 0;
  uint64_t corrupt_index = 0;
  uint64_t no_ring = 0;
  uint64_t unprofiled_domain = 0;
  // Agent side.
  uint64_t malformed_records = 0;
  uint64_t store_failed = 0;     // samples that could not be written (a full disk...)
  // Below the engine: samples the platform lost before the engine saw them (linux: perf's
  // ring overflowed).
  uint64_t platform_lost = 0;
  // Samples the platform did not take because the kernel throttled sampling (linux: the time
  // between perf's THROTTLE and UNTHROTTLE records at the rate asked), an estimate.
  uint64_t throttled = 0;
};

// Every loss cause by its name in the session files, for code that writes or reads them all.
struct LossField {
  const char* name;
  uint64_t LossRecord::*member;
};
inline constexpr LossField kLossFields[] = {
    {"ring_full", &LossRecord::ring_full},
    {"corrupt_index", &LossRecord::corrupt_index},
    {"no_ring", &LossRecord::no_ring},
    {"unprofiled_domain", &LossRecord::unprofiled_domain},
    {"malformed_records", &LossRecord::malformed_records},
    {"store_failed", &LossRecord::store_failed},
    {"platform_lost", &LossRecord::platform_lost},
    {"throttled", &LossRecord::throttled},
};

// Scheduling records lost, per cause (none of them is in LossRecord, which counts samples).
struct SchedLosses {
  // Engine side, summed over the scheduling rings (sched_lost[] of their headers).
  uint64_t ring_full = 0;
  uint64_t corrupt_index = 0;
  // Agent side.
  uint64_t store_failed = 0;  // records that could not be written to sched.hvs (a full disk...)
  uint64_t malformed = 0;     // records the agent could not read out of the rings
  uint64_t unknown_type = 0;  // records of a type this hvprof does not know: skipped
};
struct SchedLossField {
  const char* name;
  uint64_t SchedLosses::*member;
};
inline constexpr SchedLossField kSchedLossFields[] = {
    {"ring_full", &SchedLosses::ring_full},     {"corrupt_index", &SchedLosses::corrupt_index},
    {"store_failed", &SchedLosses::store_failed}, {"malformed", &SchedLosses::malformed},
    {"unknown_type", &SchedLosses::unknown_type},
};

// The loss counts as session.json and hvprofd's status carry them, by kSchedLossFields' names.
// A cause a reader does not find (written before it was counted) counts 0.
nlohmann::json SchedLossesJson(const SchedLosses& lost);
Result<SchedLosses> ParseSchedLosses(const json::Node& lost);

// What session.json says of scheduling (its "sched" object), when the session recorded it.
struct SchedSummary {
  std::string source;      // what recorded it: "engine", "perf", "xentrace"
  uint64_t records = 0;    // in sched.hvs
  SchedLosses lost;
  // What sched.hvs held when this was written (next chunk number, size): a shorter file was cut.
  uint64_t file_chunks = 0;
  uint64_t file_bytes = 0;
};

// What context.hvc told, as hvprofd counted it while writing it: what a report of the aggregate
// says of the session's processes without reading the file (after a day of a host that starts
// processes all day, hundreds of megabytes). Absent in sessions before it.
struct ContextSummary {
  uint64_t processes = 0;
  uint64_t images = 0;
  std::vector<uint16_t> domains;  // the domains it told processes of, in order
};

struct ProfilingInterval {
  uint64_t start_ns = 0;  // wall clock (CLOCK_REALTIME)
  uint64_t stop_ns = 0;   // 0 while running
};

// A window of continuous profiling (hvprofd --continuous): one of a series of sessions that
// follow each other without a gap, each closed after the window's time. Its span is on the
// clock the agent closed it by, as CLOCK_REALTIME nanoseconds: the wall clock on linux and xen;
// on the sim, the series' first wall-clock time plus the simulated time since (a simulated week
// spans a week). `raw_dropped`: samples.hvs and context.hvc were removed to keep the windows
// within their disk budget, and aggregate.hva is what remains of the samples.
struct WindowRecord {
  std::string series;     // the series' id: the session id of its first window
  uint64_t index = 0;     // 0, 1, 2... within the session root, across restarts of hvprofd
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;    // 0 while the window is open
  std::string clock;      // "realtime" or "sim"
  bool raw_dropped = false;
};

struct SessionMetadata {
  int version = kSessionFormatVersion;
  std::string session_id;     // 32 hex digits
  std::string hvprof_version;
  std::string platform;       // sim, linux, xen
  std::string machine;        // scenario or host name
  std::string cpu_type;
  uint32_t num_cpus = 0;
  uint32_t num_counters = 0;
  std::string role;           // "dom0" or "guest"
  uint16_t agent_domain = 0;  // the domain whose agent wrote this session
  uint64_t created_ns = 0;
  // Where the agent kept copies of the images sampled, by build-id (buildid_cache::Cache); empty
  // when it kept none. Reports look there when an image was rebuilt or removed since.
  std::string build_id_cache;
  std::vector<ProfilingInterval> profiling;
  std::vector<EventRecord> events;
  std::vector<DomainRecord> domains;
  std::vector<ImageRecord> images;
  std::vector<JitRecord> jit;  // perf maps and jitdumps copied into the session
  std::string ring_format;    // "v2", "legacy"
  uint32_t ring_capacity = 0; // per ring, effective
  uint32_t ring_watermark = 0;
  uint32_t backtrace_depth = 0;
  uint32_t poll_interval_ms = 0;
  std::vector<RingRecord> rings;
  LossRecord losses;
  uint64_t samples_stored = 0;
  uint64_t idle_samples = 0;
  // The platform clock of the first and last sample stored: how long the machine was sampled.
  uint64_t first_sample_ns = 0;
  uint64_t last_sample_ns = 0;
  std::map<std::string, uint64_t> samples_by_domain_mode;  // "1/user" -> count
  std::vector<std::string> notes;  // what the agent wants a report reader to know
  // Why the session is known to be incomplete (the disk filled up, hvprof-hv went away, an
  // earlier hvprofd died); empty for a whole session. A report warns and exits 3.
  std::vector<std::string> incomplete;
  // What samples.hvs held when this was written: a shorter file was cut.
  uint64_t samples_file_chunks = 0;
  uint64_t samples_file_bytes = 0;
  // What the platform says of its own sampling (linux: requested and achieved rates per CPU,
  // throttling, perf's losses); absent when it says nothing.
  std::optional<context::PlatformStats> platform_stats;
  // Only when the session recorded scheduling (sched.hvs); absent in older sessions.
  std::optional<SchedSummary> sched;
  // Only when hvprofd wrote context.hvc; absent in older sessions.
  std::optional<ContextSummary> context;
  // Only in continuous mode's windows.
  std::optional<WindowRecord> window;
};

std::string SerializeMetadata(const SessionMetadata& metadata);
// Checks the format and version and every field's type; an error names the field.
Result<SessionMetadata> ParseMetadata(std::string_view json, std::string_view origin);

// ---- the aggregated form: sample counts per (domain, mode, event, pid, ip), sorted.
//
// Counts are kept across processes (the key's pid kAnyProcess) wherever an address says what ran
// by itself: a user-mode address of a known file mapping as an image word (ContextIndex resolves
// it: the image's number, Aggregate::images, and the address in the image), and every kernel and
// hypervisor address. Every process that ran the same code counts into one row, however many
// ran it and wherever each mapped it; stacks' words likewise. User addresses in no file (and of
// processes the context does not know) stay per process. A view by process reads the samples.
inline constexpr uint32_t kAnyProcess = 0xFFFFFFFE;
inline constexpr uint64_t kImageAddressMask = (uint64_t{1} << 48) - 1;
inline constexpr uint32_t kMaxImageWordImage = 0xFFFE;  // images above it are counted by process
// An image's number in bits 48-63 (1 to 0xFFFE), the address in the image below. A canonical
// x86-64 address has those bits all clear (user) or all set (kernel), so a word says what it is.
constexpr uint64_t ImageWord(uint32_t image, uint64_t address) {
  return uint64_t{image} << 48 | (address & kImageAddressMask);
}
constexpr bool IsImageWord(uint64_t word) {
  const uint64_t top = word >> 48;
  return top != 0 && top != 0xFFFF;
}
constexpr uint32_t ImageOfWord(uint64_t word) { return static_cast<uint32_t>(word >> 48); }
constexpr uint64_t AddressOfWord(uint64_t word) { return word & kImageAddressMask; }

struct AggregateKey {
  uint64_t ip;
  uint32_t pid;
  uint16_t domain;
  uint8_t mode;
  uint8_t event;
  bool operator<(const AggregateKey& other) const;
  bool operator==(const AggregateKey&) const = default;
};

struct AggregateEntry {
  AggregateKey key;
  uint64_t count;
};

struct AggregateImage {
  uint32_t id = 0;
  std::string path;
  std::string build_id;
  bool operator==(const AggregateImage&) const = default;
};

// A mapping of a process that names no file ("/memfd:...", a device, SysV shared memory: a JIT's
// code, often) and held addresses the aggregate counts by process (version 5): what a report
// names their rows by.
struct AggregateRegion {
  uint16_t domain = 0;
  uint32_t pid = 0;
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t time_ns = 0;  // when it was mapped
  std::string path;
  bool operator==(const AggregateRegion&) const = default;
};

struct Aggregate {
  std::vector<AggregateEntry> entries;  // sorted by key, unique
  // The images image words name (version 4), by number: images[id - 1].id == id.
  std::vector<AggregateImage> images;
  // Version 5, when has_regions: every region a per-process address (an entry's or a stack's)
  // fell in, sorted by (domain, pid, start), one per start (the latest). With them and
  // session.json's context summary a report of the aggregate needs nothing of context.hvc.
  bool has_regions = false;
  std::vector<AggregateRegion> regions;
  uint64_t samples = 0;
  uint64_t source_bytes = 0;  // how much of samples.hvs it covers
  // Every distinct stack with its samples, when counted (has_stacks): the addresses of each are
  // in stack_words, the sampled one first, then its call chain as recorded.
  bool has_stacks = false;
  std::vector<CountedStack> stacks;
  std::vector<uint64_t> stack_words;
  std::span<const uint64_t> Addresses(const CountedStack& stack) const {
    return {stack_words.data() + stack.first, stack.length};
  }
  // Each entry's count in `time_slices` equal spans of the samples' clock from slices_first_ns
  // to slices_last_ns, entry by entry (slice_counts[entry * time_slices + slice]); 0 slices when
  // not counted. What a diff measures dispersion with, without reading the samples again.
  uint32_t time_slices = 0;
  uint64_t slices_first_ns = 0;
  uint64_t slices_last_ns = 0;
  std::vector<uint32_t> slice_counts;
};

// The aggregates of several sessions (continuous mode's windows) as one: images by path and
// build-id renumbered and their words rewritten, equal keys' counts added, stacks merged, regions
// kept (the latest of equal ones). Regions and stacks only where every part has them; no time
// slices (each part's span is its own); source_bytes 0 (no one samples.hvs stands behind it).
// A word naming an image its part does not list stays an unknown address. More distinct images
// than image words can number is kUnsupported.
Result<Aggregate> MergeAggregates(std::vector<Aggregate> parts);

// The time slices hvprofd counts into aggregate.hva (and hvprof-report --diff uses by default).
inline constexpr uint32_t kAggregateTimeSlices = 10;
// At most this many slices are kept in an aggregate.
inline constexpr uint32_t kMaxTimeSlices = 64;

// What AggregateSamplesFile counts in time slices: `count` equal spans from first_ns to last_ns
// (samples outside fall in the first or the last).
struct TimeSlicing {
  uint32_t count = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  // The slice a sample of `time_ns` is counted in (count must not be 0).
  uint32_t SliceOf(uint64_t time_ns) const {
    const unsigned __int128 span = last_ns >= first_ns ? static_cast<unsigned __int128>(last_ns - first_ns) + 1 : 1;
    const uint64_t offset = time_ns > first_ns ? time_ns - first_ns : 0;
    const auto slice = static_cast<unsigned __int128>(offset) * count / span;
    return static_cast<uint32_t>(slice < count ? slice : count - 1);
  }
};

// What AggregateSamplesFile counts besides the entries.
enum class StackDetail {
  kNone,
  kStacks,          // the stacks, with the thread, vCPU and pCPU left out (kUnknown* below)
  kStacksByCpu,     // the stacks of each pCPU, the thread and vCPU left out: the agent's aggregate
                    // (per-CPU idle shares read it), bounded by the code that ran and the CPUs, not
                    // by how many processes and threads ran it
  kStacksByThread,  // the stacks of each thread on each vCPU and pCPU
};

// The one name of a domain that every command prints (reports, --status, the agents' notes):
// "dom0" for domain 0 whatever its own name (Xen's "Domain-0"), "domN (NAME)" for another with a
// name ("dom3 (web-1)"), "domN" without one (or when NAME is just that), and "idle" for the idle
// domain. Unescaped: NAME is the guest's choice, so text output escapes the result.
std::string DomainName(uint16_t id, std::string_view name);

// Builds the aggregate from the whole samples file (ignoring damaged chunks, and chunks of
// another session than `session_id`'s when given), and its stacks as `stacks` asks.
// With `slicing`, each entry is also counted per time slice (Aggregate::slice_counts); a slicing
// whose last_ns is not after its first_ns takes its span from the chunks' headers (the time of
// their first and last samples), and the aggregate's slices_first_ns and slices_last_ns say
// the span used.
// A large file's chunks are decoded by `readers` threads (0: one per CPU, up to 4, for a file of
// 8 MiB or more), each counting its share; the result is the same whatever their number.
// How user-mode addresses are counted: by image where `index` resolves them (nullptr: by process,
// as in sessions before context.hvc), with the process kept in the key with `keep_pid` (views by
// process). aggregate_builder.h has the rules.
class ContextIndex;
// Told of each user address the translation left to its process because it is in a mapping of no
// file (a region: a JIT's code, often), with that mapping, as the sample is counted.
class RegionSink {
 public:
  virtual void Note(uint16_t domain, uint32_t pid, uint64_t start, uint64_t end, uint64_t time_ns,
                    const std::string& path) = 0;

 protected:
  ~RegionSink() = default;
};
struct Translation {
  const ContextIndex* index = nullptr;
  bool keep_pid = false;
  RegionSink* regions = nullptr;
};
// With `watch`, every sample counted is also shown, as read (before the translation), with the
// time slice it was counted in (0 without slicing), to an observer of its reading thread's: what a
// report needs of the samples besides their counts (which code each sample's time found where
// JIT code was replaced) comes in the same pass. watch(reader) is called for each reading thread
// on the caller's thread, one after the other, before any sample is decoded; each observer is
// then called from its reading thread alone.
using SampleObserver = std::function<void(const StoredSample& sample, uint32_t slice)>;
using SampleWatch = std::function<SampleObserver(unsigned reader)>;
Result<Aggregate> AggregateSamplesFile(const std::string& path, ReadSummary* summary = nullptr,
                                       std::optional<std::span<const uint8_t, 16>> session_id = std::nullopt,
                                       StackDetail stacks = StackDetail::kNone, TimeSlicing slicing = {},
                                       unsigned readers = 0, const Translation& translation = {},
                                       const SampleWatch& watch = {});
// hvprofd deflates the aggregate (zlib, its fastest level: the addresses of stacks shrink about
// sevenfold); kPlain writes the sections as they are (tests that forge them). Readers take both.
enum class AggregateCompression { kDeflate, kPlain };
Result<void> WriteAggregate(const std::string& path, const Aggregate& aggregate,
                            AggregateCompression compression = AggregateCompression::kDeflate);
Result<Aggregate> ReadAggregate(const std::string& path);

// ---- session directories

struct SessionPaths {
  std::string root;  // --session-dir, default /var/lib/hvprof
  std::string samples_dir() const { return root + "/samples"; }
  std::string current() const { return samples_dir() + "/current"; }
  std::string Saved(const std::string& name) const { return samples_dir() + "/" + name; }
  std::string lock() const { return root + "/lock"; }
  std::string control_socket() const { return root + "/hvprofd.sock"; }
  std::string log() const { return root + "/hvprofd.log"; }
  std::string setup() const { return root + "/daemonrc.json"; }
};

inline constexpr const char* kDefaultSessionRoot = "/var/lib/hvprof";

// CheckTrustedDirectory (base/files.h) for a session root and, where they exist, its samples
// directory and current session: what a root hvprofd writes in.
Result<void> CheckSessionDirectories(const SessionPaths& paths);

// Checks a --save name: letters, digits, '-', '_' and '.', not "current", not starting with '.'.
Result<void> ValidateSessionName(const std::string& name);

// Saving a session as NAME (`hvprof --save`), in two steps so that its writer can close it
// between them. CheckSave says where `directory` (the current session, whose metadata says what
// it holds) goes, or why it cannot: a bad name (kInvalidArgument), a name taken (kBadState), no
// session (kNotFound), or, unless `allow_empty`, no samples in it (kEmpty: a saved session is
// kept to compare against, and an empty one would compare nothing). hvprofd and, with no hvprofd
// running, hvprof itself both save through these.
Result<std::string> CheckSave(const SessionPaths& paths, const std::string& directory, const std::string& name,
                              bool allow_empty);
// Moves a session directory to `to` (CheckSave's answer), never over another: a name taken
// meanwhile is kBadState, and nothing moves.
Result<void> MoveSession(const std::string& from, const std::string& to);

// The name of the most recently written saved session under `paths` (by its metadata's
// modification time), or nothing when there is none.
std::optional<std::string> NewestSavedSession(const SessionPaths& paths);

// Whether `pid` is a running hvprofd: its comm says so and it is not a zombie (exited, not yet
// reaped).
bool IsLiveHvprofd(long pid);

// Whether an hvprofd is alive to write the session in `directory` (a session root's
// samples/current): the root's lock names a live hvprofd process. False for saved sessions.
bool SessionWriterAlive(const std::string& directory);

// A session as the report tool sees it.
struct SessionOnDisk {
  std::string directory;
  SessionMetadata metadata;
  std::vector<std::string> problems;  // damage found while opening
};

// Opens `directory` (a session directory, or a session root whose samples/current is used).
// Distinguishes "no session here" (kNotFound) from a damaged one (kCorrupt, with a message
// naming the damage).
Result<SessionOnDisk> OpenSession(const std::string& directory);

}  // namespace hvprof::store
