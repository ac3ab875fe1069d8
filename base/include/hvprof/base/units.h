// Parsing the quantities users type on command lines.
#pragma once

#include <cstdint>
#include <string_view>

#include "hvprof/base/result.h"

namespace hvprof {

// "250ms", "2s", "1.5s", "3m", "100us", "5000ns"; a bare number means seconds.
Result<uint64_t> ParseDurationNs(std::string_view text);
// Decimal, or hex with 0x.
Result<uint64_t> ParseUnsigned(std::string_view text);

}  // namespace hvprof
