// The profile model: a session, read and attributed. Every view (report's tables, and the
// views to come) computes from it and every writer prints what a view made of it; load.h fills
// it in. Every sample count is tied to an image and a symbol, with images named as Xenoprof
// named them. Nothing is dropped: an address that cannot be resolved
// is attributed to "[unknown in IMAGE+0xOFF]" or "(no symbols)", with the reason kept.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/store/context_file.h"
#include "hvprof/store/session.h"

namespace hvprof::symbolizer {
class Symbolizer;
}

namespace hvprof::report {

inline constexpr uint32_t kNoIndex = std::numeric_limits<uint32_t>::max();

struct Image {
  std::string name;       // as reports show it: xen-syms-4.17-amd64, libc.so.6, domain3-kernel
  // The path the session recorded for the file symbolized against, wherever that file was found
  // (an archive, --image-path, debuginfod: LoadOptions); empty when there is none.
  std::string path;
  std::string long_name;  // -f/--long-filenames: the full path, or the name if there is none
  bool has_symbols = false;
  // Why its addresses could not be resolved, if the whole image failed (missing file,
  // build-id mismatch...). Empty when it resolved.
  std::string problem;
  bool build_id_mismatch = false;
};

struct Symbol {
  uint32_t image = 0;
  std::string name;        // function, or "[unknown in IMAGE+0xOFF]", or "(no symbols)"
  // The function's address (0 when unknown): in its file for a process's image (the same in
  // every process that maps it), where it runs for kernels and the hypervisor.
  uint64_t start = 0;
  bool resolved = false;
  std::string reason;      // for unresolved ones: the symbolizer's reason
};

struct SourceLine {
  std::string file;
  uint32_t line = 0;
};

// One aggregated count, attributed.
struct Entry {
  uint16_t domain;
  uint8_t mode;      // 0 user, 1 kernel, 2 hypervisor
  uint8_t event;     // logical counter
  uint32_t pid;      // store::kAnyProcess: counted across processes (by image, or kernel code)
  uint64_t ip;       // as the aggregate keys it (an image word for code counted by image)
  uint64_t address;  // what it is in its image's terms: the address the symbolizer and -d show
  uint64_t count;
  uint32_t image;    // index into images
  uint32_t symbol;   // index into symbols
  uint32_t line;     // index into lines, or kNoIndex
  // With LoadOptions::inlines, for frames: the functions inlined at this address, an index
  // into Profile::inline_chains(); kNoIndex when none (or not asked).
  uint32_t inlined = kNoIndex;
  // Taken in the idle loop (IsIdleSample): left out of shares unless --include-idle.
  bool idle = false;
};

// A function inlined at an address, and where in it the address is.
struct InlinedCall {
  std::string function;
  uint32_t line = kNoIndex;  // index into lines, or kNoIndex
};

// The inlined functions at one address, innermost first; the address's own symbol is the
// function they were inlined into, at `outer_line` (the call of the outermost inlined one).
struct InlineChain {
  std::vector<InlinedCall> calls;
  uint32_t outer_line = kNoIndex;
};

// One distinct call stack and how many samples had it. frames[0] is where the sample was taken,
// then its callers, innermost first; each is an index into Profile::frames(). A caller's
// return address is attributed one byte back, to the call that made it.
struct Stack {
  uint16_t domain = 0;
  uint8_t mode = sample_mode::kUser;  // sample_mode::
  uint8_t event = 0;
  uint32_t pid = 0;
  // With LoadOptions::stack_threads (pprof's labels): where it ran; unknown otherwise, and
  // then stacks of every CPU and thread are counted together.
  uint16_t vcpu = kUnknownPcpu;
  uint16_t pcpu = kUnknownPcpu;
  uint32_t tid = kNoTid;
  uint64_t count = 0;
  std::vector<uint32_t> frames;
  bool idle = false;  // sampled in the idle loop (IsIdleSample of its first frame)
};

// Samples of one event on one physical CPU, and how many of them were idle, where the session
// says on which CPU each sample was taken (the aggregate's stacks).
struct CpuIdle {
  uint16_t cpu = 0;
  uint8_t event = 0;
  uint64_t samples = 0;
  uint64_t idle = 0;
};

// The kernel and hypervisor functions of the idle loop (halt, mwait, poll): docs/report-formats.md
// lists them. Exact names, or prefixes where a family has many members (intel_idle*).
bool IsIdleFunction(std::string_view name);

// Whether a sample was taken in the idle loop: in the hypervisor's idle domain (kIdleDomain:
// Xen's idle vCPU, the sim's idle loop, and on linux the idle task, pid 0, which hvprof-hv
// records there, interrupts it served included, as perf's "swapper" counts them), or, in any
// other domain, a kernel or hypervisor sample in an idle function (IsIdleFunction: a guest
// kernel's halt, dom0's safe_halt). The domain wins: every sample of the idle domain is idle,
// whatever its function. User-mode samples of other domains are never idle (a program spinning
// in a function named like one is working).
bool IsIdleSample(uint16_t domain, uint8_t mode, std::string_view symbol);

// Where LoadProfile spent its time (hvprof-report --timing).
struct LoadTimings {
  double read_seconds = 0;          // the aggregate, or decoding and counting the raw samples
  bool from_aggregate = false;
  double symbol_tables_seconds = 0; // opening images and building their symbol tables
  double resolve_seconds = 0;       // looking the addresses up and naming them
  double attribute_seconds = 0;     // deciding each address's image
  uint64_t distinct_addresses = 0;
  uint64_t distinct_stacks = 0;  // as read, before frames are named (with LoadOptions::stacks)
  // Passes over samples.hvs: 0 when the aggregate gave all the report needed, else 1 (counts,
  // time slices and the times of samples in replaced JIT code are all read in one pass).
  uint32_t samples_passes = 0;
};

// A guest's published profile, as --all-domains used it.
struct PublishedSource {
  uint16_t domain = 0;
  std::string name;
  uint64_t samples = 0;
  uint64_t published_ns = 0;
  store::LossRecord losses;
};

// What a Profile is made of. LoadProfile (report/src/load/) fills the parts step by step and then
// seals them into a Profile, whose one constructor takes them: the parts are the loader's whole way
// into a profile, and a Profile is read-only once made.
struct ProfileParts {
  store::SessionMetadata metadata;
  // The index the profile was built with: the whole context, or, from an aggregate with regions,
  // its images and regions only (partial_context); then Profile::context() reads the file when a
  // view asks for it.
  std::shared_ptr<const store::ContextIndex> context = std::make_shared<store::ContextIndex>();
  bool partial_context = false;
  store::ContextSummary context_summary;
  bool has_context_file = false;  // context.hvc: user code was counted by image as it came
  bool keeps_pids = false;        // loaded with LoadOptions::processes
  std::string directory;          // as shown (LoadOptions::shown_directory: an archive's original)
  std::string loaded_directory;   // where the files are
  std::vector<Image> images;
  std::vector<Symbol> symbols;
  std::vector<SourceLine> lines;
  std::vector<Entry> entries;
  std::vector<Stack> stacks;
  std::vector<Entry> frames;
  std::vector<CpuIdle> cpu_idle;
  uint64_t samples_without_chain = 0;
  std::vector<std::string> problems;
  std::vector<std::string> stack_notes;
  std::vector<InlineChain> inline_chains;  // what the stacks say of the images (no frame pointers)
  uint64_t total = 0;
  LoadTimings timings;
  std::vector<PublishedSource> published;
  // With LoadOptions::time_slices: each entry's count in each time slice (entry-major).
  uint32_t time_slices = 0;
  std::vector<uint32_t> slice_counts;

