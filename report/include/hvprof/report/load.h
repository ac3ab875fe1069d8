// Reading a session into the profile model: its metadata, its samples (the aggregate when it
// is current, else the raw chunks, skipping damaged ones), with --all-domains the profiles
// its active guests published, and every sample attributed to an image and a symbol.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/model.h"

namespace hvprof::report {

struct LoadOptions {
  bool demangle = true;
  bool lines = false;      // resolve file:line (-g)
  bool use_aggregate = true;
  // --all-domains: add the profiles active guests published (published/domain-N.json).
  bool all_domains = false;
  // Read every sample's call chain too (Profile::stacks), for the stack views and formats.
  bool stacks = false;
  // With stacks: keep the stacks of each vCPU, physical CPU and thread apart (pprof's vcpu,
  // pcpu and tid labels). More distinct stacks to count; the other views do not need it.
  bool stack_threads = false;
  // With stacks: the functions inlined at each frame, from DWARF (pprof's Lines). Costs a
  // walk of the images' inline scopes.
  bool inlines = false;
  // Keep each entry's process (--by-process, and filters by process): user code counted by image
  // is counted again from the raw samples, by process and image. The other views do not need it.
  bool processes = false;
  // Images: where to look for them when the recorded path is gone (like opreport's
  // --image-path), tried in order.
  std::vector<std::string> image_path;
  // Directories laid out as gdb's and debuginfod's .build-id/xx/rest (images) and
  // .build-id/xx/rest.debug (separate debug files), as an archive unpacks (SessionSource):
  // an image is looked up there by the build-id the session recorded FIRST, then at its
  // recorded path, then in image_path. An image recorded without a (valid) build-id, and
  // kallsyms and System.map texts, are looked up at ROOT/by-path/RECORDED-PATH. Reports still
  // name every image by its recorded path.
  std::vector<std::string> build_id_roots;
  // Ask the debuginfod servers of DEBUGINFOD_URLS (by build-id) for images missing here, or
  // here but not the one profiled, and for their debug info when they have none; nothing is
  // asked when DEBUGINFOD_URLS is unset or empty. The files that came from there are named in
  // the profile's notes.
  bool debuginfod = true;
  // What the report calls the session's directory (an archive's original one); empty: the
  // directory loaded.
  std::string shown_directory;
  // Count each entry's samples in this many equal spans of time too (Profile::slice_counts), from
  // the session's first sample to its last by the platform's clock each sample carries: from the
  // aggregate when hvprofd counted at least as many spans into it, else in the one pass over
  // samples.hvs. The diff measures from them how much more a row's share varies within a session
  // than independent samples would make it, and takes them as pseudo-repeats with --slices. Not
  // with the profiles guests published (all_domains), nor by LoadWindows.
  uint32_t time_slices = 0;
};

Result<Profile> LoadProfile(const std::string& directory, const LoadOptions& options);

// A span of wall-clock time, CLOCK_REALTIME ns: [since_ns, until_ns).
struct TimeRange {
  uint64_t since_ns = 0;
  uint64_t until_ns = UINT64_MAX;
};

// Continuous mode's windows under `session_root` (store/windows.h) that overlap `range`, whole,
// and the window in progress (samples/current) when it does, as one profile: each window's
// samples counted as its aggregate counts them (from samples.hvs where the aggregate is missing
// or behind, as in the window in progress), the aggregates merged (store::MergeAggregates), the
// metadata summed (samples, losses, idle samples, profiling intervals; the window record spans
// them all). Every view of one session's aggregate works on it: flat, call graph, stacks. Not the
// views that need every sample (LoadOptions::processes, stack_threads) nor --all-domains: those
// are refused (kUnsupported), saying to report one window. No window in the range is kNotFound,
// saying which span the windows cover.
Result<Profile> LoadWindows(const std::string& session_root, const TimeRange& range, const LoadOptions& options);

// The windows LoadWindows would merge, apart: each window's name (the window in progress as
// "current") and directory, oldest first. What a diff of two ranges compares, window by window
// as repeats. kNotFound as LoadWindows.
struct WindowSource {
  std::string name;
  std::string directory;
};
Result<std::vector<WindowSource>> WindowsInRange(const std::string& session_root, const TimeRange& range);


}  // namespace hvprof::report
