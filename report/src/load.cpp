#include "hvprof/report/load.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
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

namespace {

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
std::string KernelImageName(const store::ImageRecord& image) {
  if (image.format == "kallsyms") return "[kernel.kallsyms]";
  if (image.format == "system_map") return "vmlinux";
  return Basename(image.path);
}

// The symbolizer looks for separate debug files in the build-id roots (an archive's) first.
sym::SymbolizerOptions SymbolizerOptionsFor(const LoadOptions& options) {
  sym::SymbolizerOptions out;
  out.debug_roots.insert(out.debug_roots.begin(), options.build_id_roots.begin(), options.build_id_roots.end());
  return out;
}

sym::ImageFormat FormatOf(const std::string& format) {
  if (format == "kallsyms") return sym::ImageFormat::kKallsyms;
  if (format == "system_map") return sym::ImageFormat::kSystemMap;
  return sym::ImageFormat::kElf;
}

}  // namespace

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
// target in one batch, and names images and symbols.
class ProfileBuilder {
 public:
  ProfileBuilder(Profile& profile, const LoadOptions& options)
      : p_(profile), options_(options), symbolizer_(SymbolizerOptionsFor(options)) {}

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
  static Result<std::vector<uint32_t>> Slice(const Profile& profile, uint32_t slices);
  // Slice's counts of the entries an address was split into by time (SplitJitByTime), from the
  // raw samples.
  static Result<void> CountTimeSplits(const Profile& profile, const store::TimeSlicing& slicing,
                                      std::vector<uint32_t>& counts);
  // With --all-domains: the guests' published profiles, checked; their hypervisor samples are
  // added to `aggregate`, for dom0 to resolve.
  // `total` is the session's own samples, checked not to wrap.
  static std::vector<PublishedProfile> ReadPublished(Profile& profile, store::Aggregate* aggregate, uint64_t total);
  // Load's parts. The session's aggregate when it can stand for samples.hvs (`samples_bytes`
  // long) in this report, else nothing (and why, among the problems, when it is damaged).
  static std::optional<store::Aggregate> UsableAggregate(Profile& profile, const LoadOptions& options,
                                                         const std::string& path, uint64_t samples_bytes);
  // samples.hvs counted in one pass (as the aggregate would have counted it), with its damage.
  static Result<store::Aggregate> ReadRawSamples(Profile& profile, const LoadOptions& options,
                                                 const std::string& samples, const store::Translation& translation);
  // What the session's state says of the report: a samples file missing or cut, the session
  // incomplete, or still being written.
  static void NoteSessionState(Profile& profile, std::optional<uint64_t> samples_bytes);

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
    std::vector<size_t> entries;  // indexes into p_.entries_
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
    const std::vector<uint16_t>& domains = p_.context_summary_.domains;
    return std::binary_search(domains.begin(), domains.end(), domain);
  }
  std::string ResolvePath(const Target& target) const;
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
  // Entries in JIT code whose addresses held different code during the session are split by
  // what each sample's time found there (the raw samples have times; the aggregate has none).
  // True when some entry was split (the entries no longer match the aggregate's one to one).
  Result<bool> SplitJitByTime(const std::string& samples_path);

 private:
  const store::ImageRecord* FindImage(const std::string& role, std::optional<uint16_t> domain) const;
  void Symbolize(Target& target);

  Profile& p_;
  const LoadOptions& options_;
  std::vector<Entry>* out_ = nullptr;      // what Build fills in
  std::map<std::string, Target> targets_;  // by a key naming image and bias
  std::unordered_map<uint32_t, store::AggregateImage> aggregate_images_;  // the aggregate's table, by number
  std::unordered_map<std::string, uint32_t> image_index_;
  std::unordered_map<std::string, uint32_t> symbol_index_;
  std::unordered_map<std::string, uint32_t> line_index_;
  sym::Symbolizer symbolizer_;
  std::map<std::pair<uint16_t, uint32_t>, std::unique_ptr<sym::JitTable>> jit_tables_;
  size_t jit_bytes_read_ = 0;
};

const store::DomainRecord* ProfileBuilder::FindDomain(uint16_t id) const {
  for (const auto& domain : p_.metadata_.domains) {
    if (domain.id == id) return &domain;
  }
  return nullptr;
}

const store::ImageRecord* ProfileBuilder::FindImage(const std::string& role,
                                                    std::optional<uint16_t> domain) const {
  for (const auto& image : p_.metadata_.images) {
    if (image.role == role && (!domain || image.domain == domain)) return &image;
  }
  return nullptr;
}

std::string ProfileBuilder::ResolvePath(const Target& target) const {
  const std::string& path = target.path;
  std::error_code ec;
  std::string id;
  const bool by_id = !target.build_id.empty() && target.format == sym::ImageFormat::kElf &&
                     sym::NormalizeBuildIdHex(target.build_id, &id) && id.size() > 2;
  for (const std::string& root : options_.build_id_roots) {
    std::string candidate;
    if (by_id) {
      candidate = fmt::format("{}/.build-id/{}/{}", root, id.substr(0, 2), id.substr(2));
    } else if (path.starts_with('/') && path.find("/..") == std::string::npos) {
      candidate = root + "/by-path" + path;
    }
    if (!candidate.empty() && std::filesystem::is_regular_file(candidate, ec)) return candidate;
  }
  if (path.empty() || std::filesystem::exists(path, ec)) return path;
  for (const std::string& directory : options_.image_path) {
    const std::string candidate = directory + "/" + Basename(path);
    if (std::filesystem::exists(candidate, ec)) return candidate;
  }
  return path;  // the symbolizer will say it is unreadable
}

uint32_t ProfileBuilder::ImageIndex(const std::string& name, const std::string& path, bool has_symbols) {
  auto [it, added] = image_index_.emplace(name, static_cast<uint32_t>(p_.images_.size()));
  if (added) {
    Image image;
    image.name = name;
    image.path = path;
    image.long_name = path.empty() ? name : path;
    image.has_symbols = has_symbols;
    p_.images_.push_back(image);
  }
  return it->second;
}

uint32_t ProfileBuilder::SymbolIndex(uint32_t image, const std::string& name, uint64_t start,
                                     bool resolved, const std::string& reason) {
  std::string key = std::to_string(image);
  key += '\0';
  key += name;
  auto [it, added] = symbol_index_.emplace(std::move(key), static_cast<uint32_t>(p_.symbols_.size()));
  if (added) p_.symbols_.push_back({image, name, start, resolved, reason});
  return it->second;
}

uint32_t ProfileBuilder::LineIndex(std::string_view file, uint32_t line) {
  std::string key(file);
  key += ':';
  key += std::to_string(line);
  auto [it, added] = line_index_.emplace(std::move(key), static_cast<uint32_t>(p_.lines_.size()));
  if (added) p_.lines_.push_back({std::string(file), line});
  return it->second;
}

std::pair<uint64_t, uint64_t> ProfileBuilder::TargetRange(const store::AggregateKey& key) const {
  constexpr std::pair<uint64_t, uint64_t> kEverything{0, UINT64_MAX};
  const store::DomainRecord* record = FindDomain(key.domain);
  if (key.mode != kUser || key.domain == kIdleDomain || (record != nullptr && record->role == "passive" &&
                                                         !ContextKnows(key.domain))) {
    return kEverything;
  }
  // User space the image path did not take (anonymous memory, a JIT's code, a process the
  // session does not know): each address decides for itself.
  return {key.ip, key.ip + 1};
}

