#include "hvprof/symbolizer/symbolizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <list>
#include <numeric>
#include <set>
#include <unordered_map>

#include "image.h"
#include "radix_sort.h"

namespace hvprof::symbolizer {
namespace {

// What a cached image was opened from; a change means the file must be opened again.
struct FileIdentity {
  int error = 0;  // errno of stat(), 0 if it exists
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;

  bool operator==(const FileIdentity&) const = default;
};

FileIdentity StatIdentity(const std::string& path) {
  FileIdentity id;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    id.error = errno;
    return id;
  }
  id.device = st.st_dev;
  id.inode = st.st_ino;
  id.size = st.st_size;
  id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return id;
}

struct CacheEntry {
  std::string key;
  FileIdentity identity;
  std::shared_ptr<Image> image;  // null if opening or preparing it failed
  ImageFailure failure;
  bool failure_reported = false;
  std::set<std::string> mismatches_reported;
  uint64_t bytes = 0;
};

// Working memory of Symbolize, kept from batch to batch.
struct Scratch {
  SortScratch sort;
  std::vector<uint32_t> pending;
  std::vector<uint64_t> image_addresses;
};

struct RequestStatus {
  ImageStatus status;
  ErrorKind kind = ErrorKind::kInternal;
};

Result<std::string> CheckSpec(const ImageSpec& spec) {
  if (spec.path.empty()) {
    return MakeError(ErrorKind::kInvalidArgument, "image spec: no path given");
  }
  std::string expected;
  if (!spec.expected_build_id.empty() &&
      !NormalizeBuildIdHex(spec.expected_build_id, &expected)) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "image spec for {}: expected build-id '{}' is not an even-length hex string",
                     spec.path, spec.expected_build_id);
  }
  return expected;
}

}  // namespace

class Symbolizer::Impl {
 public:
  explicit Impl(SymbolizerOptions options) : options_(std::move(options)) {}

  CacheEntry* Acquire(const ImageSpec& spec) {
    std::string key = fmt::format("{}:{}:{}", static_cast<int>(spec.format), spec.path,
                                  spec.debug_file);
    FileIdentity identity = StatIdentity(spec.path);
    auto found = index_.find(key);
    if (found != index_.end()) {
      if (found->second->identity == identity) {
        ++stats_.hits;
        lru_.splice(lru_.begin(), lru_, found->second);
        return &lru_.front();
      }
      lru_.erase(found->second);
      index_.erase(found);
    }
    CacheEntry entry;
    entry.key = key;
    entry.identity = identity;
    ++stats_.opens;
    auto opened = spec.format == ImageFormat::kElf ? OpenElfImage(spec, options_)
                                                   : OpenKernelImage(spec);
    if (opened) {
      entry.image = std::shared_ptr<Image>(std::move(opened.value()));
      entry.bytes = entry.image->FootprintBytes();
    } else {
      entry.failure = opened.error();
      entry.bytes = 256 + entry.failure.detail.size();
    }
    lru_.push_front(std::move(entry));
    index_[key] = lru_.begin();
    return &lru_.front();
  }

  // The status of `entry` for this request; prepares the image's tables on first use.
  RequestStatus Status(CacheEntry* entry, const ImageSpec& spec, const std::string& expected) {
    RequestStatus out;
    ImageStatus& st = out.status;
    st.path = spec.path;
    if (entry->image != nullptr && !expected.empty() && entry->image->build_id() != expected) {
      st.reason = Reason::kBuildIdMismatch;
      const std::string& actual = entry->image->build_id();
      st.detail = actual.empty()
                      ? fmt::format("{} has no build-id, expected {}: cannot tell whether it is "
                                    "the image that was profiled",
                                    spec.path, expected)
                      : fmt::format("{} has build-id {}, expected {}: it is not the image that "
                                    "was profiled (rebuilt or upgraded since?)",
                                    spec.path, actual, expected);
      st.first_report = entry->mismatches_reported.insert(expected).second;
      out.kind = ErrorKind::kInvalidArgument;
      return out;
    }
    if (entry->image != nullptr) {
      auto prepared = entry->image->Prepare();
      if (!prepared) {
        entry->failure = prepared.error();
        st.warnings = entry->image->TakeWarnings();
        entry->image.reset();
        entry->bytes = 256 + entry->failure.detail.size();
      } else {
        st.warnings = entry->image->TakeWarnings();
        return out;
      }
    }
    st.reason = entry->failure.reason;
    st.detail = entry->failure.detail;
    st.first_report = !entry->failure_reported;
    entry->failure_reported = true;
    out.kind = entry->failure.kind;
    return out;
  }