  // Profile::DomainName.
  std::string DomainName(uint16_t domain) const;
  // The whole of context.hvc (in loaded_directory), what could not be read of it added to
  // `problems_out`, each saying what that means (`without`).
  std::shared_ptr<const store::ContextIndex> ReadWholeContext(std::vector<std::string>& problems_out,
                                                              std::string_view without) const;
};

class Profile {
 public:
  Profile() = default;
  explicit Profile(ProfileParts parts);

  const store::SessionMetadata& metadata() const { return parts_.metadata; }
  // The processes the session's samples ran in: context.hvc, or the processes session.json listed
  // (sessions before it). A profile counted from the aggregate alone reads context.hvc on the
  // first call (a view by process, -x): after a day of a host that starts processes all day it
  // is hundreds of megabytes, which a flat report or a call graph does not need.
  const store::ContextIndex& context() const;
  // How many processes and images context.hvc told, and of which domains, without reading it.
  const store::ContextSummary& context_summary() const { return parts_.context_summary; }
  const std::string& directory() const { return parts_.directory; }
  const std::vector<Image>& images() const { return parts_.images; }
  const std::vector<Symbol>& symbols() const { return parts_.symbols; }
  const std::vector<SourceLine>& lines() const { return parts_.lines; }
  const std::vector<Entry>& entries() const { return parts_.entries; }
  // With LoadOptions::stacks (load.h): every distinct call stack, and the addresses of their
  // frames, attributed as entries are (their counts are 0: a frame is counted by its stacks).
  const std::vector<Stack>& stacks() const { return parts_.stacks; }
  const std::vector<Entry>& frames() const { return parts_.frames; }
  const std::vector<InlineChain>& inline_chains() const { return parts_.inline_chains; }
  // Samples recorded without a call chain while stacks were read (--callgraph was 0, or the
  // platform gives none): their stacks hold only the sampled address.
  uint64_t samples_without_chain() const { return parts_.samples_without_chain; }
  // Per physical CPU and event, where the data has the CPU: samples and idle samples.
  const std::vector<CpuIdle>& cpu_idle() const { return parts_.cpu_idle; }
  // What went wrong reading the session (damaged chunks, missing metadata fields...).
  const std::vector<std::string>& problems() const { return parts_.problems; }
  // With LoadOptions::stacks: images whose chains mostly stop at the sampled function (built
  // without frame pointers). Warnings, not problems: the report is complete without callers.
  const std::vector<std::string>& stack_notes() const { return parts_.stack_notes; }
  uint64_t total_samples() const { return parts_.total; }
  const LoadTimings& timings() const { return parts_.timings; }
  // With LoadOptions::all_domains (load.h): the guests' profiles that were merged.
  const std::vector<PublishedSource>& published() const { return parts_.published; }
  // With LoadOptions::time_slices (load.h): how many slices, and each entry's count in each
  // (entry-major: entries().size() * time_slices() counts); 0 and empty without.
  uint32_t time_slices() const { return parts_.time_slices; }
  const std::vector<uint32_t>& slice_counts() const { return parts_.slice_counts; }
  // The name of a domain, as every view prints it (store::DomainName): "dom0", "dom3 (db-hvm)",
  // "idle".
  std::string DomainName(uint16_t domain) const { return parts_.DomainName(domain); }
  // Everything a reader of any view must be told, unescaped: images that could not be used
  // (not the one profiled, unreadable), then the problems, then the stack notes.
  std::vector<std::string> Warnings() const;

 private:
  ProfileParts parts_;
  // With parts_.partial_context: the whole context, read at the first context().
  struct WholeContext {
    std::mutex mutex;
    std::shared_ptr<const store::ContextIndex> index;
    std::vector<std::string> problems;  // what reading it found wrong
  };
  std::shared_ptr<WholeContext> whole_context_;
};

}  // namespace hvprof::report