ProfileBuilder::Target& ProfileBuilder::ImageTarget(uint32_t id) {
  const std::string* path = nullptr;
  const std::string* build_id = nullptr;
  if (const auto it = aggregate_images_.find(id); it != aggregate_images_.end()) {
    path = &it->second.path;
    build_id = &it->second.build_id;
  } else if (const store::ContextImage* image = p_.context_->image(id)) {
    path = &image->path;
    build_id = &image->build_id;
  }
  Target& t = targets_[fmt::format("img:{}", id)];
  if (path != nullptr && t.path.empty()) {
    t.name = Basename(*path);
    t.path = *path;
    t.build_id = *build_id;
    t.bias = 0;  // its entries' addresses are the image's own
  } else if (path == nullptr) {
    t.name = fmt::format("image {} (not in the session)", id);
  }
  return t;
}

ProfileBuilder::Target& ProfileBuilder::TargetFor(const store::Aggregate& aggregate, size_t e) {
  const store::AggregateEntry& entry = aggregate.entries[e];
  const uint16_t domain = entry.key.domain;
  const uint8_t mode = entry.key.mode;
  const store::DomainRecord* record = FindDomain(domain);
  const bool passive = record != nullptr && record->role == "passive";
  const bool published =
      std::find(published_domains.begin(), published_domains.end(), domain) != published_domains.end();
  const bool guest_session = p_.metadata_.role == "guest";

  auto target = [&](const std::string& key) -> Target& { return targets_[key]; };
  if (mode == kHypervisor || domain == kIdleDomain) {
    const store::ImageRecord* xen = FindImage("hypervisor", std::nullopt);
    // On linux the "hypervisor" is the host kernel, the same image whichever domain ran.
    const bool host_kernel = p_.metadata_.platform == "linux" && xen != nullptr;
    const std::string name = host_kernel                  ? KernelImageName(*xen)
                             : passive || published ? fmt::format("domain{}-xen", domain)
                             : xen != nullptr ? Basename(xen->path)
                             : guest_session  ? std::string("xen")
                                              : std::string("no-xen");
    Target& t = target("hv:" + name);
    t.name = name;
    if (xen != nullptr) {
      t.path = xen->path;
      t.build_id = xen->build_id;
      t.format = FormatOf(xen->format);
      t.bias = xen->bias;
    }
    return t;
  }
  if (mode == kKernel) {
    const store::ImageRecord* kernel =
        FindImage(passive ? "passive-kernel" : "kernel", domain);
    std::string name;
    if (passive) {
      name = fmt::format("domain{}-kernel", domain);
    } else if (kernel == nullptr) {
      name = "no-vmlinux";
    } else {
      name = KernelImageName(*kernel);
    }
    Target& t = target(fmt::format("kernel:{}:{}", domain, name));
    t.name = name;
    if (passive) t.module_prefix = fmt::format("domain{}-modules", domain);
    else t.dom0_modules = true;
    if (kernel != nullptr) {
      t.path = kernel->path;
      t.format = FormatOf(kernel->format);
      t.bias = kernel->bias;
      t.build_id = kernel->build_id;
    }
    return t;
  }
  // User space the image path did not take: a passive domain's is one unresolvable bucket (as in
  // Xenoprof), unless the platform showed dom0 its processes (host processes on linux).
  const store::ContextIndex& context = *p_.context_;
  if (passive && !ContextKnows(domain)) {
    Target& t = target(fmt::format("apps:{}", domain));
    t.name = fmt::format("domain{}-apps", domain);
    return t;
  }
  const std::string* mapped = context.MappingPath(domain, entry.key.pid, UINT64_MAX, entry.key.ip);
  if (mapped != nullptr && !store::MappingNamesAFile(*mapped)) {
    // memfd, SysV shared memory and device mappings (JIT code, often): nothing to open, but the
    // runtime may have named its code.
    if (const sym::JitTable* jit = JitTableOf(domain, entry.key.pid)) {
      Target& t = target(fmt::format("jit:{}:{}", domain, entry.key.pid));
      t.name = fmt::format("jit (pid {})", entry.key.pid);
      t.jit = jit;
      return t;
    }
    Target& t = target(fmt::format("user-nofile:{}", *mapped));
    t.name = mapped->empty() || (*mapped)[0] != '/' ? *mapped : mapped->substr(1);
    return t;
  }
  if (const sym::JitTable* jit = entry.key.pid != kNoPid ? JitTableOf(domain, entry.key.pid) : nullptr) {
    Target& t = target(fmt::format("jit:{}:{}", domain, entry.key.pid));
    t.name = fmt::format("jit (pid {})", entry.key.pid);
    t.jit = jit;
    return t;
  }
  Target& t = target(fmt::format("anon:{}:{}", domain, entry.key.pid));
  t.name = entry.key.pid == kNoPid ? fmt::format("anon (domain {})", domain)
                                       : fmt::format("anon (pid {})", entry.key.pid);
  return t;
}

void ProfileBuilder::NoteOnce(const std::string& note) {
  auto& notes = p_.metadata_.notes;
  if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
}

void ProfileBuilder::AskDebuginfod(const Target& target, sym::ImageSpec& spec) {
  std::string id;
  if (!sym::NormalizeBuildIdHex(target.build_id, &id) || id.empty()) return;
  auto info = symbolizer_.Describe(spec);
  if (!info || info.value().build_id != id) {
    // Missing here, or here but not the file that was profiled: when no server has it either,
    // the symbolizer says what is wrong with the one here.
    auto fetched = debuginfod->FindExecutable(id);
    if (!fetched) {
      if (fetched.error().kind() != ErrorKind::kNotFound) NoteOnce(fetched.error().message());
      return;
    }
    spec.path = fetched.value();
    info = symbolizer_.Describe(spec);
    if (!info || info.value().build_id != id) return;
    NoteOnce(fmt::format("from debuginfod: {} (build-id {}), as {}", target.path, id, spec.path));
  }
  // No symbol table (stripped) or no DWARF for -g, and no debug file here: the server's.
  const sym::ImageInfo& found = info.value();
  if (found.debug_file.empty() && (found.symbol_table != ".symtab" || (options_.lines && !found.has_dwarf))) {
    auto debug = debuginfod->FindDebuginfo(id);
    if (!debug) {
      if (debug.error().kind() != ErrorKind::kNotFound) NoteOnce(debug.error().message());
      return;
    }
    sym::ImageSpec with_debug = spec;
    with_debug.debug_file = debug.value();
    // Named only once the symbolizer took it (its build-id is the image's): a file it refused
    // was not used.
    auto used = symbolizer_.Describe(with_debug);
    if (!used || used.value().debug_file != with_debug.debug_file) {
      NoteOnce(fmt::format("debuginfod's debug info for {} (build-id {}) was refused: it is not that image's",
                           target.path, id));
      return;
    }
    spec.debug_file = with_debug.debug_file;
    NoteOnce(fmt::format("from debuginfod: the debug info of {} (build-id {}), as {}", target.path, id,
                         spec.debug_file));
  }
}

