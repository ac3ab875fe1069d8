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
// HTML (--format=html): a self-contained page (writers/timeline.html) with a swim lane per
// pCPU drawn from the same slices, zoomed with the wheel and moved by dragging, a colour per
// domain, each slice's vCPU or task on hover, and tables of each pCPU's busy time and each
// entity's running time summed from the slices. It loads nothing and sets names as text.
#pragma once

#include <string>

#include "hvprof/report/views/timeline.h"

namespace hvprof::report {

std::string FormatTimelineText(const Timeline& timeline);
std::string FormatTimelineCsv(const Timeline& timeline);
// Both need the timeline built with TimelineOptions::slices. `session` names it in the page.
std::string FormatChromeTrace(const Timeline& timeline);
std::string FormatTimelineHtml(const Timeline& timeline, const std::string& session);

}  // namespace hvprof::report
