#include "hvprof/store/sampled_images.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "hvprof/facts/sample.h"

namespace hvprof::store {

namespace {

class Collector {
 public:
  explicit Collector(const SessionMetadata& metadata) : m_(metadata) {}

  void UseImages(const std::vector<AggregateImage>& images) {
    for (const AggregateImage& image : images) by_id_[image.id] = &image;
  }

  void Visit(uint16_t domain, uint8_t mode, uint64_t word) {
    if (mode == sample_mode::kHypervisor || domain == kIdleDomain) {
      Hypervisor();
      return;
    }
    if (mode == sample_mode::kKernel) {
      if (!kernels_.insert(domain).second) return;
      for (const ImageRecord& image : m_.images) {
        if ((image.role == "kernel" || image.role == "passive-kernel") && image.domain == domain) {
          Add(image.path, image.build_id, image.format);
        }
      }
      return;
    }
    if (!IsImageWord(word)) return;  // counted by process: in no file
    if (const auto it = by_id_.find(ImageOfWord(word)); it != by_id_.end()) {
      Add(it->second->path, it->second->build_id, "elf");
    }
  }

  void Hypervisor() {
    if (hypervisor_) return;
    hypervisor_ = true;
    for (const ImageRecord& image : m_.images) {
      if (image.role == "hypervisor") Add(image.path, image.build_id, image.format);
    }
  }

  std::vector<SampledImage> Take() {
    std::vector<SampledImage> out;
    out.reserve(images_.size());
    for (auto& [key, image] : images_) out.push_back(std::move(image));
    return out;
  }

 private:
  void Add(const std::string& path, const std::string& build_id, const std::string& format) {
    if (path.empty()) return;
    images_.try_emplace({path, build_id}, SampledImage{path, build_id, format});
  }

  const SessionMetadata& m_;
  bool hypervisor_ = false;
  std::set<uint16_t> kernels_;
  std::map<uint32_t, const AggregateImage*> by_id_;
  std::map<std::pair<std::string, std::string>, SampledImage> images_;
};

}  // namespace

std::vector<SampledImage> SampledImagesOf(const SessionMetadata& metadata, const Aggregate& aggregate,
                                          bool hypervisor) {
  Collector collector(metadata);
  collector.UseImages(aggregate.images);
  for (const AggregateEntry& entry : aggregate.entries) collector.Visit(entry.key.domain, entry.key.mode, entry.key.ip);
  for (const CountedStack& stack : aggregate.stacks) {
    for (const uint64_t word : aggregate.Addresses(stack)) collector.Visit(stack.key.domain, stack.key.mode, word);
  }
  if (hypervisor) collector.Hypervisor();
  return collector.Take();
}

}  // namespace hvprof::store