const sym::JitTable* ProfileBuilder::JitTableOf(uint16_t domain, uint32_t pid) {
  if (p_.metadata_.jit.empty()) return nullptr;
  auto [it, added] = jit_tables_.try_emplace({domain, pid});
  if (!added) return it->second.get();
  auto table = std::make_unique<sym::JitTable>();
  std::set<std::string> read_files;
  for (const store::JitRecord& record : p_.metadata_.jit) {
    if (record.domain != domain || record.pid != pid || record.file.empty() || record.bytes == 0) continue;
    if (!read_files.insert(record.file).second) continue;  // listed twice
    const std::string path = p_.directory_ + "/" + record.file;
    // The copies are bounded when made; a session from elsewhere is bounded here too, each copy
    // and all of them together.
    constexpr size_t kMaxJitBytes = size_t(2) << 30;
    if (jit_bytes_read_ >= kMaxJitBytes) {
      NoteOnce(fmt::format("the session's JIT copies hold more than {} bytes: the rest were not read", kMaxJitBytes));
      break;
    }
    auto text = ReadFileToString(path, kMaxJitBytes - jit_bytes_read_, Links::kRefuse);
    if (text) jit_bytes_read_ += text.value().size();
    if (!text) {
      p_.problems_.push_back(fmt::format("the {} of pid {} cannot be read: {}", record.kind, pid, text.error().message()));
      continue;
    }
    sym::JitParseStats stats;
    if (record.kind == "jitdump") {
      sym::JitDump dump = sym::ParseJitDump(std::as_bytes(std::span(text.value().data(), text.value().size())), &stats);
      if (!dump.valid) {
        p_.problems_.push_back(fmt::format("{} (the jitdump of pid {}) is not one: {}", path, pid, dump.error));
        continue;
      }
      // Its times are CLOCK_MONOTONIC, the linux platform's sample clock; the TSC
      // (arch_timestamp) or another platform's clock cannot be compared: then the later record
      // at an address names it whenever it was sampled.
      if (dump.header.arch_timestamp || p_.metadata_.platform != "linux") {
        for (sym::JitSymbol& symbol : dump.symbols) symbol.valid_from_ns = 0;
      }
      table->Add(std::move(dump.symbols));
    } else {
      // The last line may still have been written when the copy was made.
      table->Add(sym::ParsePerfMap(text.value(), &stats, /*complete=*/false));
    }
    if (stats.malformed + stats.too_long != 0) {
      NoteOnce(fmt::format("{} of pid {} ({}): {} malformed entries skipped{}{}", record.kind, pid,
                                     record.source, stats.malformed + stats.too_long,
                                     stats.problems.empty() ? "" : ", the first: ",
                                     stats.problems.empty() ? "" : stats.problems.front()));
    }
  }
  table->Finish();
  if (!table->empty()) it->second = std::move(table);
  return it->second.get();
}

Result<bool> ProfileBuilder::SplitJitByTime(const std::string& samples_path) {
  std::map<std::pair<uint16_t, uint32_t>, const sym::JitTable*> reused;
  for (const auto& [key, table] : jit_tables_) {
    if (table && table->has_reuse()) reused[key] = table.get();
  }
  if (reused.empty()) return false;
  // The entries of those processes by (domain, pid, event, address).
  std::map<std::tuple<uint16_t, uint32_t, uint8_t, uint64_t>, size_t> index;
  for (size_t e = 0; e < p_.entries_.size(); ++e) {
    const Entry& entry = p_.entries_[e];
    if (entry.mode == kUser && reused.contains({entry.domain, entry.pid})) {
      index[{entry.domain, entry.pid, entry.event, entry.ip}] = e;
    }
  }
  struct Seen {
    uint64_t count = 0;
    uint64_t first_ns = UINT64_MAX;
    uint64_t last_ns = 0;
  };
  std::map<std::pair<size_t, const sym::JitSymbol*>, Seen> counts;
  const auto id = store::ParseSessionId(p_.metadata_.session_id);
  auto read = store::ReadSamplesFile(
      samples_path,
      [&](const store::StoredSample& sample) {
        if (sample.mode != kUser) return;
        const auto table = reused.find({sample.domain, sample.pid});
        if (table == reused.end()) return;
        const auto entry = index.find({sample.domain, sample.pid, sample.event, sample.ip});
        if (entry == index.end()) return;
        Seen& seen = counts[{entry->second, table->second->Find(sample.ip, sample.time_ns)}];
        ++seen.count;
        seen.first_ns = std::min(seen.first_ns, sample.time_ns);
        seen.last_ns = std::max(seen.last_ns, sample.time_ns);
      },
      id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt);
  if (!read) {
    for (const auto& [key, table] : reused) {
      NoteOnce(fmt::format("pid {} loaded new JIT code over old code's addresses, and without the raw samples' times "
                           "({}) its samples there are named by the latest code", key.second, read.error().message()));
    }
    return false;
  }
  bool split = false;
  for (auto it = counts.begin(); it != counts.end();) {
    const size_t e = it->first.first;
    std::vector<std::pair<const sym::JitSymbol*, Seen>> names;
    uint64_t sum = 0;
    for (; it != counts.end() && it->first.first == e; ++it) {
      names.emplace_back(it->first.second, it->second);
      sum += it->second.count;
    }
    // Only what the raw samples account for exactly (a session still being written may differ).
    if (names.size() < 2 || sum != p_.entries_[e].count) continue;
    split = true;
    const Entry original = p_.entries_[e];
    const std::string& image_name = p_.images_[original.image].name;
    for (size_t n = 0; n < names.size(); ++n) {
      Entry piece = original;
      piece.count = names[n].second.count;
      piece.line = kNoIndex;
      if (const sym::JitSymbol* symbol = names[n].first) {
        piece.symbol = SymbolIndex(original.image, symbol->name, symbol->start, true, "");
        if (options_.lines && !symbol->file.empty()) piece.line = LineIndex(symbol->file, symbol->line);
      } else {
        piece.symbol = SymbolIndex(original.image, fmt::format("[unknown in {}]", image_name), 0, false,
                                   "no JIT code was there yet when it was sampled");
      }
      // Each name held the address over one span of time (the code there changed at load
      // times only): the span of its samples' times tells its samples apart again later.
      p_.time_splits_.push_back({n == 0 ? e : p_.entries_.size(), names[n].second.first_ns, names[n].second.last_ns});
      if (n == 0) p_.entries_[e] = piece;
      else p_.entries_.push_back(piece);
    }
  }
  if (split) {
    for (const auto& [key, table] : reused) {
      NoteOnce(fmt::format("pid {} loaded new JIT code over old code's addresses during the session: each sample "
                           "there is named by the code its time found", key.second));
    }
  }
  return split;
}

void ProfileBuilder::SymbolizeJit(Target& target) {
  const uint32_t image = ImageIndex(target.name, "", true);
  for (size_t e : target.entries) {
    Entry& entry = (*out_)[e];
    entry.image = image;
    const sym::JitSymbol* found = target.jit->Find(entry.address);
    if (found == nullptr) {
      entry.symbol = SymbolIndex(image, fmt::format("[unknown in {}]", target.name), 0, false,
                                 "no perf map or jitdump entry holds the address");
      continue;
    }
    entry.symbol = SymbolIndex(image, found->name, found->start, true, "");
    if (options_.lines && !found->file.empty()) entry.line = LineIndex(found->file, found->line);
  }
}

