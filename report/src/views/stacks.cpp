#include "hvprof/report/views/stacks.h"

#include <algorithm>
#include <unordered_map>

namespace hvprof::report {

namespace {

const char* ModeFrame(uint8_t mode) {
  switch (mode) {
    case 0: return "[user]";
    case 1: return "[kernel]";
    default: return "[hypervisor]";
  }
}

}  // namespace

bool StackFilter::Selects(const Stack& stack) const {
  return stack.event == event &&
         (domains.empty() || std::find(domains.begin(), domains.end(), stack.domain) != domains.end()) &&
         (modes.empty() || std::find(modes.begin(), modes.end(), stack.mode) != modes.end());
}

uint32_t DefaultStackEvent(const Profile& profile) {
  const auto& events = profile.metadata().events;
  return events.empty() ? 0 : events.front().counter;
}

Result<StackRoot> ParseStackRoot(std::string_view text) {
  if (text == "domain") return StackRoot::kDomain;
  if (text == "mode") return StackRoot::kMode;
  if (text == "none") return StackRoot::kNone;
  return MakeError(ErrorKind::kInvalidArgument,
                   "--stack-root={}: expected domain (the domain, then the mode, at the root), mode (the mode "
                   "at the root) or none",
                   text);
}

NamedStacks NameStacks(const Profile& profile, const StackOptions& options) {
  NamedStacks out;
  std::unordered_map<std::string, uint32_t> ids;
  auto intern = [&](std::string name, uint8_t mode) {
    auto [it, inserted] = ids.try_emplace(std::move(name), static_cast<uint32_t>(out.names.size()));
    if (inserted) {
      out.names.push_back(it->first);
      out.modes.push_back(mode);
    }
    return it->second;
  };
  // Each frame's name once.
  std::vector<uint32_t> frame_ids(profile.frames().size());
  for (size_t f = 0; f < profile.frames().size(); ++f) {
    const Entry& frame = profile.frames()[f];
    const Symbol& symbol = profile.symbols()[frame.symbol];
    const Image& image = profile.images()[frame.image];
    frame_ids[f] = intern(symbol.resolved || symbol.name.starts_with("[unknown in ")
                              ? symbol.name
                              : fmt::format("[unknown] {}+{:#x}", image.name, frame.ip),
                          frame.mode);
  }
  // Stacks that name the same frames are merged: the key is the names, root first.
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& key) const noexcept {
      uint64_t hash = 0xcbf29ce484222325ull;
      for (uint32_t id : key) hash = (hash ^ id) * 0x100000001b3ull;
      return static_cast<size_t>(hash);
    }
  };
  std::unordered_map<std::vector<uint32_t>, size_t, KeyHash> merged;
  std::vector<uint32_t> key;
  for (const Stack& stack : profile.stacks()) {
    if (!options.filter.Selects(stack)) continue;
    key.clear();
    if (options.root == StackRoot::kDomain) key.push_back(intern(profile.DomainName(stack.domain), kRootFrame));
    if (options.root != StackRoot::kNone) key.push_back(intern(ModeFrame(stack.mode), stack.mode));
    for (auto frame = stack.frames.rbegin(); frame != stack.frames.rend(); ++frame) key.push_back(frame_ids[*frame]);
    auto [it, inserted] = merged.try_emplace(key, out.stacks.size());
    if (inserted) out.stacks.push_back({key, 0, stack.domain});
    NamedStack& named = out.stacks[it->second];
    named.count += stack.count;
    if (named.domain != stack.domain) named.domain = -1;
    out.samples += stack.count;
  }
  // By count, then by the frames' names: the same session always gives the same order.
  std::sort(out.stacks.begin(), out.stacks.end(), [&](const NamedStack& a, const NamedStack& b) {
    if (a.count != b.count) return a.count > b.count;
    return std::lexicographical_compare(a.frames.begin(), a.frames.end(), b.frames.begin(), b.frames.end(),
                                        [&](uint32_t x, uint32_t y) { return out.names[x] < out.names[y]; });
  });
  return out;
}

}  // namespace hvprof::report
