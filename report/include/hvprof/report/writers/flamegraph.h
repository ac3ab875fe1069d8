// Stacks as one self-contained HTML page: an interactive flame graph (click to zoom, search
// with highlight, hover for counts, flame or icicle), coloured by domain and mode, under the
// session's header. The page is report/src/writers/flamegraph.html, compiled in; the stacks go
// into it as JSON. It loads nothing from anywhere (its Content-Security-Policy forbids it), so
// it opens offline and can be mailed around; every name is shown as text, never as markup.
#pragma once

#include <string>

#include "hvprof/report/model.h"
#include "hvprof/report/views/stacks.h"

namespace hvprof::report {

// The page for `stacks`, named by NameStacks(profile, {root, filter}).
std::string FormatFlameGraph(const Profile& profile, const NamedStacks& stacks, const StackFilter& filter);

}  // namespace hvprof::report
