// Parsing the quantities users type on command lines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "hvprof/base/result.h"

namespace hvprof {

// "250ms", "2s", "1.5s", "3m", "2h", "7d", "100us", "5000ns"; a bare number means seconds.
Result<uint64_t> ParseDurationNs(std::string_view text);
// And the quantities it prints: "1.5 GiB", "512 KiB", "37 B".
std::string FormatBytes(uint64_t bytes);
// "7d", "12h", "90s", "2h30m": the largest units that say it exactly, to the second (below a
// second: "250ms").
std::string FormatDuration(uint64_t ns);
// A CLOCK_REALTIME time as local time to the second, as `date` and `ls -l` show it
// ("2026-11-30 14:25:00"); "?" for 0.
std::string FormatLocalTime(uint64_t ns);

// A point in time as a user types it, as CLOCK_REALTIME ns: "2026-11-30 14:25", "2026-11-30T14:25:00",
// "2026-11-30" (midnight), "14:25" or "14:25:30" (today), all local time; "@1796000000" (seconds
// since the epoch); "now"; "-2h" (a duration before `now_ns`).
Result<uint64_t> ParseTimeNs(std::string_view text, uint64_t now_ns);

// Decimal, or hex with 0x.
Result<uint64_t> ParseUnsigned(std::string_view text);

}  // namespace hvprof
