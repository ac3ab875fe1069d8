// Stacks in pprof's profile.proto format, gzipped, as `go tool pprof`, Pyroscope and other
// pprof readers take them. Written with libprotobuf from report/proto/profile.proto.
//
// One event per file (the session's first, or the one asked for). Sample types: samples/count,
// and for the linux cpu-clock timer (CPU_CLOCK, whose period is nanoseconds) cpu/nanoseconds.
// One Mapping per image, one Function per symbol, one Location per frame address; each
// sample is one distinct stack with labels domain (number), domain_name, mode, and pid, tid,
// vcpu and pcpu (numbers, when
// known).
#pragma once

#include <string>

#include "hvprof/base/result.h"
#include "hvprof/report/model.h"
#include "hvprof/report/views/stacks.h"

namespace hvprof::report {

// The gzipped profile of the stacks `filter` selects.
Result<std::string> FormatPprof(const Profile& profile, const StackFilter& filter);

}  // namespace hvprof::report
