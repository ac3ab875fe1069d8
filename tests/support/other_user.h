// Another local user, for the tests written as her attacks (issue 38): what she does runs in a
// child of the test under her uid. Only root can become another user: such tests skip first,
// naming root as what they need.
#pragma once

#include <sys/types.h>

#include <functional>

namespace hvprof::testing {

// nobody: a user with no hvprof of her own.
inline constexpr uid_t kNobody = 65534;

// In a child process: drops every supplementary group and becomes `uid` (gid `uid` too);
// _exit(3) when it cannot.
void BecomeUser(uid_t uid);

// Runs `work` in a child as `uid` and returns the child's exit status: 0 when `work` returned
// true, 4 when false, 3 when it could not become `uid`, 128 + N when signal N ended it.
int RunAsUser(uid_t uid, const std::function<bool()>& work);

}  // namespace hvprof::testing
