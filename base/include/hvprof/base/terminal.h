// Whether to colour what goes to a file descriptor: --color=auto|always|never, as GNU tools
// spell it, and NO_COLOR (https://no-color.org).
#pragma once

#include <string_view>

#include "hvprof/base/result.h"

namespace hvprof {

// "always": colour; "never": none; "auto" (or empty): colour only when `fd` is a terminal and
// NO_COLOR is unset or empty (TERM=dumb too: none). NO_COLOR does not override "always", which
// the user asked for by name. Any other word is refused.
Result<bool> UseColor(std::string_view when, int fd);

}  // namespace hvprof
