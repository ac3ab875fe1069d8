// Names for code that no file holds: what JIT compilers and interpreters say of the code they
// generate, in perf's two formats.
//
// - perf maps (/tmp/perf-PID.map: Node --perf-basic-prof, a JVM perf-map agent or
//   -XX:+DumpPerfMapAtExit, CPython 3.12 -X perf): one "START SIZE NAME" line per code region,
//   START and SIZE in hex with or without 0x, NAME the rest of the line. A later line for the
//   same start replaces an earlier one (runtimes append when they recompile).
// - jitdump (jit-PID.dump, which `perf inject --jit` reads: V8 --perf-prof, the JVM's and
//   others' agents): a header, then records. Code-load records name a region from their
//   timestamp on (a later load over the same addresses wins from its own timestamp), code-move
//   records move one, debug-info records give the source lines of the next load of their
//   address; unwinding-info and close records are read over.
//
// Both are written by the profiled process, so both are hostile input: the parsers take a
// buffer (the agent copied the file, bounded, without following links), never fail on a bad
// line or record, skip and count it, and stop at the first record whose size cannot be right.
// Names are kept as written; whoever prints them escapes them (EscapeForTerminal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hvprof::symbolizer {

// One named region of generated code, valid from `valid_from_ns` (the process's clock:
// CLOCK_MONOTONIC for jitdump; 0, "always", for perf maps) until a later region over it.
struct JitSymbol {
  uint64_t start = 0;
  uint64_t size = 0;
  uint64_t valid_from_ns = 0;
  std::string name;
  // Source position of the region's first line (jitdump debug info), when known.
  std::string file;
  uint32_t line = 0;
};

struct JitParseStats {
  uint64_t entries = 0;        // lines or records read
  uint64_t malformed = 0;      // skipped as malformed (a bad line, a record that lies)
  uint64_t too_long = 0;       // perf-map lines over kMaxPerfMapLine, skipped
  uint64_t moves = 0;          // jitdump code moves applied
  bool truncated = false;      // the buffer ended inside a record (still being written)
  std::vector<std::string> problems;  // the first few, "line 12: ..." / "record at 0x40: ..."
};

inline constexpr size_t kMaxPerfMapLine = 8192;
inline constexpr size_t kMaxJitName = 4096;
// No function is larger: a region beyond it is malformed (and would make lookups slow).
inline constexpr uint64_t kMaxJitRegion = 1ull << 30;

// perf-map text. Lines may end in '\n' or be the last, unterminated line (skipped when the
// file was still being written: `complete` false).
std::vector<JitSymbol> ParsePerfMap(std::string_view text, JitParseStats* stats, bool complete = true);

// The jitdump header's facts.
struct JitDumpHeader {
  uint32_t version = 0;
  uint32_t elf_machine = 0;
  uint32_t pid = 0;
  uint64_t timestamp_ns = 0;
  uint64_t flags = 0;
  bool arch_timestamp = false;  // JITDUMP_FLAGS_ARCH_TIMESTAMP: times are the TSC, not the clock
};

struct JitDump {
  bool valid = false;          // the header was a jitdump header
  std::string error;           // why not
  JitDumpHeader header;
  std::vector<JitSymbol> symbols;  // in record order (the order of their timestamps)
};

inline constexpr uint32_t kJitDumpMagic = 0x4A695444;  // "JiTD" as the writer's u32

JitDump ParseJitDump(std::span<const std::byte> bytes, JitParseStats* stats);

// The symbols of one process, from its perf map and jitdump snapshots, for lookups by address
// and time.
class JitTable {
 public:
  void Add(std::vector<JitSymbol> symbols);
  // Call once after the last Add.
  void Finish();
  bool empty() const { return regions_.empty(); }
  size_t size() const { return regions_.size(); }

  // The region holding `address` that was valid at `time_ns`: of those holding it, the latest
  // valid at that time. Without a time (kAnyTime), the latest of all: what the process had
  // there when it was last seen. Null if none holds it.
  static constexpr uint64_t kAnyTime = std::numeric_limits<uint64_t>::max();
  const JitSymbol* Find(uint64_t address, uint64_t time_ns = kAnyTime) const;
  // Whether some address holds regions of different times (the report then needs each sample's
  // time to name it).
  bool has_reuse() const { return has_reuse_; }

 private:
  struct Region {
    JitSymbol symbol;
    size_t order;  // when it was added
  };
  std::vector<Region> regions_;       // by start, then order
  std::vector<uint64_t> max_end_;     // max end over regions_[0..i]
  bool has_reuse_ = false;
};

}  // namespace hvprof::symbolizer
