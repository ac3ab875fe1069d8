// Internal: the interface every image kind implements, how images report failure, and the
// builder that collects per-address answers into a BatchResult.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/outcome/result.hpp>

#include "hvprof/base/result.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "hvprof/symbolizer/types.h"

namespace hvprof::symbolizer {

// Why a whole image cannot be used.
struct ImageFailure {
  Reason reason = Reason::kUnreadableFile;
  std::string detail;
  ErrorKind kind = ErrorKind::kCorrupt;  // for callers that want an hvprof::Error
};

template <typename T>
using ImageResult =
    BOOST_OUTCOME_V2_NAMESPACE::result<T, ImageFailure, BOOST_OUTCOME_V2_NAMESPACE::policy::terminate>;

ImageFailure MakeFailure(Reason reason, std::string detail);
ErrorKind ErrorKindForReason(Reason reason);
Error ToError(const ImageFailure& failure);

// One distinct address of a batch (kept small: batches hold one per distinct address).
struct BatchEntry {
  uint64_t address = 0;  // runtime address
  uint32_t frame_begin = 0;
  uint32_t detail = 0;   // index into Data::views (0: empty)
  uint32_t module = 0;   // index into Data::views (0: empty)
  uint16_t frame_count = 0;
  Reason reason = Reason::kOutsideImage;
  uint8_t image_index = 0;
  bool answered = false;  // some image gave an answer other than "outside the image"
  bool touched = false;   // some image gave any answer
};

struct BatchResult::Data {
  std::vector<uint32_t> index;       // input position -> entry
  std::vector<BatchEntry> entries;   // sorted by address
  std::vector<Frame> frames;
  std::vector<std::string_view> views = {std::string_view()};  // details and module names
  std::deque<std::string> strings;   // owns details made for this batch
  std::vector<ImageStatus> images;
  std::vector<std::shared_ptr<const void>> keep_alive;  // the images the views point into

  // Empties the result for another batch, keeping the vectors' memory.
  void Clear() {
    index.clear();
    entries.clear();
    frames.clear();
    views.resize(1);
    strings.clear();
    images.clear();
    keep_alive.clear();
  }
};

// Collects answers for one image of a request. Images call AddFrame() for each frame of an
// address (innermost first, function_start in image addresses), then Resolved() or Failed()
// with the address's position k in the span they were given.
class BatchBuilder {
 public:
  explicit BatchBuilder(BatchResult::Data* data) : data_(data) {}

  void BeginImage(std::span<const uint32_t> targets, uint64_t bias, uint8_t image_index) {
    targets_ = targets;
    bias_ = bias;
    image_index_ = image_index;
    first_frame_ = data_->frames.size();
  }

  uint64_t bias() const { return bias_; }
  uint64_t runtime_address(size_t k) const { return data_->entries[targets_[k]].address; }

  void AddFrame(Frame frame) {
    frame.function_start += bias_;
    data_->frames.push_back(frame);
  }

  // Module names repeat: images intern them once per batch with View().
  void Resolved(size_t k, Reason reason, uint32_t module = 0) {
    BatchEntry& e = data_->entries[targets_[k]];
    size_t count = data_->frames.size() - first_frame_;
    if (count > UINT16_MAX) {
      data_->frames.resize(first_frame_ + UINT16_MAX);
      count = UINT16_MAX;
    }
    e.frame_begin = static_cast<uint32_t>(first_frame_);
    e.frame_count = static_cast<uint16_t>(count);
    first_frame_ = data_->frames.size();
    e.reason = reason;
    e.detail = 0;
    e.module = module;
    e.image_index = image_index_;
    e.answered = true;
    e.touched = true;
  }

  void Failed(size_t k, Reason reason, std::string_view detail) {
    data_->frames.resize(first_frame_);
    BatchEntry& e = data_->entries[targets_[k]];
    // In a chain, "outside this image" never replaces an earlier answer.
    if (reason == Reason::kOutsideImage && e.touched) return;
    e.frame_begin = 0;
    e.frame_count = 0;
    e.reason = reason;
    e.detail = View(detail);
    e.module = 0;
    e.image_index = image_index_;
    e.answered = reason != Reason::kOutsideImage;
    e.touched = true;
  }

  // The whole image failed: the address keeps an earlier answer if it has one, and stays open
  // for the next image of a chain. `detail` comes from View().
  void ImageFailed(size_t k, Reason reason, uint32_t detail) {
    BatchEntry& e = data_->entries[targets_[k]];
    if (e.touched) return;
    e.reason = reason;
    e.detail = detail;
    e.image_index = image_index_;
    e.touched = true;
  }

  // Registers a view that outlives the batch (image memory or Keep()) and returns its handle.
  uint32_t View(std::string_view text) {
    if (text.empty()) return 0;
    data_->views.push_back(text);
    return static_cast<uint32_t>(data_->views.size() - 1);
  }

  // Stores a string for the lifetime of the result.
  std::string_view Keep(std::string text) {
    data_->strings.push_back(std::move(text));
    return data_->strings.back();
  }

 private:
  BatchResult::Data* data_;
  std::span<const uint32_t> targets_;
  uint64_t bias_ = 0;
  uint8_t image_index_ = 0;
  size_t first_frame_ = 0;
};

// An opened image. Tables are built on first use; methods are not thread-safe.
class Image {
 public:
  virtual ~Image() = default;

  virtual const std::string& build_id() const = 0;
  // Builds what every lookup needs (the symbol table). Fails if the image has no usable symbols.
  virtual ImageResult<void> Prepare() = 0;
  // Resolves `addresses` (image addresses, sorted, distinct). Prepare() succeeded before.
  virtual void Resolve(std::span<const uint64_t> addresses, const LookupOptions& options,
                       BatchBuilder* builder) = 0;
  virtual std::vector<FunctionSymbol> ListFunctions(uint64_t bias, const ListOptions& options) = 0;
  virtual ImageInfo Describe() = 0;
  // Warnings found since the last call (reported once).
  virtual std::vector<std::string> TakeWarnings() = 0;
  // Mapped file bytes plus parsed tables, for the cache bound.
  virtual uint64_t FootprintBytes() const = 0;
};

// Opening (in elf_image.cpp and kernel_image.cpp).
ImageResult<std::unique_ptr<Image>> OpenElfImage(const ImageSpec& spec,
                                                 const SymbolizerOptions& options);
ImageResult<std::unique_ptr<Image>> OpenKernelImage(const ImageSpec& spec);

}  // namespace hvprof::symbolizer
