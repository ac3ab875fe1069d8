// The call stacks a report shows, their frames, and the idle marks.
#include "profile_builder.h"

namespace hvprof::report {

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
  p_.samples_without_chain = collected.without_chain;
  p_.timings.distinct_stacks = counted.size();
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
  HVPROF_TRYV(Build(frames, p_.frames));
  p_.stacks.reserve(counted.size());
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
    p_.stacks.push_back(std::move(out));
  }
  NoteShallowImages();
  // A stable order: most samples first, then by frames.
  std::sort(p_.stacks.begin(), p_.stacks.end(), [](const Stack& a, const Stack& b) {
    return a.count != b.count ? a.count > b.count : a.frames < b.frames;
  });
  return Ok();
}

void ProfileBuilder::MarkIdleEntry(Entry& entry) const {
  const std::string_view symbol =
      entry.symbol < p_.symbols.size() ? std::string_view(p_.symbols[entry.symbol].name) : std::string_view();
  entry.idle = IsIdleSample(entry.domain, entry.mode, symbol);
}

void ProfileBuilder::MarkIdle(const store::Aggregate& aggregate) {
  for (Entry& entry : p_.entries) MarkIdleEntry(entry);
  if (!aggregate.has_stacks || aggregate.entries.size() != p_.entries.size()) return;
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
    if (it != aggregate.entries.end() && it->key == key && p_.entries[it - aggregate.entries.begin()].idle) {
      cpu.idle += stack.count;
    }
  }
  for (const auto& [key, cpu] : per_cpu) p_.cpu_idle.push_back(cpu);
}

void ProfileBuilder::MarkIdleStacks() {
  for (Entry& frame : p_.frames) MarkIdleEntry(frame);
  for (Stack& stack : p_.stacks) {
    stack.idle = stack.domain == kIdleDomain || (!stack.frames.empty() && p_.frames[stack.frames[0]].idle);
  }
}

void ProfileBuilder::NoteShallowImages() {
  // On a real machine every sampled function but a thread's first has a caller. When most of an
  // image's chains stop at the sampled function, the frame-pointer walk found no frame there:
  // the image was built without frame pointers. (The sim has no such walk: its scenario says
  // which functions have callers. Passive domains and the idle domain are sampled without
  // chains.)
  const store::SessionMetadata& m = p_.metadata;
  if (m.backtrace_depth == 0 || m.platform == "sim") return;
  std::set<uint16_t> passive;
  for (const store::DomainRecord& domain : m.domains) {
    if (domain.role == "passive") passive.insert(domain.id);
  }
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> by_image;  // image -> (samples, one frame deep)
  for (const Stack& stack : p_.stacks) {
    if (stack.frames.empty() || stack.domain == kIdleDomain || passive.count(stack.domain) != 0) continue;
    auto& [samples, shallow] = by_image[p_.frames[stack.frames[0]].image];
    samples += stack.count;
    if (stack.frames.size() == 1) shallow += stack.count;
  }
  constexpr uint64_t kEnough = 50;
  for (const auto& [image, counts] : by_image) {
    const auto [samples, shallow] = counts;
    if (samples < kEnough || shallow * 2 < samples) continue;
    p_.stack_notes.push_back(fmt::format(
        "{}: {} of its {} sampled stacks ({:.0f}%) stop at the sampled function: it was probably built without frame "
        "pointers, so its callers are unknown (rebuild it with -fno-omit-frame-pointer to see them)",
        p_.images[image].long_name, shallow, samples, 100.0 * static_cast<double>(shallow) / static_cast<double>(samples)));
  }
}

}  // namespace hvprof::report
