#include "hvprof/report/views/stacks.h"

#include <algorithm>
#include <map>

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

std::vector<NamedStack> NameStacks(const Profile& profile, const StackOptions& options) {
  // Each frame's name once.
  std::vector<std::string> frame_names(profile.frames().size());
  for (size_t f = 0; f < profile.frames().size(); ++f) {
    const Entry& frame = profile.frames()[f];
    const Symbol& symbol = profile.symbols()[frame.symbol];
    const Image& image = profile.images()[frame.image];
    frame_names[f] = symbol.resolved || symbol.name.starts_with("[unknown in ")
                         ? symbol.name
                         : fmt::format("[unknown] {}+{:#x}", image.name, frame.ip);
  }
  std::map<std::vector<std::string>, uint64_t> merged;
  std::vector<std::string> names;
  for (const Stack& stack : profile.stacks()) {
    if (!options.filter.Selects(stack)) continue;
    names.clear();
    if (options.root == StackRoot::kDomain) names.push_back(profile.DomainName(stack.domain));
    if (options.root != StackRoot::kNone) names.push_back(ModeFrame(stack.mode));
    for (auto frame = stack.frames.rbegin(); frame != stack.frames.rend(); ++frame) {
      names.push_back(frame_names[*frame]);
    }
    merged[names] += stack.count;
  }
  std::vector<NamedStack> out;
  out.reserve(merged.size());
  for (auto& [frames, count] : merged) out.push_back({frames, count});
  std::stable_sort(out.begin(), out.end(), [](const NamedStack& a, const NamedStack& b) { return a.count > b.count; });
  return out;
}

}  // namespace hvprof::report