void ProfileBuilder::Symbolize(Target& target) {
  const bool lines = options_.lines;
  if (target.jit != nullptr) {
    SymbolizeJit(target);
    return;
  }
  if (target.path.empty()) {
    const uint32_t image = ImageIndex(target.name, "", false);
    const uint32_t symbol = SymbolIndex(image, "(no symbols)", 0, false, "no image to symbolize against");
    for (size_t e : target.entries) {
      (*out_)[e].image = image;
      (*out_)[e].symbol = symbol;
    }
    return;
  }
  sym::ImageSpec spec;
  spec.path = ResolvePath(target);
  spec.format = target.format;
  spec.bias = target.bias;
  spec.expected_build_id = target.build_id;
  if (debuginfod && spec.format == sym::ImageFormat::kElf && !target.build_id.empty()) AskDebuginfod(target, spec);
  std::vector<uint64_t> addresses;
  addresses.reserve(target.entries.size());
  for (size_t e : target.entries) addresses.push_back((*out_)[e].address);
  sym::LookupOptions lookup;
  const bool inlines = options_.inlines && out_ == &p_.frames_;
  lookup.detail = inlines ? sym::Detail::kInlines : lines ? sym::Detail::kLines : sym::Detail::kFunctions;
  lookup.demangle = options_.demangle;
  {
    // Opening the image through the cache first splits table loading from lookups in the
    // timings; an image that fails is reported by Symbolize below.
    const Stopwatch loading;
    (void)symbolizer_.Describe(spec);
    p_.timings_.symbol_tables_seconds += loading.Seconds();
  }
  const Stopwatch resolving;
  auto batch = symbolizer_.Symbolize(spec, addresses, lookup);
  const uint32_t main_image = ImageIndex(target.name, target.path, true);
  if (!batch) {
    p_.images_[main_image].has_symbols = false;
    p_.images_[main_image].problem = batch.error().message();
    const uint32_t symbol = SymbolIndex(main_image, "(no symbols)", 0, false, batch.error().message());
    for (size_t e : target.entries) {
      (*out_)[e].image = main_image;
      (*out_)[e].symbol = symbol;
    }
    return;
  }
  const sym::BatchResult& result = batch.value();
  for (const sym::ImageStatus& status : result.images()) {
    if (status.reason == sym::Reason::kNone) continue;
    Image& image = p_.images_[main_image];
    image.problem = status.detail.empty() ? std::string(sym::ReasonDescription(status.reason)) : status.detail;
    image.build_id_mismatch = status.reason == sym::Reason::kBuildIdMismatch;
    image.has_symbols = false;
  }
  // Each distinct address is named once. Neighbouring addresses are mostly in one function
  // (they come sorted): the symbol of the last one is reused while the name is the same string
  // of the image's symbol table.
  std::vector<std::pair<uint32_t, uint32_t>> by_unique(result.unique_count(), {kNoIndex, kNoIndex});
  std::vector<uint32_t> line_of(result.unique_count(), kNoIndex);
  std::vector<uint32_t> chain_of(result.unique_count(), kNoIndex);
  struct {
    uint32_t image = kNoIndex;
    std::string_view name;
    uint32_t symbol = kNoIndex;
  } last;
  for (size_t u = 0; u < result.unique_count(); ++u) {
    const sym::Symbolization s = result.unique(u);
    uint32_t image = main_image;
    if (!s.module.empty() && (target.dom0_modules || !target.module_prefix.empty())) {
      const std::string name = target.module_prefix.empty() ? "[" + std::string(s.module) + "]"
                                                            : target.module_prefix;
      image = ImageIndex(name, target.path, true);
    }
    if (s.resolved()) {
      const sym::Frame& outer = s.frames.back();
      if (image != last.image || outer.function.data() != last.name.data() ||
          outer.function.size() != last.name.size()) {
        last = {image, outer.function,
                SymbolIndex(image, std::string(outer.function), outer.function_start, true, "")};
      }
      by_unique[u] = {image, last.symbol};
      if (lines) {
        const sym::Frame& inner = s.frames.front();
        if (!inner.file.empty()) line_of[u] = LineIndex(inner.file, inner.line);
      }
      if (inlines && s.frames.size() > 1) {
        InlineChain chain;
        for (size_t f = 0; f + 1 < s.frames.size(); ++f) {
          const sym::Frame& call = s.frames[f];
          chain.calls.push_back({std::string(call.function), call.file.empty() ? kNoIndex : LineIndex(call.file, call.line)});
        }
        if (!outer.file.empty()) chain.outer_line = LineIndex(outer.file, outer.line);
        chain_of[u] = static_cast<uint32_t>(p_.inline_chains_.size());
        p_.inline_chains_.push_back(std::move(chain));
      }
    } else if (!p_.images_[main_image].has_symbols) {
      by_unique[u] = {image, SymbolIndex(image, "(no symbols)", 0, false,
                                         std::string(sym::ReasonName(s.reason)))};
    } else {
      const uint64_t offset = s.address - target.bias;
      by_unique[u] = {image, SymbolIndex(image, fmt::format("[unknown in {}+{:#x}]", target.name, offset),
                                         0, false, std::string(sym::ReasonName(s.reason)))};
    }
  }
  for (size_t i = 0; i < target.entries.size(); ++i) {
    const size_t u = result.unique_index(i);
    Entry& entry = (*out_)[target.entries[i]];
    entry.image = by_unique[u].first;
    entry.symbol = by_unique[u].second;
    entry.line = line_of[u];
    entry.inlined = chain_of[u];
  }
  p_.timings_.resolve_seconds += resolving.Seconds();
}

Result<void> ProfileBuilder::Build(const store::Aggregate& aggregate, std::vector<Entry>& out) {
  for (const store::AggregateImage& image : aggregate.images) aggregate_images_[image.id] = image;
  const Stopwatch attributing;
  Target* last_target = nullptr;
  store::AggregateKey last_key{};
  uint64_t last_low = 0, last_high = 0;
  out_ = &out;
  targets_.clear();
  p_.timings_.distinct_addresses += aggregate.entries.size();
  out.resize(aggregate.entries.size());
  for (size_t e = 0; e < aggregate.entries.size(); ++e) {
    const store::AggregateEntry& source = aggregate.entries[e];
    Entry& entry = out[e];
    entry.domain = source.key.domain;
    entry.mode = source.key.mode;
    entry.event = source.key.event;
    entry.pid = source.key.pid;
    entry.ip = source.key.ip;
    entry.address = source.key.ip;
    entry.count = source.count;
    entry.image = entry.symbol = entry.line = kNoIndex;
    p_.total_ += source.count;
    // User code counted by image (hvprofd resolved it as it came), or, in a session from before
    // context.hvc, resolved now through the processes session.json lists.
    uint32_t image_id = 0;
    if (source.key.mode == kUser && store::IsImageWord(source.key.ip)) {
      image_id = store::ImageOfWord(source.key.ip);
      entry.address = store::AddressOfWord(source.key.ip);
    } else if (source.key.mode == kUser && !p_.has_context_file_ && source.key.domain != kIdleDomain) {
      if (const auto resolved = p_.context_->Resolve(source.key.domain, source.key.pid, UINT64_MAX, source.key.ip)) {
        image_id = resolved->image;
        entry.address = resolved->address;
      }
    }
    if (image_id != 0) {
      ImageTarget(image_id).entries.push_back(e);
      continue;
    }
    // Entries are sorted by domain, mode, event, pid and ip, so neighbours mostly share a
    // target: reuse it while the key stays in the range it was decided for.
    const bool same = last_target != nullptr && source.key.domain == last_key.domain &&
                      source.key.mode == last_key.mode && source.key.pid == last_key.pid &&
                      source.key.ip >= last_low && source.key.ip < last_high;
    if (!same) {
      last_target = &TargetFor(aggregate, e);
      last_key = source.key;
      std::tie(last_low, last_high) = TargetRange(source.key);
    }
    last_target->entries.push_back(e);
  }
  p_.timings_.attribute_seconds += attributing.Seconds();
  // Symbolizing a large session's images can take a while: a progress line on a terminal.
  Progress progress(out_ == &p_.frames_ ? "hvprof-report: symbolizing call-stack frames, images" : "hvprof-report: symbolizing images",
                    targets_.size());
  for (auto& [key, target] : targets_) {
    Symbolize(target);
    progress.Advance();
  }
  return Ok();
}

