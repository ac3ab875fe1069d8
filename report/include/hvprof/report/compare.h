// Comparing sessions end to end, for hvprof-report --diff and hvprof run --baseline: each
// side's sessions opened (names, paths, archives), loaded, filtered by names resolved against
// each session's own metadata, and diffed (views/diff.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/load.h"
#include "hvprof/report/source.h"
#include "hvprof/report/views/diff.h"

namespace hvprof::report {

// --domain and --event as the user wrote them (names or ids; "idle" for the idle domain),
// resolved against one session: the ids go into `options`.
Result<void> ResolveNamedFilters(const Profile& profile, const std::vector<std::string>& domains,
                                 const std::vector<std::string>& events, ReportOptions* options);
// --comm against `profile`'s processes: adds to options->processes every (domain, pid) whose
// latest name is one of `comms` (a pid reused under another name counts as that one); a name no
// process had is an error naming the session.
Result<void> ResolveProcessNames(const Profile& profile, const std::vector<std::string>& comms,
                                 ReportOptions* options);

struct DiffRequest {
  std::vector<std::string> base;  // session arguments, as OpenSessionSource takes them
  std::vector<std::string> next;
  // A side that is continuous mode's windows in a time range instead (its list above empty):
  // each window is a run of that side (WindowsInRange), compared as repeats.
  std::optional<TimeRange> base_range;
  std::optional<TimeRange> next_range;
  std::string session_root;
  LoadOptions load;
  ReportOptions table;            // the view and the filters that need no session
  std::vector<std::string> domains, events;
  DiffOptions diff;
};

struct LoadedDiff {
  std::vector<SessionSource> sources;  // kept while the profiles are used
  std::vector<Profile> profiles;
  Diff diff;
};

Result<LoadedDiff> DiffSessions(const DiffRequest& request);

}  // namespace hvprof::report
