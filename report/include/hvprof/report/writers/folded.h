// Stacks in the folded format flame-graph tools read (flamegraph.pl, inferno, speedscope):
// one line per stack, "root;caller;...;function COUNT". A ';' or a control character in a name
// would split or break a line: ';' becomes ':', control characters are escaped as \xNN.
#pragma once

#include <string>
#include <vector>

#include "hvprof/report/views/stacks.h"

namespace hvprof::report {

std::string FormatFolded(const NamedStacks& stacks);

}  // namespace hvprof::report