void ProfileBuilder::AddPublishedSymbols(const std::vector<PublishedProfile>& published) {
  for (const PublishedProfile& guest : published) {
    const std::string prefix = fmt::format("domain{}:", guest.domain);
    for (const PublishedSymbol& row : guest.symbols) {
      const std::string name = prefix + row.image;
      const uint32_t image = ImageIndex(name, "", row.resolved);
      if (row.resolved) p_.images_[image].has_symbols = true;
      const uint32_t symbol = SymbolIndex(image, row.symbol, row.address, row.resolved,
                                          row.resolved ? "" : "not resolved by the guest");
      for (size_t c = 0; c < row.samples.size(); ++c) {
        if (row.samples[c] == 0) continue;
        p_.entries_.push_back({guest.domain, row.mode, static_cast<uint8_t>(guest.events[c].counter), kNoPid,
                               row.address, row.address, row.samples[c], image, symbol, kNoIndex});
        p_.total_ += row.samples[c];
      }
    }
  }
}

std::vector<PublishedProfile> ProfileBuilder::ReadPublished(Profile& profile, store::Aggregate* aggregate,
                                                           uint64_t total) {
  std::vector<PublishedProfile> accepted;
  // `total` becomes the host's: each guest's rows add up to its `samples` (ParsePublished
  // checks), so a guest is taken only while the total stays a number.
  std::vector<uint16_t> guests;  // the active domains other than the agent's own
  for (const store::DomainRecord& domain : profile.metadata_.domains) {
    if (domain.role == "active" && domain.id != profile.metadata_.agent_domain) guests.push_back(domain.id);
  }
  for (uint16_t domain : guests) {
    const std::string path = fmt::format("{}/published/domain-{}.json", profile.directory_, domain);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      profile.problems_.push_back(fmt::format(
          "active domain {} has not published its profile ({}): its own samples are missing", profile.DomainName(domain),
          profile.metadata_.platform == "xen"
              ? fmt::format("run `hvprof --publish` in it and copy the file it names to {}", path)
              : std::string("run `hvprof --publish` in it, then `hvprof --dump` here")));
      continue;
    }
    auto text = ReadFileToString(path, size_t{64} << 20, Links::kRefuse);
    auto parsed = text ? ParsePublished(text.value(), domain) : Result<PublishedProfile>(text.error());
    if (!parsed) {
      profile.problems_.push_back(parsed.error().message() + "; not used");
      continue;
    }
    PublishedProfile& guest = parsed.value();
    // The guest's counters are dom0's: the same logical counter must count the same event.
    std::string mismatch;
    for (const PublishedEvent& event : guest.events) {
      const auto same = std::find_if(profile.metadata_.events.begin(), profile.metadata_.events.end(), [&](const store::EventRecord& e) {
        return e.counter == event.counter && e.name == event.name && e.count == event.count;
      });
      if (same == profile.metadata_.events.end()) mismatch = fmt::format("{}:{} on counter {}", event.name, event.count, event.counter);
    }
    if (!mismatch.empty()) {
      profile.problems_.push_back(fmt::format("domain {} published a profile of another session ({} is not counted here); not used",
                                      profile.DomainName(domain), mismatch));
      continue;
    }
    if (__builtin_add_overflow(total, guest.samples, &total)) {
      profile.problems_.push_back(fmt::format("domain {} published {} samples, more than any host could have taken "
                                              "with the others; not used", profile.DomainName(domain), guest.samples));
      continue;
    }
    for (const PublishedAddress& address : guest.hypervisor) {
      for (size_t c = 0; c < address.samples.size(); ++c) {
        if (address.samples[c] == 0) continue;
        aggregate->entries.push_back({{address.ip, kNoPid, domain, kHypervisor,
                                       static_cast<uint8_t>(guest.events[c].counter)},
                                      address.samples[c]});
      }
    }
    profile.published_.push_back({domain, guest.name, guest.samples, guest.published_ns, guest.losses});
    accepted.push_back(std::move(guest));
  }
  return accepted;
}


// Takes the aggregate's stacks (which it leaves empty).
CollectedStacks CollectStacks(store::Aggregate& aggregate, bool by_thread) {
  CollectedStacks out;
  // A walk through code without frame pointers ends in values no code lives at (0, the null
  // page, the top page): the chain stops there.
  auto kept = [&aggregate](const store::CountedStack& stack) {
    const auto words = aggregate.Addresses(stack);
    uint32_t length = 1;
    while (length < words.size() && words[length] >= 0x1000 && words[length] < ~uint64_t{0xFFF}) ++length;
    return length;
  };
  bool cut = false;
  for (const store::CountedStack& stack : aggregate.stacks) {
    if (stack.length == 1) out.without_chain += stack.count;
    cut |= kept(stack) != stack.length;
  }
  if (by_thread && !cut) {
    // The aggregate's stacks are distinct already: nothing to merge.
    out.stacks = std::move(aggregate.stacks);
    out.words = std::move(aggregate.stack_words);
  } else {
    store::StackCounter counter;
    counter.Reserve(aggregate.stacks.size(), aggregate.stack_words.size());
    for (const store::CountedStack& stack : aggregate.stacks) {
      store::StackKey key = stack.key;
      if (!by_thread) {
        key.vcpu = key.pcpu = hvprof::kUnknownPcpu;
        key.tid = hvprof::kNoTid;
      }
      counter.Add(key, aggregate.Addresses(stack).first(kept(stack)), stack.count);
    }
    counter.Take(&out.stacks, &out.words);
  }
  aggregate.stacks = {};
  aggregate.stack_words = {};
  return out;
}

Result<void> ProfileBuilder::BuildStacks(const CollectedStacks& collected) {
  const auto& counted = collected.stacks;
  p_.samples_without_chain_ = collected.without_chain;
  p_.timings_.distinct_stacks = counted.size();
  // Every frame address once, sorted as the aggregate is, so that attribution reuses targets.
  auto frame_key = [&collected](const store::CountedStack& s, size_t i) {
    // A caller's frame is a return address: the call that made it is the byte before.
    // Only user space is told apart by process: a kernel address is looked up once.
    const uint64_t address = collected.Addresses(s)[i];
    return store::AggregateKey{i == 0 ? address : address - 1, s.key.mode == kUser ? s.key.pid : kNoPid,
                               s.key.domain, s.key.mode, 0};
  };
  // Distinct keys found through a hash (stacks share most of their frames), then sorted.
  struct KeyHash {
    size_t operator()(const store::AggregateKey& k) const noexcept {
      uint64_t h = (k.ip ^ (uint64_t{k.pid} << 24) ^ (uint64_t{k.domain} << 8) ^ k.mode) * 0x9E3779B97F4A7C15ULL;
      return static_cast<size_t>(h ^ (h >> 32));
    }
  };
  std::unordered_map<store::AggregateKey, uint32_t, KeyHash> index;
  for (const store::CountedStack& stack : counted) {
    for (size_t i = 0; i < stack.length; ++i) index.try_emplace(frame_key(stack, i), 0);
  }
  std::vector<store::AggregateKey> keys;
  keys.reserve(index.size());
  for (const auto& [key, unused] : index) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  for (size_t k = 0; k < keys.size(); ++k) index[keys[k]] = static_cast<uint32_t>(k);
  store::Aggregate frames;
  frames.entries.reserve(keys.size());
  for (const store::AggregateKey& key : keys) frames.entries.push_back({key, 0});
  HVPROF_TRYV(Build(frames, p_.frames_));
  p_.stacks_.reserve(counted.size());
  for (const store::CountedStack& stack : counted) {
    Stack out;
    out.domain = stack.key.domain;
    out.mode = stack.key.mode;
    out.event = stack.key.event;
    out.pid = stack.key.pid;
    out.vcpu = stack.key.vcpu;
    out.pcpu = stack.key.pcpu;
    out.tid = stack.key.tid;
    out.count = stack.count;
    out.frames.reserve(stack.length);
    for (size_t i = 0; i < stack.length; ++i) {
      out.frames.push_back(index.find(frame_key(stack, i))->second);
    }
    p_.stacks_.push_back(std::move(out));
  }
  NoteShallowImages();
  // A stable order: most samples first, then by frames.
  std::sort(p_.stacks_.begin(), p_.stacks_.end(), [](const Stack& a, const Stack& b) {
    return a.count != b.count ? a.count > b.count : a.frames < b.frames;
  });
  return Ok();
}

