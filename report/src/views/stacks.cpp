#include "hvprof/report/views/stacks.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

bool StackFilter::SelectsEvent(uint32_t counter) const {
  return std::find(events.begin(), events.end(), counter) != events.end();
}

bool StackFilter::Selects(const Stack& stack) const {
  // The idle loop's stacks stay out unless asked for (--include-idle, or --domain=idle).
  const bool idle_kept = include_idle || std::find(domains.begin(), domains.end(), kIdleDomain) != domains.end();
  return SelectsEvent(stack.event) && (idle_kept || !stack.idle) &&
         (domains.empty() || std::find(domains.begin(), domains.end(), stack.domain) != domains.end()) &&
         (modes.empty() || std::find(modes.begin(), modes.end(), stack.mode) != modes.end()) &&
         ((pids.empty() && processes.empty()) || std::binary_search(pids.begin(), pids.end(), stack.pid) ||
          std::binary_search(processes.begin(), processes.end(), std::pair{stack.domain, stack.pid})) &&
         (tids.empty() || std::binary_search(tids.begin(), tids.end(), stack.tid));
}

Result<std::vector<uint32_t>> SelectStackEvents(const Profile& profile, const std::vector<uint32_t>& requested,
                                                bool merge_unit_masks, bool merge_all) {
  const auto& events = profile.metadata().events;
  std::vector<uint32_t> chosen = requested;
  if (chosen.empty()) {
    if (merge_all) {
      for (const auto& event : events) chosen.push_back(event.counter);
    } else if (!events.empty()) {
      chosen.push_back(events.front().counter);
    }
  }
  if (chosen.empty()) chosen.push_back(0);  // a session without events: nothing is selected
  auto name_of = [&](uint32_t counter) -> std::string {
    for (const auto& event : events) {
      if (event.counter == counter) return event.name;
    }
    return {};
  };
  if (merge_unit_masks) {
    // Every counter of the chosen event's name: unit masks are added up, names are not.
    const std::string name = name_of(chosen.front());
    for (uint32_t counter : chosen) {
      if (name_of(counter) != name) {
        return MakeError(ErrorKind::kInvalidArgument,
                         "--merge=unitmask adds up one event's unit masks, but --event names {} and {}: give one "
                         "name, or --merge=all to add different events up",
                         name, name_of(counter));
      }
    }
    for (const auto& event : events) {
      if (event.name == name && std::find(chosen.begin(), chosen.end(), event.counter) == chosen.end()) {
        chosen.push_back(event.counter);
      }
    }
  } else if (!merge_all && chosen.size() > 1) {
    return Error(ErrorKind::kInvalidArgument,
                 "stacks show one event at a time: give one --event, or add them up with --merge=all "
                 "(--merge=unitmask for one event's unit masks)");
  }
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
  return chosen;
}

std::string StackEventName(const Profile& profile, const StackFilter& filter) {
  std::vector<std::string> names;
  for (const auto& event : profile.metadata().events) {
    if (!filter.SelectsEvent(event.counter)) continue;
    std::string name = event.name;
    // Two unit masks of one event: say which.
    for (const auto& other : profile.metadata().events) {
      if (&other != &event && other.name == event.name && filter.SelectsEvent(other.counter)) {
        name += fmt::format(":{:#04x}", event.unit_mask);
        break;
      }
    }
    names.push_back(std::move(name));
  }
  return names.empty() ? std::string("(no event)") : fmt::format("{}", fmt::join(names, " + "));
}

Result<StackRoot> ParseStackRoot(std::string_view text) {
  if (text == "domain") return StackRoot::kDomain;
  if (text == "process") return StackRoot::kProcess;
  if (text == "mode") return StackRoot::kMode;
  if (text == "none") return StackRoot::kNone;
  return MakeError(ErrorKind::kInvalidArgument,
                   "--stack-root={}: expected domain (the domain, then the mode, at the root), process (the domain, "
                   "the process, then the mode), mode (the mode at the root) or none",
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
                              : fmt::format("[unknown] {}+{:#x}", image.name, frame.address),
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
  // --stack-root=process: each process's frame, "comm (pid)", named once.
  std::map<std::pair<uint16_t, uint32_t>, uint32_t> process_frames;
  auto process_frame = [&](uint16_t domain, uint32_t pid) {
    auto [it, inserted] = process_frames.try_emplace({domain, pid}, 0);
    if (inserted) {
      const std::string* comm = pid == kNoPid || pid == store::kAnyProcess
                                    ? nullptr
                                    : profile.context().Comm(domain, pid, UINT64_MAX);  // its last name
      it->second = intern(pid == kNoPid || pid == store::kAnyProcess ? std::string("(no process)")
                          : comm == nullptr || comm->empty()        ? fmt::format("pid {}", pid)
                                                                    : fmt::format("{} ({})", *comm, pid),
                          kRootFrame);
    }
    return it->second;
  };
  std::unordered_map<std::vector<uint32_t>, size_t, KeyHash> merged;
  std::vector<uint32_t> key;
  for (const Stack& stack : profile.stacks()) {
    if (!options.filter.Selects(stack)) continue;
    key.clear();
    if (options.root == StackRoot::kDomain || options.root == StackRoot::kProcess) {
      key.push_back(intern(profile.DomainName(stack.domain), kRootFrame));
    }
    if (options.root == StackRoot::kProcess) key.push_back(process_frame(stack.domain, stack.pid));
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
