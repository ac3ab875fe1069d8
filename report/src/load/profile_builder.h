// ProfileBuilder: how load.cpp's LoadProfile fills a Profile's parts (ProfileParts, model.h) and
// seals them into a Profile, shared by its steps (report/src/load/):
//   targets.cpp  what each sample is symbolized against (its target), and the symbolizing;
//   jit.cpp      code a JIT runtime described, named by the time of each sample;
//   stacks.cpp   the call stacks, their frames, and the idle marks;
//   guests.cpp   the rows guests published for dom0's report (--all-domains);
//   slices.cpp   counts per time slice (LoadOptions::time_slices);
//   windows.cpp  continuous mode's windows in a time range, merged (LoadWindows);
// and load.cpp itself: which source stands for the samples (aggregate or samples.hvs), the one
// pass over samples.hvs that gets all the report needs of it, and the order of the steps.
// Private to the report library.
#pragma once

#include "hvprof/report/load.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "hvprof/base/files.h"
#include "hvprof/base/progress.h"
#include "hvprof/report/published.h"
#include "hvprof/symbolizer/debuginfod.h"
#include "hvprof/symbolizer/jit_symbols.h"
#include "hvprof/symbolizer/symbolizer.h"

namespace hvprof::report {

namespace sym = hvprof::symbolizer;

using sample_mode::kHypervisor;
using sample_mode::kKernel;
using sample_mode::kUser;

class Stopwatch {
 public:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// How reports name a kernel image: as perf and opreport do.
inline std::string KernelImageName(const store::ImageRecord& image) {
  if (image.format == "kallsyms") return "[kernel.kallsyms]";
  if (image.format == "system_map") return "vmlinux";
  return Basename(image.path);
}

// The symbolizer looks for separate debug files in the build-id roots (an archive's) first. A
// build-id cache is not one of them: its debug files serve only the images taken from it.
inline sym::SymbolizerOptions SymbolizerOptionsFor(const LoadOptions& options) {
  sym::SymbolizerOptions out;
  out.debug_roots.insert(out.debug_roots.begin(), options.build_id_roots.begin(), options.build_id_roots.end());
  return out;
}

inline sym::ImageFormat FormatOf(const std::string& format) {
  if (format == "kallsyms") return sym::ImageFormat::kKallsyms;
  if (format == "system_map") return sym::ImageFormat::kSystemMap;
  return sym::ImageFormat::kElf;
}

// The stacks a report shows: the aggregate's, each chain cut where a frame-pointer walk went
// astray, and merged across threads and CPUs unless they are asked for (pprof's labels).
struct CollectedStacks {
  std::vector<store::CountedStack> stacks;
  std::vector<uint64_t> words;
  uint64_t without_chain = 0;  // samples recorded without a call chain
  std::span<const uint64_t> Addresses(const store::CountedStack& stack) const {
    return {words.data() + stack.first, stack.length};
  }
};

// Builds a Profile: decides, for each sample, what to symbolize it against, symbolizes each

// Takes the aggregate's stacks (which it leaves empty).
CollectedStacks CollectStacks(store::Aggregate& aggregate, bool by_thread);

// The processes whose JIT runtime put new code at addresses that had held other code during the
// session (sym::JitTable::has_reuse), each with its table: their samples there are named by time.
using ReusedJit = std::map<std::pair<uint16_t, uint32_t>, const sym::JitTable*>;
// What the samples at such addresses found there: counted by (domain, pid, event, address) and
// the code its time found (null: none yet), and, with time slices, in each slice.
struct JitSeen {
  uint64_t count = 0;
  std::vector<uint32_t> slices;
};
using JitSeenKey = std::tuple<uint16_t, uint32_t, uint8_t, uint64_t, const sym::JitSymbol*>;
using JitSeenMap = std::map<JitSeenKey, JitSeen>;

// What a report needs of samples.hvs beyond the stored aggregate (none of it: no pass).
struct SamplesNeeds {
  bool count = false;              // no stored aggregate stands for the samples: the pass counts them
  uint32_t slices = 0;             // time slices to count
  const ReusedJit* jit = nullptr;  // samples in replaced JIT code, to name by their times (JitWatch)
  bool slices_from_spans = false;  // the stored aggregate's spans give the slices if the pass fails
};

// The observers of the pass over samples.hvs (store::SampleWatch) that see the samples in reused
// JIT code: one map per reading thread, merged at the end.
class JitWatch {
 public:
  JitWatch(const ReusedJit& reused, uint32_t slices) : reused_(reused), slices_(slices) {}
  store::SampleWatch Watch();
  JitSeenMap Merged();

