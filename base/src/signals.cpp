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

void InstallReloadHandler(void (*on_reload)(int)) {
  struct sigaction action {};
  action.sa_handler = on_reload;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGHUP, &action, nullptr);
}

}  // namespace hvprof
