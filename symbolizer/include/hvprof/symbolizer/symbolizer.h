// The symbolizer: turns runtime addresses into functions, source lines and inline chains, in
// batches, one image at a time.
//
//   hvprof::symbolizer::Symbolizer symbolizer;
//   auto xen = ImageSpec::Elf("/usr/lib/debug/boot/xen-syms-4.17-amd64");
//   HVPROF_TRY(batch, symbolizer.Symbolize(xen, addresses,
//                                          LookupOptions::With(Detail::kFunctions)));
//   for (size_t i = 0; i < batch.size(); ++i) {
//     Symbolization s = batch[i];          // in input order
//     if (s.resolved()) use(s.frames.back().function, s.frames.back().offset);
//     else count_failure(s.reason);
//   }
//
// A batch never fails because of one bad address or a bad image: each address gets frames or a
// Reason, and problems with the image itself are in BatchResult::images(), reported once per
// image (first_report), not once per address. Symbolize only returns an error for a malformed
// request (no path, a bad expected build-id).
//
// Internally each batch is sorted and deduplicated; images are opened once and kept in a bounded
// LRU cache (a failed open is cached too, until the file changes); each table (symbols, DWARF
// unit index, per-unit line tables and inline scopes) is parsed on first use, once.
//
// Not thread-safe: use one Symbolizer per thread or lock around it (it may start short-lived
// helper threads of its own, see SymbolizerOptions::dwarf_threads). Results keep the images
// they point into alive, so they may outlive cache eviction and the Symbolizer itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/symbolizer/types.h"

namespace hvprof::symbolizer {

struct SymbolizerOptions {
  // Roots searched for separate debuginfo: ROOT/.build-id/xx/yyyy.debug, and for
  // .gnu_debuglink, ROOT/<directory of the image>/NAME (plus the image's own directory and its
  // .debug/ subdirectory).
  std::vector<std::string> debug_roots = {"/usr/lib/debug"};
  bool find_debuginfo = true;
  // Threads that may walk DWARF units' inline scopes when a batch needs many new units
  // (0: one per CPU, at most 4; 1: only the calling thread).
  unsigned dwarf_threads = 0;
  // Cache bounds: open images are evicted least-recently-used first when either is exceeded.
  size_t max_cached_images = 64;
  uint64_t max_cached_bytes = uint64_t{2} << 30;  // mapped file bytes + parsed tables
};

// The outcome of opening one image of a request.
struct ImageStatus {
  std::string path;
  Reason reason = Reason::kNone;  // kNone, or the image-level failure every address got
  std::string detail;             // the error, for people
  bool first_report = false;      // true the first time this failure is returned for the image
  std::vector<std::string> warnings;  // non-fatal, also reported once per image
};

class BatchResult;

struct CacheStats {
  size_t images = 0;      // images (or cached failures) currently held
  uint64_t bytes = 0;     // their estimated footprint
  uint64_t opens = 0;     // files opened so far (a cache miss)
  uint64_t hits = 0;
  uint64_t evictions = 0;
};

class Symbolizer {
 public:
  explicit Symbolizer(SymbolizerOptions options = {});
  ~Symbolizer();
  Symbolizer(Symbolizer&&) noexcept;
  Symbolizer& operator=(Symbolizer&&) noexcept;
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Resolves `addresses` (runtime addresses, any order, duplicates allowed) in one image.
  Result<BatchResult> Symbolize(const ImageSpec& image, std::span<const uint64_t> addresses,
                                const LookupOptions& options = {});

  // Resolves through a chain of images: each address is answered by the first image that
  // contains it (whose answer is not kOutsideImage and which did not fail as a whole). This is
  // how a kernel is symbolized with vmlinux first and /proc/kallsyms for modules.
  // Symbolization::image_index says which image answered.
  Result<BatchResult> Symbolize(std::span<const ImageSpec> chain,
                                std::span<const uint64_t> addresses,
                                const LookupOptions& options = {});
  // The same into `result`, reusing its memory (a result the caller is done with): for callers
  // that symbolize batch after batch, whose batches then cost no new memory. On error `result`
  // is left empty.
  Result<void> Symbolize(std::span<const ImageSpec> chain, std::span<const uint64_t> addresses,
                         const LookupOptions& options, BatchResult* result);

  // Every function symbol of the image, sorted by start address; runtime addresses (bias added).
  Result<std::vector<FunctionSymbol>> ListFunctions(const ImageSpec& image,
                                                    const ListOptions& options = {});

  // Opens the image (through the cache) and describes it. Fails with the image's error.
  Result<ImageInfo> Describe(const ImageSpec& image);

  CacheStats cache_stats() const;
  // Drops every cached image (results already returned stay valid).
  void ClearCache();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The build-id of the ELF image (or separate debug file) at `path`, lower-case hex, "" when it
// has none: read from its notes alone, so a stripped image whose debug file is elsewhere has one
// too (Describe needs a symbol table). An error when it is not an ELF image that can be read.
Result<std::string> ReadBuildId(const std::string& path);

// The answers of one Symbolize call, one per input address, in input order. Duplicated input
// addresses share one resolution.
class BatchResult {
 public:
  BatchResult();
  ~BatchResult();
  BatchResult(BatchResult&&) noexcept;
  BatchResult& operator=(BatchResult&&) noexcept;
  BatchResult(const BatchResult&) = delete;
  BatchResult& operator=(const BatchResult&) = delete;

  size_t size() const;
  // The answer for the input address at `index`.
  Symbolization operator[](size_t index) const;
  // One status per image of the request (one for the single-image call).
  const std::vector<ImageStatus>& images() const;

  // The distinct addresses, in increasing order, each resolved once. Callers that aggregate
  // (counting samples per function) or print (format each answer once) can work on these:
  // (*this)[i] is unique(unique_index(i)).
  size_t unique_count() const;
  Symbolization unique(size_t unique) const;
  size_t unique_index(size_t index) const;
  // unique_index(i) for every input position i, in input order.
  std::span<const uint32_t> unique_indexes() const;

  struct Data;  // opaque; built by the Symbolizer

 private:
  friend class Symbolizer;
  std::unique_ptr<Data> data_;
};

}  // namespace hvprof::symbolizer
