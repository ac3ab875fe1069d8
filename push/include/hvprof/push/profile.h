// A session's stacks pushed to Pyroscope: what `hvprof-report --push=URL` and
// `hvprof run --push=URL` do. One series per domain, each the pprof profile of that domain's
// stacks (report::FormatPprof), labelled with the domain so Pyroscope can select and compare
// them; pyroscope.h says what is sent and how.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/push/pyroscope.h"
#include "hvprof/report/model.h"
#include "hvprof/report/views/stacks.h"

namespace hvprof::push {

// The environment variables a password or user name may come from (never the command line,
// where `ps` shows it to every user).
inline constexpr const char* kUserVariable = "HVPROF_PUSH_USER";
inline constexpr const char* kPasswordVariable = "HVPROF_PUSH_PASSWORD";

struct ProfilePush {
  PushOptions options;        // url, tenant; username and password from the environment
  std::string app = "hvprof"; // Pyroscope's application name (service_name)
};

// --push=URL and --push-tenant, with credentials from kUserVariable and kPasswordVariable.
ProfilePush PushFromCommandLine(std::string url, std::string tenant, std::string app);

// How a profile is cut into series, beyond one per domain.
struct SeriesChoice {
  // One series per domain and mode, labelled mode=user|kernel|hypervisor: Pyroscope then selects
  // the hypervisor's time (or a guest kernel's) by label.
  bool by_mode = false;
  // The interval the series cover, unix nanoseconds; 0 and 0: the session's profiling interval.
  uint64_t from_ns = 0;
  uint64_t until_ns = 0;
  // Labels after hvprof's own (a key given twice is refused by SeriesName).
  std::vector<std::pair<std::string, std::string>> labels;
};

// The series PushProfile sends, built and not sent: one per domain (and mode, with by_mode) that
// `filter` selects stacks of, labelled domain (the number), domain_name, [mode,] event, platform
// and host (the session's machine, when known). kNotFound when `filter` selects no stack.
Result<std::vector<PyroscopeSeries>> ProfileSeries(const report::Profile& profile, const report::StackFilter& filter,
                                                   const ProfilePush& push, const SeriesChoice& choice);

// Pushes the stacks `filter` selects, one series per domain that has any, labelled domain (the
// number), domain_name, event, platform and host (the session's machine, when known); from and
// until are the session's profiling interval. Nothing in the session changes.
Result<PushSummary> PushProfile(const report::Profile& profile, const report::StackFilter& filter,
                                const ProfilePush& push);

}  // namespace hvprof::push
