// Call stacks over a Profile loaded with LoadOptions::stacks: each distinct stack of one event,
// filtered, named frame by frame and rooted as asked, for the folded format (writers/folded.h)
// the HTML flame graph (writers/flamegraph.h) and pprof.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/model.h"

namespace hvprof::report {

// What the root of every stack is, so that one graph can show the whole host.
enum class StackRoot {
  kDomain,   // the domain's name ("dom0", "dom1 (build-vm)"), then the mode
  kProcess,  // the domain's name, the process ("make (4242)"), then the mode
             // (LoadOptions::processes keeps each stack's process)
  kMode,     // the mode ("[user]", "[kernel]", "[hypervisor]")
  kNone,     // the outermost caller
};

// Which stacks a stack view (folded, -c, pprof) takes: one event (or several added up, as
// --merge asks), and --domain and --mode.
struct StackFilter {
  std::vector<uint32_t> events;   // the logical counters whose samples are counted
  std::vector<uint16_t> domains;  // only these (all when empty)
  std::vector<uint8_t> modes;     // only these (all when empty)
  // Only stacks of these processes (LoadOptions::processes: --pid in any domain, --comm's by
  // domain) and threads (stack_threads); all when empty. Each sorted.
  std::vector<uint32_t> pids;
  std::vector<std::pair<uint16_t, uint32_t>> processes;
  std::vector<uint32_t> tids;
  // Keep the idle loop's stacks (Stack::idle): --include-idle, or --domain names idle.
  bool include_idle = false;
  bool Selects(const Stack& stack) const;
  bool SelectsEvent(uint32_t counter) const;
};

struct StackOptions {
  StackRoot root = StackRoot::kDomain;
  StackFilter filter;
};

// One stack as flame-graph tools read it: frames root first, each an index into
// NamedStacks::names.
struct NamedStack {
  std::vector<uint32_t> frames;  // root first, the sampled function last
  uint64_t count = 0;
  int32_t domain = -1;           // the domain of every sample merged here; -1 when several
};

// A name's kind, for colouring: the mode of the frames it names, or a root frame.
inline constexpr uint8_t kRootFrame = 3;

struct NamedStacks {
  std::vector<std::string> names;  // each distinct frame name once
  std::vector<uint8_t> modes;      // per name: 0 user, 1 kernel, 2 hypervisor, kRootFrame
  std::vector<NamedStack> stacks;  // by count, then by frames
  uint64_t samples = 0;            // the sum of the stacks' counts
};

// The stacks, named: each frame by its symbol; a frame nothing can name as
// "[unknown] IMAGE+0xADDRESS" (it never disappears). Stacks that name the same frames are
// merged.
NamedStacks NameStacks(const Profile& profile, const StackOptions& options);

// The events a stack view counts. `requested` are --event's counters (none: the session's
// first event). Stacks show one event at a time unless merged: with `merge_unit_masks`, every
// event of the same name is added up (OProfile's unit masks); with `merge_all`, every event
// asked for (all of them when none is).
Result<std::vector<uint32_t>> SelectStackEvents(const Profile& profile, const std::vector<uint32_t>& requested,
                                                bool merge_unit_masks, bool merge_all);

// The name of what a stack view counts: "CPU_CLK_UNHALTED", or "A + B" when events are merged.
std::string StackEventName(const Profile& profile, const StackFilter& filter);

// --stack-root's names.
Result<StackRoot> ParseStackRoot(std::string_view text);

}  // namespace hvprof::report
