#include "hvprof/store/aggregate_builder.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "address_counter.h"
#include "samples_decode.h"

namespace hvprof::store {

namespace {

// Sorted, unique entries from two such lists: the counts of equal keys added.
std::vector<AggregateEntry> MergeEntries(const std::vector<AggregateEntry>& a, const std::vector<AggregateEntry>& b) {
  std::vector<AggregateEntry> merged;
  merged.reserve(std::max(a.size(), b.size()));
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].key < b[j].key)) {
      merged.push_back(a[i++]);
    } else if (i == a.size() || b[j].key < a[i].key) {
      merged.push_back(b[j++]);
    } else {
      merged.push_back({a[i].key, a[i].count + b[j].count});  // at most the samples read: no wrap
      ++i, ++j;
    }
  }
  return merged;
}

// Files smaller than this are read by one thread: starting others costs more than they save.
constexpr uint64_t kParallelBytes = 8ull << 20;
constexpr unsigned kMaxReaders = 4;

// A user-space address of a canonical x86-64 layout: its top 17 bits clear.
constexpr bool IsUserAddress(uint64_t word) { return (word >> 47) == 0; }
// An address a call could have pushed: canonical (its top 17 bits all clear or all set) and
// above the first page, which is never mapped (vm.mmap_min_addr is at least 4096). A
// frame-pointer walk that strays into data returns other words (text, counters); one that runs
// off its chain's outermost frame returns 0. Kept, a 0 would also make each process's copy of a
// shared stack a stack of its own (an address no image holds): a million of them in five minutes
// of a host starting short processes.
constexpr uint64_t kFirstPage = 4096;
constexpr bool IsCallerAddress(uint64_t word) {
  return ((word >> 47) == 0 && word >= kFirstPage) || (word >> 47) == 0x1FFFF;
}

}  // namespace

size_t TranslateSample(const StoredSample& s, const Translation& translation, StackDetail stacks, AggregateKey* key,
                       StackKey* stack, uint64_t* words) {
  const bool by_thread = stacks == StackDetail::kStacksByThread;
  size_t length = stacks == StackDetail::kNone ? 0 : std::min<size_t>(s.frames.size(), kMaxFrames);
  // The chain ends at the first frame no call could have made (the walk went astray or ran off its
  // end there): what follows is not a caller, and the word could be mistaken for an image word.
  for (size_t i = 0; i < length; ++i) {
    if (!IsCallerAddress(s.frames[i])) {
      length = i;
      break;
    }
  }
  const ContextIndex* index = translation.index;
  // User addresses, in a user-mode sample or in the user part of a kernel one's chain, are the
  // process's: resolved to images where the context knows them.
  const bool resolving = index != nullptr && index->HasDomain(s.domain);
  bool all_resolved = true;  // no raw user address left: the stack is every process's
  auto resolve = [&](uint64_t address) -> uint64_t {
    if (!IsUserAddress(address)) return address;
    // One lookup: the file's image, or the region a report names the address by.
    const auto located = resolving ? index->Locate(s.domain, s.pid, s.time_ns, address) : std::nullopt;
    if (!located || located->image == 0 || located->image > kMaxImageWordImage ||
        located->address > kImageAddressMask) {
      all_resolved = false;
      if (located && located->image == 0 && translation.regions != nullptr) {
        translation.regions->Note(s.domain, s.pid, located->start, located->end, located->time_ns, *located->path);
      }
      return address;
    }
    return ImageWord(located->image, located->address);
  };
  const uint64_t ip = resolve(s.ip);
  // A kernel's or hypervisor's address, or an image's, is the same code in every process.
  const bool per_process = translation.keep_pid || (!IsImageWord(ip) && IsUserAddress(ip));
  *key = AggregateKey{ip, per_process ? s.pid : kAnyProcess, s.domain, s.mode, s.event};
  if (stacks == StackDetail::kNone) return 0;
  words[0] = ip;
  for (size_t i = 0; i < length; ++i) words[i + 1] = resolve(s.frames[i]);
  // A stack whose every user address is an image's is every process's that ran that code.
  const bool shared = all_resolved && !translation.keep_pid && !by_thread;
  *stack = by_thread ? StackKey{s.pid, s.tid, s.domain, s.mode, s.event, s.vcpu, s.pcpu}
                     : StackKey{shared ? kAnyProcess : s.pid, kNoTid, s.domain, s.mode, s.event, kUnknownPcpu,
                                stacks == StackDetail::kStacksByCpu ? s.pcpu : kUnknownPcpu};
  return length + 1;
}

// ---- AggregateBuilder

namespace {
constexpr uint32_t kMaxBuckets = 64;
constexpr uint64_t kFirstBucketNs = 1'000'000;  // 1 ms, doubled as the session grows
}  // namespace