void ProfileBuilder::MarkIdleEntry(Entry& entry) const {
  const std::string_view symbol =
      entry.symbol < p_.symbols_.size() ? std::string_view(p_.symbols_[entry.symbol].name) : std::string_view();
  entry.idle = IsIdleSample(entry.domain, entry.mode, symbol);
}

void ProfileBuilder::MarkIdle(const store::Aggregate& aggregate) {
  for (Entry& entry : p_.entries_) MarkIdleEntry(entry);
  if (!aggregate.has_stacks || aggregate.entries.size() != p_.entries_.size()) return;
  // The stacks' sampled addresses, found among the entries (both keyed alike, the entries sorted).
  std::map<std::pair<uint16_t, uint8_t>, CpuIdle> per_cpu;
  for (const store::CountedStack& stack : aggregate.stacks) {
    if (stack.key.pcpu == hvprof::kUnknownPcpu || stack.length == 0) continue;
    const store::AggregateKey key{aggregate.Addresses(stack)[0], stack.key.pid, stack.key.domain, stack.key.mode,
                                  stack.key.event};
    const auto it = std::lower_bound(aggregate.entries.begin(), aggregate.entries.end(), key,
                                     [](const store::AggregateEntry& e, const store::AggregateKey& k) { return e.key < k; });
    CpuIdle& cpu = per_cpu[{stack.key.pcpu, stack.key.event}];
    cpu.cpu = stack.key.pcpu;
    cpu.event = stack.key.event;
    cpu.samples += stack.count;
    if (it != aggregate.entries.end() && it->key == key && p_.entries_[it - aggregate.entries.begin()].idle) {
      cpu.idle += stack.count;
    }
  }
  for (const auto& [key, cpu] : per_cpu) p_.cpu_idle_.push_back(cpu);
}

void ProfileBuilder::MarkIdleStacks() {
  for (Entry& frame : p_.frames_) MarkIdleEntry(frame);
  for (Stack& stack : p_.stacks_) {
    stack.idle = stack.domain == kIdleDomain || (!stack.frames.empty() && p_.frames_[stack.frames[0]].idle);
  }
}

void ProfileBuilder::NoteShallowImages() {
  // On a real machine every sampled function but a thread's first has a caller. When most of an
  // image's chains stop at the sampled function, the frame-pointer walk found no frame there:
  // the image was built without frame pointers. (The sim has no such walk: its scenario says
  // which functions have callers. Passive domains and the idle domain are sampled without
  // chains.)
  const store::SessionMetadata& m = p_.metadata_;
  if (m.backtrace_depth == 0 || m.platform == "sim") return;
  std::set<uint16_t> passive;
  for (const store::DomainRecord& domain : m.domains) {
    if (domain.role == "passive") passive.insert(domain.id);
  }
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> by_image;  // image -> (samples, one frame deep)
  for (const Stack& stack : p_.stacks_) {
    if (stack.frames.empty() || stack.domain == kIdleDomain || passive.count(stack.domain) != 0) continue;
    auto& [samples, shallow] = by_image[p_.frames_[stack.frames[0]].image];
    samples += stack.count;
    if (stack.frames.size() == 1) shallow += stack.count;
  }
  constexpr uint64_t kEnough = 50;
  for (const auto& [image, counts] : by_image) {
    const auto [samples, shallow] = counts;
    if (samples < kEnough || shallow * 2 < samples) continue;
    p_.stack_notes_.push_back(fmt::format(
        "{}: {} of its {} sampled stacks ({:.0f}%) stop at the sampled function: it was probably built without frame "
        "pointers, so its callers are unknown (rebuild it with -fno-omit-frame-pointer to see them)",
        p_.images_[image].long_name, shallow, samples, 100.0 * static_cast<double>(shallow) / static_cast<double>(samples)));
  }
}

namespace {

// What a report of an aggregate needs of the context, from the aggregate: its images, numbered as
// context.hvc numbers them, and the regions its per-process addresses fell in, in time order.
void ContextOfAggregate(const store::Aggregate& counted, store::ContextIndex& context) {
  for (const store::AggregateImage& image : counted.images) {
    store::ContextEvent named;
    named.kind = store::ContextKind::kImage;
    named.image = image.id;
    named.path = image.path;
    named.build_id = image.build_id;
    context.Apply(named);
  }
  std::vector<const store::AggregateRegion*> regions;
  for (const store::AggregateRegion& region : counted.regions) regions.push_back(&region);
  std::stable_sort(regions.begin(), regions.end(), [](auto* a, auto* b) { return a->time_ns < b->time_ns; });
  for (const store::AggregateRegion* region : regions) {
    store::ContextEvent mapped;
    mapped.kind = store::ContextKind::kMapping;
    mapped.domain = region->domain;
    mapped.pid = region->pid;
    mapped.time_ns = region->time_ns;
    mapped.start = region->start;
    mapped.end = region->end;
    mapped.path = region->path;
    context.Apply(mapped);
  }
}

}  // namespace

// The sum of an aggregate's counts, which UsableAggregate checked (or, from the raw samples, one
// per sample read) cannot wrap.
static uint64_t TotalCount(const store::Aggregate& counted) {
  uint64_t sum = 0;
  for (const store::AggregateEntry& entry : counted.entries) sum += entry.count;
  return sum;
}

std::optional<store::Aggregate> ProfileBuilder::UsableAggregate(Profile& profile, const LoadOptions& options,
                                                                const std::string& path, uint64_t samples_bytes) {
  // A samples file shorter than the metadata says was cut: its aggregate cannot be trusted.
  // An aggregate without stacks (an older one, or one whose stacks were too many to keep) serves
  // no stack view: then the one raw pass counts both.
  if (!options.use_aggregate || samples_bytes < profile.metadata_.samples_file_bytes) return std::nullopt;
  auto read = store::ReadAggregate(path);
  if (!read) {
    if (read.error().kind() == ErrorKind::kCorrupt) {
      profile.problems_.push_back(read.error().message() + "; the raw samples were read instead");
    }
    return std::nullopt;
  }
  const store::Aggregate& a = read.value();
  // Counted across processes (by image, and the kernel's and hypervisor's code), it cannot tell
  // processes apart; stacks merged across threads cannot give pprof its thread labels: those
  // views count the raw samples.
  const bool by_image = std::any_of(a.entries.begin(), a.entries.end(),
                                    [](const store::AggregateEntry& entry) { return entry.key.pid == store::kAnyProcess; });
  const bool by_thread = std::any_of(a.stacks.begin(), a.stacks.end(),
                                     [](const store::CountedStack& stack) { return stack.key.tid != hvprof::kNoTid; });
  if (a.source_bytes != samples_bytes || (options.stacks && !a.has_stacks) || (options.processes && by_image) ||
      (options.stack_threads && !a.stacks.empty() && !by_thread)) {
    return std::nullopt;
  }
  // The aggregate is a cache of samples.hvs; one that counts other than what the session stored
  // (or more than a number holds) is forged or damaged, and is not used. Counts are checked once,
  // here: every sum a view makes is of a subset of these entries, so none can wrap.
  uint64_t sum = 0;
  bool overflow = false;
  for (const store::AggregateEntry& entry : a.entries) overflow |= __builtin_add_overflow(sum, entry.count, &sum);
  const uint64_t stored = profile.metadata_.samples_stored;
  // Its stacks count what its entries count (the reader checked that they add up to its total).
  if (overflow || (stored != 0 && sum != stored) || (a.has_stacks && a.samples != sum)) {
    profile.problems_.push_back(fmt::format(
        "{} is damaged: it counts {} samples where {} says the session stored {}; it was ignored and the raw "
        "samples read instead",
        path, overflow ? std::string("more than 2^64") : std::to_string(sum), store::kMetadataFile, stored));
    return std::nullopt;
  }
  return std::move(read).value();
}

