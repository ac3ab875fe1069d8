// The scheduling time line (hvprof-report --timeline): per pCPU, who ran when. Cut into
// buckets (the text rows: per bucket the domain that ran most of it), and, for the trace
// formats, every stretch a non-idle entity ran (a slice). Built in the scheduling view's one
// pass (views/scheduling.h), whose report comes with it.
#pragma once

#include <cstdint>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/sched_records.h"
#include "hvprof/report/views/scheduling.h"

namespace hvprof::report {

inline constexpr uint32_t kDefaultTimelineBuckets = 60;
inline constexpr uint32_t kMaxTimelineBuckets = 10000;
// A bucket no record covers most of (kSchedNobody's time): the cell's "domain".
inline constexpr uint16_t kTimelineUnknown = 0xFFFF;

struct TimelineOptions {
  uint32_t buckets = kDefaultTimelineBuckets;  // 1..kMaxTimelineBuckets
  bool slices = false;                         // also every slice (for the trace formats)
};

// A stretch of time one non-idle entity ran on one pCPU: adjacent stretches of the same entity
// are one slice, so the slices of one pCPU never overlap.
struct TimelineSlice {
  uint16_t pcpu = 0;
  uint32_t entity = 0;  // index into report.entities
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

struct Timeline {
  SchedReport report;
  uint32_t buckets = 0;
  // Bucket b of the window is [start + window * b / buckets, start + window * (b + 1) / buckets).
  uint64_t BucketStart(uint32_t bucket) const;
  // [pcpu][bucket]: the domain that ran most of the bucket: a domain id, hvprof::kIdleDomain
  // for the idle vCPU, kTimelineUnknown for time no record accounts for (ties: the lower id).
  std::vector<std::vector<uint16_t>> cells;
  // The domains in the cells, those that ran most first (by report.domains' running time),
  // then kIdleDomain, then kTimelineUnknown.
  std::vector<uint16_t> legend;
  std::vector<TimelineSlice> slices;  // with TimelineOptions::slices: by pCPU, then time
};

Result<Timeline> BuildTimeline(const SchedRecords& records, const SchedOptions& sched, const TimelineOptions& options);

}  // namespace hvprof::report