struct AggregateBuilder::State final : RegionSink {
  StackDetail stacks;
  const ContextIndex* index;
  size_t stack_budget_bytes = 0;
  bool stacks_over_budget = false;
  size_t slice_budget_bytes = 0;
  bool slices_over_budget = false;
  detail::AddressCounter counter{1u << 14};
  StackCounter stack_counter;
  std::vector<detail::AddressCounter> buckets;  // the time spans, each counting its samples' keys
  // The regions per-process addresses fell in, by (domain, pid, start): the latest mapped there.
  struct Region {
    uint64_t end;
    uint64_t time_ns;
    uint32_t path;  // into region_paths
  };
  std::map<std::tuple<uint16_t, uint32_t, uint64_t>, Region> regions;
  std::vector<std::string> region_paths;
  std::unordered_map<std::string, uint32_t> region_path_ids;
  bool regions_over_budget = false;
  bool started = false;
  uint64_t origin_ns = 0;
  uint64_t width_ns = kFirstBucketNs;
  uint64_t samples = 0;
  uint64_t words[kMaxFrames + 1];

  // Halves the number of spans: each two neighbours become one twice as wide, the second counted
  // into the first (no table made for it).
  void Widen() {
    std::vector<detail::AddressCounter> wider;
    wider.reserve(kMaxBuckets);
    for (size_t i = 0; i < buckets.size(); i += 2) {
      wider.push_back(std::move(buckets[i]));
      if (i + 1 == buckets.size()) continue;
      for (const AggregateEntry& entry : buckets[i + 1].TakeSorted()) wider.back().Add(entry.key, entry.count);
    }
    buckets = std::move(wider);
    width_ns *= 2;
  }

  // A region an address counted by process fell in (TranslateSample's lookup found it).
  void Note(uint16_t domain, uint32_t pid, uint64_t start, uint64_t end, uint64_t time_ns,
            const std::string& path) override {
    if (regions_over_budget) return;
    const auto [id, added] = region_path_ids.try_emplace(path, static_cast<uint32_t>(region_paths.size()));
    if (added) region_paths.push_back(path);
    auto [it, inserted] = regions.try_emplace({domain, pid, start}, Region{end, time_ns, id->second});
    if (!inserted && time_ns >= it->second.time_ns) it->second = {end, time_ns, id->second};
    if (regions.size() > AggregateBuilder::kMaxRegions) {
      regions_over_budget = true;
      decltype(regions)().swap(regions);
      decltype(region_paths)().swap(region_paths);
      decltype(region_path_ids)().swap(region_path_ids);
    }
  }

  detail::AddressCounter& BucketOf(uint64_t time_ns) {
    if (!started) {
      started = true;
      origin_ns = time_ns;
    }
    // A sample older than the first seen (the rings are drained one after another) counts in the
    // first span.
    uint64_t index_of = time_ns > origin_ns ? (time_ns - origin_ns) / width_ns : 0;
    while (index_of >= kMaxBuckets) {
      Widen();
      index_of = (time_ns - origin_ns) / width_ns;
    }
    while (buckets.size() <= index_of) buckets.emplace_back(1u << 10);
    return buckets[index_of];
  }
};

AggregateBuilder::AggregateBuilder(StackDetail stacks, const ContextIndex* index, size_t stack_budget_bytes,
                                   size_t slice_budget_bytes)
    : state_(std::make_unique<State>()) {
  state_->stacks = stacks;
  state_->index = index;
  state_->stack_budget_bytes = stack_budget_bytes;
  state_->slice_budget_bytes = slice_budget_bytes;
}

bool AggregateBuilder::stacks_over_budget() const { return state_->stacks_over_budget; }
bool AggregateBuilder::slices_over_budget() const { return state_->slices_over_budget; }
bool AggregateBuilder::regions_over_budget() const { return state_->regions_over_budget; }
AggregateBuilder::~AggregateBuilder() = default;
AggregateBuilder::AggregateBuilder(AggregateBuilder&&) noexcept = default;
AggregateBuilder& AggregateBuilder::operator=(AggregateBuilder&&) noexcept = default;