Result<store::Aggregate> ProfileBuilder::ReadRawSamples(Profile& profile, const LoadOptions& options,
                                                        const std::string& samples,
                                                        const store::Translation& translation) {
  const store::SessionMetadata& m = profile.metadata_;
  store::ReadSummary summary;
  const auto id = store::ParseSessionId(m.session_id);
  HVPROF_TRY(raw, store::AggregateSamplesFile(samples, &summary,
                                              id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt,
                                              !options.stacks         ? store::StackDetail::kNone
                                              : options.stack_threads ? store::StackDetail::kStacksByThread
                                                                      : store::StackDetail::kStacks,
                                              {}, 0, translation));
  for (const store::FileProblem& problem : summary.problems) {
    profile.problems_.push_back(fmt::format("{} at byte {}: {}", samples, problem.offset, problem.description));
  }
  if (summary.next_sequence < m.samples_file_chunks) {
    profile.problems_.push_back(fmt::format(
        "{} ends after chunk {} where the session had written {} chunks: the file was cut short and the samples "
        "of the last {} chunks are lost",
        samples, summary.next_sequence == 0 ? std::string("none") : std::to_string(summary.next_sequence - 1),
        m.samples_file_chunks, m.samples_file_chunks - summary.next_sequence));
  }
  return raw;
}

void ProfileBuilder::NoteSessionState(Profile& profile, std::optional<uint64_t> samples_bytes) {
  const store::SessionMetadata& m = profile.metadata_;
  const std::string samples = profile.directory_ + "/" + store::kSamplesFile;
  if (samples_bytes && *samples_bytes < m.samples_file_bytes) {
    profile.problems_.push_back(fmt::format("{} holds {} bytes where the session had written {}: it was truncated",
                                            samples, *samples_bytes, m.samples_file_bytes));
  }
  if (!samples_bytes) profile.problems_.push_back(fmt::format("{} has no samples file", profile.directory_));
  for (const std::string& reason : m.incomplete) profile.problems_.push_back("the session is incomplete: " + reason);
  if (!m.profiling.empty() && m.profiling.back().stop_ns == 0) {
    if (store::SessionWriterAlive(profile.directory_)) {
      profile.metadata_.notes.push_back(
          "profiling is still on: this is the session as hvprofd last wrote it (`hvprof --dump` writes it now)");
    } else {
      profile.problems_.push_back(
          "the session is incomplete: profiling was never stopped, and no hvprofd is writing it (it died or was "
          "killed); the samples it had not yet written were lost uncounted. `hvprof --start-daemon` with the same "
          "--session-dir recovers and continues the session");
    }
  }
}

Result<Profile> ProfileBuilder::Load(const std::string& directory, const LoadOptions& options) {
  HVPROF_TRY(session, store::OpenSession(directory));
  Profile profile;
  profile.metadata_ = std::move(session.metadata);
  profile.directory_ = session.directory;
  // Each note once: sessions written before hvprofd kept them apart said some twice (a
  // continued session carried its first hvprofd's notes, and the new one said them again).
  std::vector<std::string> notes;
  for (std::string& note : profile.metadata_.notes) {
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(std::move(note));
  }
  profile.metadata_.notes = std::move(notes);
  const std::string samples = profile.directory_ + "/" + store::kSamplesFile;
  const std::string aggregate_path = profile.directory_ + "/" + store::kAggregateFile;
  struct stat st {};
  const bool have_samples = ::stat(samples.c_str(), &st) == 0;
  const Stopwatch reading;
  // The processes the samples ran in: context.hvc, as hvprofd wrote it while profiling; in a
  // session from before it, the processes session.json lists (each alive the whole session).
  // A report counted from an aggregate that lists the regions its per-process addresses fell in
  // needs none of it: user code is counted by image, the aggregate names the images and regions,
  // and session.json counts the processes. After a day of a host that starts processes all day
  // context.hvc is hundreds of megabytes, and `hvprof run` prints this report as its run ends.
  // Otherwise it is read on a thread of its own while the aggregate is read.
  auto context = std::make_shared<store::ContextIndex>();
  const std::string context_path = profile.directory_ + "/" + store::kContextFile;
  struct stat context_st {};
  const bool may_skip_context = options.use_aggregate && have_samples && !options.processes &&
                                profile.metadata_.context.has_value() && ::stat(context_path.c_str(), &context_st) == 0;
  std::optional<Result<store::ContextReadSummary>> context_read;
  std::jthread context_reader;
  if (!may_skip_context) {
    context_reader = std::jthread([&context_read, &context, &context_path, &profile] {
      context_read.emplace(store::ReadContextFile(context_path, profile.metadata_.session_id, *context));
    });
  }
  bool context_taken = false;
  const auto take_context = [&] {
    if (context_taken) return;
    context_taken = true;
    if (context_reader.joinable()) {
      context_reader.join();
    } else {
      context_read.emplace(store::ReadContextFile(context_path, profile.metadata_.session_id, *context));
    }
    if (!context_read->has_value()) {
      profile.problems_.push_back(context_read->error().message() + "; user samples are shown by process and address");
    } else if (context_read->value().present) {
      profile.has_context_file_ = true;
      for (const store::FileProblem& problem : context_read->value().problems) {
        profile.problems_.push_back(fmt::format("{} at byte {}: {}", context_path, problem.offset, problem.description));
      }
    } else {
      store::ContextFromMetadata(profile.metadata_, *context);
    }
    profile.context_ = context;
    profile.context_summary_ = {context->processes(), context->images().size(), context->Domains()};
  };
  // The aggregate's images and regions: all the builder asks of the context (a view that needs
  // the processes themselves makes Profile::context() read the file).
  const auto take_regions = [&](const store::Aggregate& counted) {
    context_taken = true;
    ContextOfAggregate(counted, *context);
    profile.has_context_file_ = true;
    profile.context_ = context;
    profile.context_summary_ = *profile.metadata_.context;
    profile.whole_context_ = std::make_shared<Profile::WholeContext>();
  };
  profile.keeps_pids_ = options.processes;
  std::optional<store::Aggregate> usable =
      have_samples ? UsableAggregate(profile, options, aggregate_path, static_cast<uint64_t>(st.st_size)) : std::nullopt;
  const bool from_aggregate = usable.has_value();
  store::Aggregate aggregate = from_aggregate ? std::move(*usable) : store::Aggregate();
  if (from_aggregate && may_skip_context && aggregate.has_regions) take_regions(aggregate);
  take_context();
  const store::Translation translation{profile.has_context_file_ ? profile.context_.get() : nullptr,
                                       options.processes};
  if (!from_aggregate && have_samples) {
    HVPROF_TRY(raw, ReadRawSamples(profile, options, samples, translation));
    aggregate = std::move(raw);
  }
  NoteSessionState(profile, have_samples ? std::optional<uint64_t>(st.st_size) : std::nullopt);
  std::vector<PublishedProfile> published;
  if (options.all_domains) published = ProfileBuilder::ReadPublished(profile, &aggregate, TotalCount(aggregate));
  profile.timings_.read_seconds = reading.Seconds();
  profile.timings_.from_aggregate = from_aggregate;
  ProfileBuilder builder(profile, options);
  for (const PublishedProfile& guest : published) builder.published_domains.push_back(guest.domain);
  if (options.debuginfod) {
    auto client = sym::Debuginfod::FromEnvironment();
    if (client) builder.debuginfod = std::move(client).value();
    else profile.problems_.push_back(client.error().message() + "; no images were asked for there");
  }
  HVPROF_TRYV(builder.Build(aggregate, profile.entries_));
  if (from_aggregate && aggregate.time_slices != 0 && published.empty()) {
    profile.time_slices_ = aggregate.time_slices;
    profile.slice_counts_ = std::move(aggregate.slice_counts);
  }
  builder.AddPublishedSymbols(published);
  builder.MarkIdle(aggregate);
  if (have_samples && published.empty()) {
    HVPROF_TRY(split, builder.SplitJitByTime(samples));
    // The aggregate's per-entry time slices no longer line up: Slice counts them again.
    if (split) {
      profile.time_slices_ = 0;
      profile.slice_counts_.clear();
    }
  }
  if (options.stacks) {
    HVPROF_TRYV(builder.BuildStacks(CollectStacks(aggregate, options.stack_threads)));
    builder.MarkIdleStacks();
  }
  profile.loaded_directory_ = profile.directory_;
  if (!options.shown_directory.empty()) profile.directory_ = options.shown_directory;
  return profile;
}

