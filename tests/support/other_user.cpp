#include "other_user.h"

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace hvprof::testing {

void BecomeUser(uid_t uid) {
  if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(3);
}

int RunAsUser(uid_t uid, const std::function<bool()>& work) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    BecomeUser(uid);
    ::_exit(work() ? 0 : 4);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace hvprof::testing