void AggregateBuilder::Add(const StoredSample& sample) {
  State& s = *state_;
  AggregateKey key;
  StackKey stack;
  // The regions of addresses counted by process are noted as they are looked up: a report of the
  // aggregate then needs nothing of context.hvc.
  const size_t length = TranslateSample(sample, Translation{s.index, false, &s}, s.stacks, &key, &stack, s.words);
  s.counter.Add(key);
  if (!s.slices_over_budget) {
    s.BucketOf(sample.time_ns).Add(key);
    // A span's table grows by doubling: looked at every 4,096 samples, the spans overshoot the
    // budget by at most a few doublings.
    if ((s.samples & 4095) == 0) {
      size_t bytes = 0;
      for (const detail::AddressCounter& bucket : s.buckets) bytes += bucket.bytes();
      if (bytes > s.slice_budget_bytes) {
        s.slices_over_budget = true;
        std::vector<detail::AddressCounter>().swap(s.buckets);  // their memory goes back now
      }
    }
  }
  if (length != 0 && !s.stacks_over_budget) {
    s.stack_counter.Add(stack, {s.words, length});
    // Each stack: its entry, its hash and about two table slots, beside its words.
    const size_t bytes = s.stack_counter.words().size() * sizeof(uint64_t) +
                         s.stack_counter.stacks().size() * (sizeof(CountedStack) + 2 * sizeof(uint64_t));
    if (bytes > s.stack_budget_bytes) {
      s.stacks_over_budget = true;
      s.stack_counter = StackCounter();  // its memory goes back now
    }
  }
  ++s.samples;
}

uint64_t AggregateBuilder::samples() const { return state_->samples; }

namespace {

// The counts of each of `slicing`'s slices (`counted_in`: its entries, sorted like the whole's
// and a subset of them: one merge each) into aggregate.slice_counts, entry-major. Counts beyond
// 32 bits a slice are not kept (time_slices 0).
void SetSliceCounts(Aggregate& aggregate, const TimeSlicing& slicing,
                    const std::function<std::vector<AggregateEntry>(uint32_t slice)>& counted_in) {
  const uint32_t slices = slicing.count;
  aggregate.time_slices = slices;
  aggregate.slices_first_ns = slicing.first_ns;
  aggregate.slices_last_ns = slicing.last_ns;
  aggregate.slice_counts.assign(aggregate.entries.size() * slices, 0);
  bool fits = true;
  for (uint32_t slice = 0; slice < slices; ++slice) {
    size_t at = 0;
    for (const AggregateEntry& entry : counted_in(slice)) {
      while (at < aggregate.entries.size() && aggregate.entries[at].key < entry.key) ++at;
      if (at == aggregate.entries.size()) break;
      fits &= entry.count <= UINT32_MAX;
      aggregate.slice_counts[at * slices + slice] = static_cast<uint32_t>(entry.count);
    }
  }
  if (!fits) {
    aggregate.time_slices = 0;
    aggregate.slice_counts = {};
  }
}

}  // namespace

Aggregate AggregateBuilder::Snapshot(uint64_t source_bytes) {
  State& s = *state_;
  Aggregate aggregate;
  aggregate.entries = s.counter.SortedCopy();
  aggregate.samples = s.samples;
  aggregate.source_bytes = source_bytes;
  if (s.index != nullptr) {
    for (const ContextImage& image : s.index->images()) {
      aggregate.images.push_back({image.id, image.path, image.build_id});
    }
  }
  aggregate.has_regions = s.index != nullptr && !s.regions_over_budget;
  if (aggregate.has_regions) {
    aggregate.regions.reserve(s.regions.size());
    for (const auto& [where, region] : s.regions) {
      const auto& [domain, pid, start] = where;
      aggregate.regions.push_back({domain, pid, start, region.end, region.time_ns, s.region_paths[region.path]});
    }
  }
  aggregate.has_stacks = s.stacks != StackDetail::kNone && !s.stacks_over_budget;
  aggregate.stacks = s.stack_counter.stacks();
  aggregate.stack_words = s.stack_counter.words();
  const uint32_t slices = s.slices_over_budget ? 0 : static_cast<uint32_t>(s.buckets.size());
  if (slices != 0) {
    SetSliceCounts(aggregate, {slices, s.origin_ns, s.origin_ns + slices * s.width_ns - 1},
                   [&s](uint32_t slice) { return s.buckets[slice].SortedCopy(); });
  }
  return aggregate;
}

// ---- counting a samples file


