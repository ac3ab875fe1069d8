// The time line (views/timeline.h) printed.
//
// Text: one row per pCPU, one character per bucket: the domain that ran most of it ('A', 'B'...
// in the order of the domains' running time; '.' the idle vCPU; '?' no record says; '#' a
// domain beyond the 62 letters and digits), then the legend.
// CSV: a row per pCPU and bucket (start, end, the domain that ran most of it).
// Chrome trace-event JSON (--format=perfetto, alias chrome-json; docs/report-formats.md): one
// complete ("X") event per slice on a track per pCPU (pid 1 "pCPUs", tid = pCPU + 1), ts and
// dur in microseconds with the nanoseconds as three decimals, from the window's start; it
// opens in ui.perfetto.dev and chrome://tracing.
#pragma once

#include <string>

#include "hvprof/report/views/timeline.h"

namespace hvprof::report {

std::string FormatTimelineText(const Timeline& timeline);
std::string FormatTimelineCsv(const Timeline& timeline);
// Needs the timeline built with TimelineOptions::slices.
std::string FormatChromeTrace(const Timeline& timeline);

}  // namespace hvprof::report