Result<std::vector<uint32_t>> ProfileBuilder::Slice(const Profile& profile, uint32_t slices) {
  if (slices == 0) return std::vector<uint32_t>{};
  if (!profile.published_.empty()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "the profiles guests published (--all-domains) hold no samples to cut into time slices");
  }
  // Each entry's count per slice: from the aggregate's time spans when it has at least as many
  // (hvprofd counts up to 64 spans of equal length, doubling their length as the session grows:
  // slice k is spans [k*n/slices, (k+1)*n/slices), so slices differ by at most one span in
  // length, and the last span may be partly empty), else from the samples, in one pass.
  std::vector<uint32_t> counts;  // entry-major
  const uint32_t spans = profile.time_slices_;
  if (spans >= slices && profile.slice_counts_.size() == profile.entries_.size() * spans) {
    counts.assign(profile.entries_.size() * slices, 0);
    std::vector<uint32_t> slice_of(spans);
    for (uint32_t span = 0; span < spans; ++span) {
      slice_of[span] = static_cast<uint32_t>(uint64_t{span} * slices / spans);
    }
    for (size_t e = 0; e < profile.entries_.size(); ++e) {
      for (uint32_t span = 0; span < spans; ++span) {
        uint32_t& count = counts[e * slices + slice_of[span]];
        if (__builtin_add_overflow(count, profile.slice_counts_[e * spans + span], &count)) {
          return MakeError(ErrorKind::kInvalidArgument, "{}: a sample's count in one time slice is beyond 32 bits",
                           profile.loaded_directory_);
        }
      }
    }
  } else {
    // Equal spans of the platform's clock from the first sample to the last (the file's order
    // is the order the agent drained the rings in, a vCPU at a time: not time).
    const std::string path = profile.loaded_directory_ + "/" + store::kSamplesFile;
    const auto id = store::ParseSessionId(profile.metadata_.session_id);
    const auto session = id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt;
    uint64_t first = profile.metadata_.first_sample_ns;
    uint64_t last = profile.metadata_.last_sample_ns;
    if (last <= first) {
      first = UINT64_MAX;
      last = 0;
      HVPROF_TRY(scanned, store::ReadSamplesFile(
                              path,
                              [&](const store::StoredSample& s) {
                                first = std::min(first, s.time_ns);
                                last = std::max(last, s.time_ns);
                              },
                              session));
      (void)scanned;
    }
    // The whole context (a profile of an aggregate may hold only its regions).
    const store::Translation translation{profile.has_context_file_ ? &profile.context() : nullptr,
                                         profile.keeps_pids_};
    HVPROF_TRY(counted, store::AggregateSamplesFile(path, nullptr, session, store::StackDetail::kNone,
                                                    {slices, first, last}, 0, translation));
    if (counted.time_slices != slices) {
      return MakeError(ErrorKind::kInvalidArgument, "{}: a sample's count in one time slice is beyond 32 bits", path);
    }
    // Both sorted by key: the profile's entries find their counts in one merge. A key the profile
    // does not have (the file grew since it was loaded) is left out.
    std::vector<std::pair<store::AggregateKey, uint32_t>> index;
    index.reserve(profile.entries_.size());
    for (size_t e = 0; e < profile.entries_.size(); ++e) {
      const Entry& entry = profile.entries_[e];
      index.push_back({store::AggregateKey{entry.ip, entry.pid, entry.domain, entry.mode, entry.event},
                       static_cast<uint32_t>(e)});
    }
    std::sort(index.begin(), index.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
    counts.assign(profile.entries_.size() * slices, 0);
    size_t at = 0;
    for (size_t i = 0; i < counted.entries.size(); ++i) {
      while (at < index.size() && index[at].first < counted.entries[i].key) ++at;
      if (at == index.size()) break;
      if (!(index[at].first == counted.entries[i].key)) continue;
      // An address named apart by time (JIT code replaced there) is counted below, by time.
      if (at + 1 < index.size() && index[at + 1].first == counted.entries[i].key) continue;
      std::copy_n(counted.slice_counts.begin() + static_cast<ptrdiff_t>(i * slices), slices,
                  counts.begin() + static_cast<ptrdiff_t>(index[at].second) * slices);
    }
    HVPROF_TRYV(CountTimeSplits(profile, store::TimeSlicing{slices, first, last}, counts));
  }
  return counts;
}

Result<void> ProfileBuilder::CountTimeSplits(const Profile& profile, const store::TimeSlicing& slicing,
                                             std::vector<uint32_t>& counts) {
  const uint32_t slices = slicing.count;
  if (!profile.time_splits_.empty()) {
    // The entries one address was split into, by the span of their samples' times.
    std::map<std::tuple<uint16_t, uint32_t, uint8_t, uint8_t, uint64_t>, std::vector<Profile::TimeSplit>> splits;
    for (const Profile::TimeSplit& split : profile.time_splits_) {
      const Entry& entry = profile.entries_[split.entry];
      splits[{entry.domain, entry.pid, entry.mode, entry.event, entry.ip}].push_back(split);
      std::fill_n(counts.begin() + static_cast<ptrdiff_t>(split.entry * slices), slices, 0);
    }
    const std::string path = profile.loaded_directory_ + "/" + store::kSamplesFile;
    const auto id = store::ParseSessionId(profile.metadata_.session_id);
    HVPROF_TRY(scanned, store::ReadSamplesFile(
                            path,
                            [&](const store::StoredSample& s) {
                              const auto found = splits.find({s.domain, s.pid, s.mode, s.event, s.ip});
                              if (found == splits.end()) return;
                              for (const Profile::TimeSplit& split : found->second) {
                                if (s.time_ns < split.first_ns || s.time_ns > split.last_ns) continue;
                                ++counts[split.entry * slices + slicing.SliceOf(s.time_ns)];
                                break;
                              }
                            },
                            id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt));
    (void)scanned;
  }
  return Ok();
}

Result<std::vector<uint32_t>> SliceCounts(const Profile& profile, uint32_t slices) {
  return ProfileBuilder::Slice(profile, slices);
}

Result<Profile> LoadProfile(const std::string& directory, const LoadOptions& options) {
  return ProfileBuilder::Load(directory, options);
}

}  // namespace hvprof::report