Result<Aggregate> AggregateSamplesFile(const std::string& path, ReadSummary* summary_out,
                                       std::optional<std::span<const uint8_t, 16>> session_id, StackDetail stacks,
                                       TimeSlicing slicing, unsigned readers, const Translation& translation,
                                       const SampleWatch& watch) {
  const uint32_t slices = std::min(slicing.count, kMaxTimeSlices);
  TimeSlicing capped = slicing;
  capped.count = slices;
  // The chunks are decoded by up to kMaxReaders threads, each counting its share in its own
  // counters, merged afterwards: every count is the same as one thread's.
  struct stat st {};
  const uint64_t file_bytes = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  if (readers == 0) {
    readers = file_bytes < kParallelBytes
                  ? 1
                  : static_cast<unsigned>(std::clamp<uint64_t>(std::thread::hardware_concurrency(), 1, kMaxReaders));
  }
  struct Reader {
    detail::AddressCounter counter;
    StackCounter stack_counter;
    std::vector<detail::AddressCounter> slice_counters;
    SampleObserver observe;
    uint64_t samples = 0;
    uint64_t addresses[kMaxFrames + 1];
  };
  std::vector<std::unique_ptr<Reader>> state;
  std::vector<ChunkDecoder> decoders;
  for (unsigned w = 0; w < readers; ++w) {
    state.push_back(std::make_unique<Reader>());
    Reader& r = *state.back();
    r.slice_counters.reserve(slices);
    for (uint32_t slice = 0; slice < slices; ++slice) r.slice_counters.emplace_back(1u << 12);
    if (watch) r.observe = watch(w);
    // Called inline by the decoder (no std::function per sample: 10M samples take tens of ms so).
    auto count = [&r, &capped, slices, stacks, &translation](const StoredSample& s) {
      AggregateKey key;
      StackKey stack;
      const size_t length = TranslateSample(s, translation, stacks, &key, &stack, r.addresses);
      r.counter.Add(key);
      ++r.samples;
      const uint32_t slice = slices != 0 ? capped.SliceOf(s.time_ns) : 0;
      if (slices != 0) r.slice_counters[slice].Add(key);
      if (length != 0) r.stack_counter.Add(stack, {r.addresses, length});
      if (r.observe) r.observe(s, slice);
    };
    decoders.push_back([count](std::span<const uint8_t> payload, uint32_t records) mutable {
      return detail::DecodeSamples(payload, records, count);
    });
  }
  // A span not known (a session whose metadata has no sample times yet): the chunks' headers give it,
  // before their samples are decoded and counted.
  const bool span_from_chunks = slices != 0 && slicing.last_ns <= slicing.first_ns;
  const ChunksVerified from_chunks = [&capped](const ChunkReadSummary& headers) {
    if (!headers.chunks_timed) return;
    capped.first_ns = headers.first_time_ns;
    capped.last_ns = headers.last_time_ns;
  };
  HVPROF_TRY(summary, ReadSamplesFileDecoding(path, decoders, session_id, span_from_chunks ? from_chunks : ChunksVerified()));
  Aggregate aggregate;
  // Each share's counts sorted on a thread of its own (a tenth of the time, and memory-bound),
  // then merged.
  std::vector<std::vector<AggregateEntry>> sorted(readers);
  {
    std::vector<std::thread> threads;
    for (unsigned w = 1; w < readers; ++w) threads.emplace_back([&, w] { sorted[w] = state[w]->counter.TakeSorted(); });
    sorted[0] = state[0]->counter.TakeSorted();
    for (std::thread& thread : threads) thread.join();
  }
  aggregate.entries = std::move(sorted[0]);
  aggregate.samples = state[0]->samples;
  for (unsigned w = 1; w < readers; ++w) {
    aggregate.entries = MergeEntries(aggregate.entries, sorted[w]);
    std::vector<AggregateEntry>().swap(sorted[w]);
    aggregate.samples += state[w]->samples;
  }
  aggregate.has_stacks = stacks != StackDetail::kNone;
  // Later shares' stacks after the first's, each in the order it was first seen: the order one
  // thread reading the whole file gives.
  StackCounter& stack_counter = state[0]->stack_counter;
  for (unsigned w = 1; w < readers; ++w) {
    std::vector<CountedStack> more;
    std::vector<uint64_t> words;
    state[w]->stack_counter.Take(&more, &words);
    for (const CountedStack& stack : more) {
      stack_counter.Add(stack.key, {words.data() + stack.first, stack.length}, stack.count);
    }
  }
  stack_counter.Take(&aggregate.stacks, &aggregate.stack_words);
  if (translation.index != nullptr) {
    for (const ContextImage& image : translation.index->images()) {
      aggregate.images.push_back({image.id, image.path, image.build_id});
    }
  }
  if (slices != 0) {
    SetSliceCounts(aggregate, capped, [&](uint32_t slice) {
      std::vector<AggregateEntry> counted = state[0]->slice_counters[slice].TakeSorted();
      for (unsigned w = 1; w < readers; ++w) counted = MergeEntries(counted, state[w]->slice_counters[slice].TakeSorted());
      return counted;
    });
  }
  // The size before reading: were the file to grow meanwhile, the aggregate would count more than
  // this and be read again next time, never less and kept.
  aggregate.source_bytes = file_bytes;
  if (summary_out != nullptr) *summary_out = std::move(summary);
  return aggregate;
}

}  // namespace hvprof::store
