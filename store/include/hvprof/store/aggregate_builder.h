// Counting samples into an aggregate: the key and stack a sample counts under, with its user
// addresses resolved to their images (session.h, ImageWord), and the agent's aggregate, counted as
// the samples come so that writing it at a dump or a stop costs a sort, not a read of the samples.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "hvprof/store/context_file.h"
#include "hvprof/store/samples_file.h"
#include "hvprof/store/session.h"
#include "hvprof/store/stack_counter.h"

namespace hvprof::store {

// The key a sample counts under and its stack's words, the sampled address first (`words` has
// room for kMaxFrames + 1); returns how many words. `stack` gets the stack's key.
size_t TranslateSample(const StoredSample& sample, const Translation& translation, StackDetail stacks,
                       AggregateKey* key, StackKey* stack, uint64_t* words);

// The agent's aggregate of its session, counted sample by sample as the rings are drained.
// Time is cut into up to 64 equal spans that widen as the session grows (each span doubling when
// 64 are full), so that the aggregate's time slices cover the session whatever its length.
class AggregateBuilder {
 public:
  // The distinct stacks are kept up to `stack_budget_bytes` of memory. A session whose stacks are
  // mostly distinct (deep, varied chains at a high rate) would otherwise grow without bound: past
  // the budget the builder forgets them and its aggregates have none (a stack view then reads
  // samples.hvs, as for any aggregate without stacks).
  static constexpr size_t kDefaultStackBudgetBytes = size_t{128} << 20;
  // The time spans' counts are kept up to `slice_budget_bytes`. Each span counts the keys sampled
  // in it, so a long session that samples much code holds up to 64 copies of its key table (on a
  // simulated day, 80 MiB and growing): past the budget the builder forgets them and its
  // aggregates have no time slices (a diff of time slices, --slices, then reads samples.hvs, as
  // for any aggregate without them).
  static constexpr size_t kDefaultSliceBudgetBytes = size_t{32} << 20;
  // The regions that named per-process addresses (Aggregate::regions) are kept up to this many:
  // past it the aggregate lists none, and a report reads context.hvc to name those addresses.
  static constexpr size_t kMaxRegions = size_t{1} << 16;
  AggregateBuilder(StackDetail stacks, const ContextIndex* index, size_t stack_budget_bytes = kDefaultStackBudgetBytes,
                   size_t slice_budget_bytes = kDefaultSliceBudgetBytes);
  // Whether the stacks outgrew the budget and were forgotten.
  bool stacks_over_budget() const;
  // Whether the time spans outgrew theirs and were forgotten.
  bool slices_over_budget() const;
  // Whether the regions outgrew kMaxRegions and were forgotten.
  bool regions_over_budget() const;
  ~AggregateBuilder();
  AggregateBuilder(AggregateBuilder&&) noexcept;
  AggregateBuilder& operator=(AggregateBuilder&&) noexcept;

  void Add(const StoredSample& sample);
  uint64_t samples() const;
  // What was counted so far, sorted, with the index's images (the builder goes on counting).
  // `source_bytes`: the size of samples.hvs it covers.
  Aggregate Snapshot(uint64_t source_bytes);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hvprof::store
