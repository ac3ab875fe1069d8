// MergeAggregates: several sessions' aggregates as one (session.h).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "hvprof/store/session.h"
#include "hvprof/store/stack_counter.h"

namespace hvprof::store {

namespace {

// An image number no merged image has: a word whose part listed no image by its number reads
// as an unknown address, as in its own session.
constexpr uint32_t kUnlisted = kMaxImageWordImage;

// A part's image numbers in the merged table: renumber[id], kUnlisted for an id the part does
// not list.
std::vector<uint32_t> Renumber(const Aggregate& part, std::map<std::pair<std::string, std::string>, uint32_t>& ids,
                               std::vector<AggregateImage>& images) {
  uint32_t largest = 0;
  for (const AggregateImage& image : part.images) largest = std::max(largest, image.id);
  std::vector<uint32_t> renumber(std::min<uint32_t>(largest, kMaxImageWordImage) + 1, kUnlisted);
  for (const AggregateImage& image : part.images) {
    auto [it, added] = ids.try_emplace({image.path, image.build_id}, static_cast<uint32_t>(images.size() + 1));
    if (added) images.push_back({it->second, image.path, image.build_id});
    if (image.id < renumber.size()) renumber[image.id] = it->second;
  }
  return renumber;
}

uint64_t Rewrite(uint64_t word, const std::vector<uint32_t>& renumber) {
  if (!IsImageWord(word)) return word;
  const uint32_t image = ImageOfWord(word);
  return ImageWord(image < renumber.size() ? renumber[image] : kUnlisted, AddressOfWord(word));
}

}  // namespace

Result<Aggregate> MergeAggregates(std::vector<Aggregate> parts) {
  Aggregate merged;
  if (parts.empty()) return merged;
  // Image words have room for kMaxImageWordImage - 1 distinct images (one number is kUnlisted).
  std::set<std::pair<std::string, std::string>> distinct;
  for (const Aggregate& part : parts) {
    for (const AggregateImage& image : part.images) distinct.emplace(image.path, image.build_id);
  }
  if (distinct.size() >= kMaxImageWordImage) {
    return MakeError(ErrorKind::kUnsupported,
                     "the sessions name {} distinct images, more than one aggregate numbers ({}): merge fewer",
                     distinct.size(), kMaxImageWordImage - 1);
  }
  std::map<std::pair<std::string, std::string>, uint32_t> ids;
  merged.has_regions = std::all_of(parts.begin(), parts.end(), [](const Aggregate& a) { return a.has_regions; });
  merged.has_stacks = std::all_of(parts.begin(), parts.end(), [](const Aggregate& a) { return a.has_stacks; });
  std::map<std::tuple<uint16_t, uint32_t, uint64_t>, AggregateRegion> regions;
  StackCounter stacks;
  std::vector<uint64_t> words;
  for (Aggregate& part : parts) {
    const std::vector<uint32_t> renumber = Renumber(part, ids, merged.images);
    merged.samples += part.samples;
    for (AggregateEntry& entry : part.entries) {
      entry.key.ip = Rewrite(entry.key.ip, renumber);
      merged.entries.push_back(entry);
    }
    part.entries = {};
    if (merged.has_regions) {
      for (AggregateRegion& region : part.regions) {
        auto [it, added] = regions.try_emplace({region.domain, region.pid, region.start}, region);
        if (!added && region.time_ns >= it->second.time_ns) it->second = std::move(region);
      }
    }
    if (merged.has_stacks) {
      for (const CountedStack& stack : part.stacks) {
        words.clear();
        for (uint64_t word : part.Addresses(stack)) words.push_back(Rewrite(word, renumber));
        if (!words.empty()) stacks.Add(stack.key, words, stack.count);
      }
    }
    part = Aggregate();  // its memory goes back before the next part is merged
  }
  std::sort(merged.entries.begin(), merged.entries.end(),
            [](const AggregateEntry& a, const AggregateEntry& b) { return a.key < b.key; });
  size_t out = 0;
  for (size_t i = 0; i < merged.entries.size(); ++i) {
    if (out != 0 && merged.entries[out - 1].key == merged.entries[i].key) {
      merged.entries[out - 1].count += merged.entries[i].count;
    } else {
      merged.entries[out++] = merged.entries[i];
    }
  }
  merged.entries.resize(out);
  for (auto& [where, region] : regions) merged.regions.push_back(std::move(region));
  if (merged.has_stacks) stacks.Take(&merged.stacks, &merged.stack_words);
  return merged;
}

}  // namespace hvprof::store
