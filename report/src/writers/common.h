// Private to the writers: what the text, CSV and JSON forms of a table share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/base/escape.h"
#include "hvprof/report/model.h"
#include "hvprof/report/views/scheduling.h"
#include "hvprof/report/views/table.h"

namespace hvprof::report {

double Percent(uint64_t part, uint64_t whole);
// Every name from a profile (symbols, images, comms, domains, paths, problems that quote them)
// goes through this before text or CSV prints it: a guest chooses those names.
inline std::string Safe(std::string_view name) { return EscapeForTerminal(name); }
// RFC 4180: a field with a comma, a quote or a line break is quoted, quotes doubled. Control
// characters are escaped first (Safe), so a name cannot end a row or act on a terminal.
std::string CsvField(const std::string& raw);
// The image's name as the options ask for it (-f: the full path).
const std::string& ImageName(const Profile& profile, uint32_t image, const ReportOptions& options);
// "file:line" of a -g row, or "(no location information)".
std::string SourceOf(const Profile& profile, const Row& row);

// A loss cause and what to do about it.
struct LossLine {
  const char* layer;
  const char* cause;
  uint64_t count;
  const char* advice;
};

// The causes with losses in this session, each with its advice.
std::vector<LossLine> Losses(const store::SessionMetadata& m);
uint64_t TotalLost(const std::vector<LossLine>& losses);
// The span of the platform's clock between the first and the last sample stored (0 if none).
uint64_t SampledNs(const store::SessionMetadata& m);

// A self-contained page (flamegraph.html, timeline.html) with `data` in place of its marker
// "/*HVPROF-DATA*/", as JSON that cannot end its <script> element early: no '<' is left
// unescaped, and bytes that are not UTF-8 become U+FFFD.
std::string FillPage(std::string_view page, const nlohmann::json& data);

// What went wrong in the scheduling records, a line each (nothing when all is well).
std::vector<std::string> SchedProblems(const SchedCounters& counters);
// What the platform said of its own sampling (linux), as a header line; empty if nothing.
std::string PlatformRates(const store::SessionMetadata& m);

}  // namespace hvprof::report
