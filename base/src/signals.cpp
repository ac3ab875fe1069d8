#include "hvprof/base/signals.h"

#include <csignal>

namespace hvprof {

void InstallStopHandler(void (*on_stop)(int)) {
  struct sigaction action {};
  action.sa_handler = on_stop;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace hvprof