 private:
  const ReusedJit& reused_;
  uint32_t slices_;
  std::deque<JitSeenMap> per_reader_;  // a deque: the observers keep references into it
};

// target in one batch, and names images and symbols.
class ProfileBuilder {
 public:
  ProfileBuilder(ProfileParts& profile, const LoadOptions& options, std::vector<std::string> build_id_caches)
      : p_(profile),
        options_(options),
        build_id_caches_(std::move(build_id_caches)),
        symbolizer_(SymbolizerOptionsFor(options)) {}

  // Attributes every entry of `aggregate` into `out` (the profile's entries or its frames).
  Result<void> Build(const store::Aggregate& aggregate, std::vector<Entry>& out);
  // With LoadOptions::stacks: attributes each distinct frame address of the stacks collected.
  Result<void> BuildStacks(const CollectedStacks& collected);
  // Names the images whose chains mostly stop at the sampled function (no frame pointers).
  void NoteShallowImages();
  // Marks the entries taken in the idle loop (Entry::idle), and counts samples and idle samples
  // per physical CPU from the aggregate's stacks where they say on which CPU (Profile::cpu_idle).
  void MarkIdle(const store::Aggregate& aggregate);
  void MarkIdleEntry(Entry& entry) const;
  // The same for the stacks and their frames, once BuildStacks made them.
  void MarkIdleStacks();
  // Adds the user and kernel rows the guests symbolized themselves.
  void AddPublishedSymbols(const std::vector<PublishedProfile>& published);
  // Domains whose hypervisor samples come from a published profile (named domainN-xen).
  std::vector<uint16_t> published_domains;
  // With LoadOptions::debuginfod and servers to ask: where missing images come from.
  std::unique_ptr<sym::Debuginfod> debuginfod;

  // LoadProfile: reads the session and builds its Profile.
  static Result<Profile> Load(const std::string& directory, const LoadOptions& options);
  // LoadWindows (load/windows.cpp): the windows in a time range as one Profile.
  static Result<Profile> LoadWindows(const std::string& session_root, const TimeRange& range,
                                     const LoadOptions& options);
  // What a report of an aggregate needs of the context, from the aggregate: its images, numbered
  // as context.hvc numbers them, and the regions its per-process addresses fell in, in time order.
  static void ContextOfAggregate(const store::Aggregate& counted, store::ContextIndex& context);
  // With --all-domains: the guests' published profiles, checked; their hypervisor samples are
  // added to `aggregate`, for dom0 to resolve.
  // `total` is the session's own samples, checked not to wrap.
  static std::vector<PublishedProfile> ReadPublished(ProfileParts& profile, store::Aggregate* aggregate, uint64_t total);
  // Load's parts. The session's aggregate when it can stand for samples.hvs (`samples_bytes`
  // long) in this report, else nothing (and why, among the problems, when it is damaged).
  static std::optional<store::Aggregate> UsableAggregate(ProfileParts& profile, const LoadOptions& options,
                                                         const std::string& path, uint64_t samples_bytes);
  // The stored aggregate that stands for the session's samples in this report: UsableAggregate
  // for a samples.hvs `samples_bytes` long; without one, where the budget dropped a window's raw
  // samples, the aggregate must serve (an error says why it cannot); else nothing.
  static Result<std::optional<store::Aggregate>> StoredAggregate(ProfileParts& profile, const LoadOptions& options,
                                                                 std::optional<uint64_t> samples_bytes);
  // The stored aggregate that stands for the samples (StoredAggregate), and the context the
  // samples ran in: context.hvc (on a thread of its own meanwhile), or only the aggregate's images
  // and regions when they are all this report needs (ProfileParts::partial_context).
  static Result<std::optional<store::Aggregate>> ReadAggregateAndContext(ProfileParts& profile,
                                                                         const LoadOptions& options,
                                                                         std::optional<uint64_t> samples_bytes);
  // The report's one pass over samples.hvs: counted as the aggregate would have counted it (with
  // its damage said, when the count stands for the samples), in time slices with needs.slices,
  // and shown to `watch`'s observers as it is counted. Nothing (and a note) when the file cannot
  // be read but the stored aggregate can serve without it.
  Result<std::optional<store::Aggregate>> ReadSamplesOnce(const std::string& samples, const SamplesNeeds& needs,
                                                          const store::SampleWatch& watch);
  // What the session's state says of the report: a samples file missing or cut, the session
  // incomplete, or still being written.
  static void NoteSessionState(ProfileParts& profile, std::optional<uint64_t> samples_bytes);

 private:
  // What a group of addresses is symbolized against, and how its image is named.
  struct Target {
    std::string name;           // image name for addresses it resolves
    std::string module_prefix;  // passive kernels: kallsyms modules become "domainN-modules"
    bool dom0_modules = false;  // dom0 kernels: kallsyms modules become "[module]"
    std::string path;           // empty: nothing to symbolize against
    sym::ImageFormat format = sym::ImageFormat::kElf;
    uint64_t bias = 0;
    std::string build_id;
    std::vector<size_t> entries;  // indexes into p_.entries
    const sym::JitTable* jit = nullptr;  // code a JIT runtime described (perf map, jitdump)
  };

