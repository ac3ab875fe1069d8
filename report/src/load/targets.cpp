// What each sample is symbolized against (its target: an image and its bias), and the symbolizing.
#include "profile_builder.h"

#include "hvprof/buildid_cache/cache.h"

namespace hvprof::report {

const store::DomainRecord* ProfileBuilder::FindDomain(uint16_t id) const {
  for (const auto& domain : p_.metadata.domains) {
    if (domain.id == id) return &domain;
  }
  return nullptr;
}

const store::ImageRecord* ProfileBuilder::FindImage(const std::string& role,
                                                    std::optional<uint16_t> domain) const {
  for (const auto& image : p_.metadata.images) {
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
  auto [it, added] = image_index_.emplace(name, static_cast<uint32_t>(p_.images.size()));
  if (added) {
    Image image;
    image.name = name;
    image.path = path;
    image.long_name = path.empty() ? name : path;
    image.has_symbols = has_symbols;
    p_.images.push_back(image);
  }
  return it->second;
}

uint32_t ProfileBuilder::SymbolIndex(uint32_t image, const std::string& name, uint64_t start,
                                     bool resolved, const std::string& reason) {
  std::string key = std::to_string(image);
  key += '\0';
  key += name;
  auto [it, added] = symbol_index_.emplace(std::move(key), static_cast<uint32_t>(p_.symbols.size()));
  if (added) p_.symbols.push_back({image, name, start, resolved, reason});
  return it->second;
}

uint32_t ProfileBuilder::LineIndex(std::string_view file, uint32_t line) {
  std::string key(file);
  key += ':';
  key += std::to_string(line);
  auto [it, added] = line_index_.emplace(std::move(key), static_cast<uint32_t>(p_.lines.size()));
  if (added) p_.lines.push_back({std::string(file), line});
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
  } else if (const store::ContextImage* image = p_.context->image(id)) {
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
  const bool guest_session = p_.metadata.role == "guest";

  auto target = [&](const std::string& key) -> Target& { return targets_[key]; };
  if (mode == kHypervisor || domain == kIdleDomain) {
    const store::ImageRecord* xen = FindImage("hypervisor", std::nullopt);
    // On linux the "hypervisor" is the host kernel, the same image whichever domain ran.
    const bool host_kernel = p_.metadata.platform == "linux" && xen != nullptr;
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
  const store::ContextIndex& context = *p_.context;
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
  auto& notes = p_.metadata.notes;
  if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
}

void ProfileBuilder::FromBuildIdCache(const Target& target, sym::ImageSpec& spec) {
  std::string id;
  if (build_id_caches_.empty() || !sym::NormalizeBuildIdHex(target.build_id, &id) || id.empty()) return;
  if (auto here = symbolizer_.Describe(spec); here && here.value().build_id == id) return;  // still the one sampled
  const std::string cached = buildid_cache::FindImage(build_id_caches_, id);
  if (cached.empty()) return;
  sym::ImageSpec from_cache = spec;
  from_cache.path = cached;
  // Its debug file from beside it, when hvprofd kept one: only for an image taken from the cache.
  std::error_code ec;
  if (std::filesystem::is_regular_file(cached + ".debug", ec)) from_cache.debug_file = cached + ".debug";
  if (auto found = symbolizer_.Describe(from_cache); !found || found.value().build_id != id) return;
  spec.path = cached;
  spec.debug_file = from_cache.debug_file;
  NoteOnce(fmt::format("{} was rebuilt or removed since: its symbols are those of the copy in the build-id cache, {}",
                       target.path, cached));
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
  if (spec.format == sym::ImageFormat::kElf && !target.build_id.empty()) FromBuildIdCache(target, spec);
  if (debuginfod && spec.format == sym::ImageFormat::kElf && !target.build_id.empty()) AskDebuginfod(target, spec);
  std::vector<uint64_t> addresses;
  addresses.reserve(target.entries.size());
  for (size_t e : target.entries) addresses.push_back((*out_)[e].address);
  sym::LookupOptions lookup;
  const bool inlines = options_.inlines && out_ == &p_.frames;
  lookup.detail = inlines ? sym::Detail::kInlines : lines ? sym::Detail::kLines : sym::Detail::kFunctions;
  lookup.demangle = options_.demangle;
  {
    // Opening the image through the cache first splits table loading from lookups in the
    // timings; an image that fails is reported by Symbolize below.
    const Stopwatch loading;
    (void)symbolizer_.Describe(spec);
    p_.timings.symbol_tables_seconds += loading.Seconds();
  }
  const Stopwatch resolving;
  auto batch = symbolizer_.Symbolize(spec, addresses, lookup);
  const uint32_t main_image = ImageIndex(target.name, target.path, true);
  if (!batch) {
    p_.images[main_image].has_symbols = false;
    p_.images[main_image].problem = batch.error().message();
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
    Image& image = p_.images[main_image];
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
        chain_of[u] = static_cast<uint32_t>(p_.inline_chains.size());
        p_.inline_chains.push_back(std::move(chain));
      }
    } else if (!p_.images[main_image].has_symbols) {
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
  p_.timings.resolve_seconds += resolving.Seconds();
}

Result<void> ProfileBuilder::Build(const store::Aggregate& aggregate, std::vector<Entry>& out) {
  for (const store::AggregateImage& image : aggregate.images) aggregate_images_[image.id] = image;
  const Stopwatch attributing;
  Target* last_target = nullptr;
  store::AggregateKey last_key{};
  uint64_t last_low = 0, last_high = 0;
  out_ = &out;
  targets_.clear();
  p_.timings.distinct_addresses += aggregate.entries.size();
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
    p_.total += source.count;
    // User code counted by image (hvprofd resolved it as it came), or, in a session from before
    // context.hvc, resolved now through the processes session.json lists.
    uint32_t image_id = 0;
    if (source.key.mode == kUser && store::IsImageWord(source.key.ip)) {
      image_id = store::ImageOfWord(source.key.ip);
      entry.address = store::AddressOfWord(source.key.ip);
    } else if (source.key.mode == kUser && !p_.has_context_file && source.key.domain != kIdleDomain) {
      if (const auto resolved = p_.context->Resolve(source.key.domain, source.key.pid, UINT64_MAX, source.key.ip)) {
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
  p_.timings.attribute_seconds += attributing.Seconds();
  // Symbolizing a large session's images can take a while: a progress line on a terminal.
  Progress progress(out_ == &p_.frames ? "hvprof-report: symbolizing call-stack frames, images" : "hvprof-report: symbolizing images",
                    targets_.size());
  for (auto& [key, target] : targets_) {
    Symbolize(target);
    progress.Advance();
  }
  return Ok();
}

}  // namespace hvprof::report