  // Updates the footprint of `used` and evicts least-recently-used images beyond the bounds.
  void Trim(CacheEntry* used) {
    if (used != nullptr && used->image != nullptr) used->bytes = used->image->FootprintBytes();
    uint64_t total = 0;
    for (const CacheEntry& e : lru_) total += e.bytes;
    while (!lru_.empty() && &lru_.back() != used &&
           (lru_.size() > options_.max_cached_images || total > options_.max_cached_bytes)) {
      total -= lru_.back().bytes;
      index_.erase(lru_.back().key);
      lru_.pop_back();
      ++stats_.evictions;
    }
  }

  CacheStats Stats() const {
    CacheStats s = stats_;
    s.images = lru_.size();
    s.bytes = 0;
    for (const CacheEntry& e : lru_) s.bytes += e.bytes;
    return s;
  }

  void Clear() {
    index_.clear();
    lru_.clear();
  }

  Scratch& scratch() { return scratch_; }

 private:
  SymbolizerOptions options_;
  Scratch scratch_;
  std::list<CacheEntry> lru_;
  std::unordered_map<std::string, std::list<CacheEntry>::iterator> index_;
  CacheStats stats_;
};

Symbolizer::Symbolizer(SymbolizerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
Symbolizer::~Symbolizer() = default;
Symbolizer::Symbolizer(Symbolizer&&) noexcept = default;
Symbolizer& Symbolizer::operator=(Symbolizer&&) noexcept = default;

Result<BatchResult> Symbolizer::Symbolize(const ImageSpec& image,
                                          std::span<const uint64_t> addresses,
                                          const LookupOptions& options) {
  return Symbolize(std::span<const ImageSpec>(&image, 1), addresses, options);
}

Result<BatchResult> Symbolizer::Symbolize(std::span<const ImageSpec> chain,
                                          std::span<const uint64_t> addresses,
                                          const LookupOptions& options) {
  BatchResult result;
  HVPROF_TRYV(Symbolize(chain, addresses, options, &result));
  return result;
}

Result<void> Symbolizer::Symbolize(std::span<const ImageSpec> chain,
                                   std::span<const uint64_t> addresses,
                                   const LookupOptions& options, BatchResult* result) {
  if (result->data_ == nullptr) result->data_ = std::make_unique<BatchResult::Data>();
  BatchResult::Data& d = *result->data_;
  d.Clear();
  if (chain.empty()) return MakeError(ErrorKind::kInvalidArgument, "symbolize: no image given");
  if (chain.size() > 255) {
    return MakeError(ErrorKind::kInvalidArgument, "symbolize: more than 255 images in a chain");
  }
  if (addresses.size() >= UINT32_MAX) {
    return MakeError(ErrorKind::kInvalidArgument, "symbolize: too many addresses in one batch");
  }
  std::vector<std::string> expected;
  for (const ImageSpec& spec : chain) {
    HVPROF_TRY(normalized, CheckSpec(spec));
    expected.push_back(std::move(normalized));
  }

  // Sort and deduplicate (in the Symbolizer's scratch vectors, which keep their memory from
  // batch to batch).
  Scratch& scratch = impl_->scratch();
  d.index.resize(addresses.size());
  d.entries.reserve(addresses.size());
  SortKeys(addresses, &scratch.sort, [&d](uint64_t address, uint32_t position) {
    if (d.entries.empty() || d.entries.back().address != address) {
      BatchEntry& e = d.entries.emplace_back();
      e.address = address;
    }
    d.index[position] = static_cast<uint32_t>(d.entries.size() - 1);
  });
  d.frames.reserve(d.entries.size() + d.entries.size() / 4);

  std::vector<uint32_t>& pending = scratch.pending;
  pending.resize(d.entries.size());
  std::iota(pending.begin(), pending.end(), 0u);
  std::vector<uint64_t>& image_addresses = scratch.image_addresses;
  BatchBuilder builder(&d);
  for (size_t j = 0; j < chain.size(); ++j) {
    const ImageSpec& spec = chain[j];
    const auto image_index = static_cast<uint8_t>(j);
    if (pending.empty()) {
      ImageStatus unused;
      unused.path = spec.path;
      d.images.push_back(std::move(unused));
      continue;
    }
    CacheEntry* entry = impl_->Acquire(spec);
    RequestStatus request = impl_->Status(entry, spec, expected[j]);
    ImageStatus& status = request.status;
    builder.BeginImage(pending, spec.bias, image_index);
    if (status.reason != Reason::kNone) {
      uint32_t detail = builder.View(builder.Keep(status.detail));
      for (size_t k = 0; k < pending.size(); ++k) builder.ImageFailed(k, status.reason, detail);
      d.images.push_back(std::move(status));
      impl_->Trim(entry);
      continue;
    }
    // Image addresses. Subtracting the bias keeps the order unless it wraps around zero.
    image_addresses.resize(pending.size());
    for (size_t k = 0; k < pending.size(); ++k) {
      image_addresses[k] = d.entries[pending[k]].address - spec.bias;
    }
    if (!std::is_sorted(image_addresses.begin(), image_addresses.end())) {
      std::vector<std::pair<uint64_t, uint32_t>> order(pending.size());
      for (size_t k = 0; k < pending.size(); ++k) order[k] = {image_addresses[k], pending[k]};
      std::sort(order.begin(), order.end());
      for (size_t k = 0; k < pending.size(); ++k) {
        image_addresses[k] = order[k].first;
        pending[k] = order[k].second;
      }
      builder.BeginImage(pending, spec.bias, image_index);
    }
    std::shared_ptr<Image> image = entry->image;
    image->Resolve(image_addresses, options, &builder);
    for (std::string& w : image->TakeWarnings()) status.warnings.push_back(std::move(w));
    d.images.push_back(std::move(status));
    d.keep_alive.push_back(image);
    impl_->Trim(entry);
    if (j + 1 < chain.size()) {
      std::erase_if(pending, [&d](uint32_t id) { return d.entries[id].answered; });
    }
  }
  return Ok();
}

Result<std::vector<FunctionSymbol>> Symbolizer::ListFunctions(const ImageSpec& image,
                                                              const ListOptions& options) {
  HVPROF_TRY(expected, CheckSpec(image));
  CacheEntry* entry = impl_->Acquire(image);
  RequestStatus request = impl_->Status(entry, image, expected);
  if (request.status.reason != Reason::kNone) {
    return Error(request.kind, request.status.detail);
  }
  std::shared_ptr<Image> keep = entry->image;
  std::vector<FunctionSymbol> functions = keep->ListFunctions(image.bias, options);
  impl_->Trim(entry);
  return functions;
}

Result<ImageInfo> Symbolizer::Describe(const ImageSpec& image) {
  HVPROF_TRY(expected, CheckSpec(image));
  CacheEntry* entry = impl_->Acquire(image);
  RequestStatus request = impl_->Status(entry, image, expected);
  if (request.status.reason != Reason::kNone) {
    return Error(request.kind, request.status.detail);
  }
  std::shared_ptr<Image> keep = entry->image;
  ImageInfo info = keep->Describe();
  info.warnings = std::move(request.status.warnings);
  for (std::string& w : keep->TakeWarnings()) info.warnings.push_back(std::move(w));
  impl_->Trim(entry);
  return info;
}

CacheStats Symbolizer::cache_stats() const { return impl_->Stats(); }

void Symbolizer::ClearCache() { impl_->Clear(); }

BatchResult::BatchResult() = default;
BatchResult::~BatchResult() = default;
BatchResult::BatchResult(BatchResult&&) noexcept = default;
BatchResult& BatchResult::operator=(BatchResult&&) noexcept = default;

size_t BatchResult::size() const { return data_ != nullptr ? data_->index.size() : 0; }

size_t BatchResult::unique_count() const {
  return data_ != nullptr ? data_->entries.size() : 0;
}

Symbolization BatchResult::operator[](size_t index) const {
  return unique(data_->index[index]);
}

size_t BatchResult::unique_index(size_t index) const { return data_->index[index]; }

std::span<const uint32_t> BatchResult::unique_indexes() const {
  return data_ != nullptr ? std::span<const uint32_t>(data_->index) : std::span<const uint32_t>();
}

Symbolization BatchResult::unique(size_t unique) const {
  const BatchEntry& e = data_->entries[unique];
  Symbolization s;
  s.address = e.address;
  s.frames = std::span<const Frame>(data_->frames.data() + e.frame_begin, e.frame_count);
  s.reason = e.reason;
  s.detail = data_->views[e.detail];
  s.module = data_->views[e.module];
  s.image_index = e.image_index;
  return s;
}

const std::vector<ImageStatus>& BatchResult::images() const {
  static const std::vector<ImageStatus> kNone;
  return data_ != nullptr ? data_->images : kNone;
}

}  // namespace hvprof::symbolizer
