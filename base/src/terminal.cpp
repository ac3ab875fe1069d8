#include "hvprof/base/terminal.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace hvprof {

Result<bool> UseColor(std::string_view when, int fd) {
  if (when == "always") return true;
  if (when == "never") return false;
  if (!when.empty() && when != "auto") {
    return MakeError(ErrorKind::kInvalidArgument, "--color: '{}' is not auto, always or never", when);
  }
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color != nullptr && *no_color != '\0') return false;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  return ::isatty(fd) == 1;
}

}  // namespace hvprof