  // `path` is the one the session recorded, wherever the file was found (an archive,
  // --image-path, debuginfod): what -f, -x, JSON and pprof show and match on.
  uint32_t ImageIndex(const std::string& name, const std::string& path, bool has_symbols);
  uint32_t SymbolIndex(uint32_t image, const std::string& name, uint64_t start, bool resolved,
                       const std::string& reason);
  uint32_t LineIndex(std::string_view file, uint32_t line);
  Target& TargetFor(const store::Aggregate& aggregate, size_t entry_index);
  // The target of code counted by image `id` (store::ImageWord): the image the aggregate's table
  // names (the counts and their images were written together), else context.hvc's.
  Target& ImageTarget(uint32_t id);
  // The addresses around key.ip that TargetFor sends to the same target, for the same
  // domain, mode and pid: all of them outside user space, else the mapping or the gap between
  // mappings that holds key.ip.
  std::pair<uint64_t, uint64_t> TargetRange(const store::AggregateKey& key) const;
  // Whether the session's context told processes of the domain (a passive domain's user space is
  // one bucket otherwise).
  bool ContextKnows(uint16_t domain) const {
    const std::vector<uint16_t>& domains = p_.context_summary.domains;
    return std::binary_search(domains.begin(), domains.end(), domain);
  }
  std::string ResolvePath(const Target& target) const;
  // Replaces a missing (or different) image with its copy in a build-id cache, when one has it.
  void FromBuildIdCache(const Target& target, sym::ImageSpec& spec);
  // Replaces a missing (or different) image and missing debug info with debuginfod's.
  void AskDebuginfod(const Target& target, sym::ImageSpec& spec);
  // Adds a note for the report's reader, once.
  void NoteOnce(const std::string& note);
  const store::DomainRecord* FindDomain(uint16_t id) const;
  // The JIT symbols of (domain, pid) from the session's copies of its perf map and jitdumps;
  // null when it has none.
  const sym::JitTable* JitTableOf(uint16_t domain, uint32_t pid);
  void SymbolizeJit(Target& target);
 public:
  // The processes of the session's JIT copies whose code was replaced at addresses it had held;
  // with `counted` (a stored aggregate), only those it counts samples of by process.
  ReusedJit ReusedJitTables(const store::Aggregate* counted);
  // What could not be read of the JIT copies of the processes the profile has user samples of
  // (the copies were read before the samples said which processes ran): into its problems.
  void NoteJitProblems();
  // Entries in JIT code whose addresses held different code during the session are split by
  // what each sample's time found there (`seen`: the raw samples have times; the aggregate has
  // none), each piece with its time slices. True when some entry was split (the entries no
  // longer match the aggregate's one to one).
  bool SplitJitByTime(const ReusedJit& reused, const JitSeenMap& seen);
  // With LoadOptions::time_slices: each entry's count per slice (ProfileParts::slice_counts), from
  // the stored aggregate's spans, or from `counted`, the pass's own count in time slices (its
  // entries, or, with `by_key`, entries matched by key: the pass that counted only the slices).
  Result<void> SlicesFromSpans(const store::Aggregate& aggregate, uint32_t slices);
  void SlicesFromPass(const store::Aggregate& counted, uint32_t slices, bool by_key);
  // Without a pass: from the spans when they serve (`spans_serve`), else none to count (no
  // samples), else an error (a window whose raw samples were dropped, with too few spans).
  Result<void> SlicesWithoutPass(const store::Aggregate& aggregate, uint32_t slices, bool spans_serve);

 private:
  const store::ImageRecord* FindImage(const std::string& role, std::optional<uint16_t> domain) const;
  void Symbolize(Target& target);

  ProfileParts& p_;
  const LoadOptions& options_;
  // Where copies of rebuilt or removed images are looked for (buildid_cache::SearchDirectories).
  std::vector<std::string> build_id_caches_;
  std::vector<Entry>* out_ = nullptr;      // what Build fills in
  std::map<std::string, Target> targets_;  // by a key naming image and bias
  std::unordered_map<uint32_t, store::AggregateImage> aggregate_images_;  // the aggregate's table, by number
  std::unordered_map<std::string, uint32_t> image_index_;
  std::unordered_map<std::string, uint32_t> symbol_index_;
  std::unordered_map<std::string, uint32_t> line_index_;
  sym::Symbolizer symbolizer_;
  std::map<std::pair<uint16_t, uint32_t>, std::unique_ptr<sym::JitTable>> jit_tables_;
  std::map<std::pair<uint16_t, uint32_t>, std::vector<std::string>> jit_problems_;  // NoteJitProblems
  size_t jit_bytes_read_ = 0;
};

}  // namespace hvprof::report
