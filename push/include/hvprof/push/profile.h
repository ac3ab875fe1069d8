// A session's stacks pushed to Pyroscope: what `hvprof-report --push=URL` and
// `hvprof run --push=URL` do. One series per domain, each the pprof profile of that domain's
// stacks (report::FormatPprof), labelled with the domain so Pyroscope can select and compare
// them; pyroscope.h says what is sent and how.
#pragma once

#include <string>

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

// Pushes the stacks `filter` selects, one series per domain that has any, labelled domain (the
// number), domain_name, event, platform and host (the session's machine, when known); from and
// until are the session's profiling interval. Nothing in the session changes.
Result<PushSummary> PushProfile(const report::Profile& profile, const report::StackFilter& filter,
                                const ProfilePush& push);

}  // namespace hvprof::push
