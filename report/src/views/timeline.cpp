// The time line: the scheduling view's pCPU intervals, cut into buckets and kept as slices.
#include "hvprof/report/views/timeline.h"

#include <algorithm>
#include <tuple>

namespace hvprof::report {

uint64_t Timeline::BucketStart(uint32_t bucket) const {
  const unsigned __int128 offset = static_cast<unsigned __int128>(report.window_ns()) * bucket / buckets;
  return report.start_ns + static_cast<uint64_t>(offset);
}

Result<Timeline> BuildTimeline(const SchedRecords& records, const SchedOptions& sched, const TimelineOptions& options) {
  if (options.buckets == 0 || options.buckets > kMaxTimelineBuckets) {
    return MakeError(ErrorKind::kInvalidArgument, "the time line takes 1 to {} buckets, not {}", kMaxTimelineBuckets,
                     options.buckets);
  }
  const auto& entities = records.entities();
  const SchedWindow span = WindowOf(records, sched);
  const uint64_t start = span.start_ns;
  const uint64_t end = span.end_ns;
  const unsigned __int128 window = end >= start ? end - start : 0;
  const uint32_t n = options.buckets;
  // Time per (pCPU, bucket) and domain; few domains share a bucket, so a short list each.
  std::vector<std::vector<std::vector<std::pair<uint16_t, uint64_t>>>> time;
  std::vector<TimelineSlice> slices;
  std::vector<size_t> last_slice;  // per pCPU: its latest slice, to join adjacent ones
  auto bucket_start = [&](uint64_t b) { return start + static_cast<uint64_t>(window * b / n); };
  auto bucket_of = [&](uint64_t t) {
    uint64_t b = static_cast<uint64_t>(static_cast<unsigned __int128>(t - start) * n / window);
    b = std::min<uint64_t>(b, n - 1);
    while (b > 0 && bucket_start(b) > t) --b;
    while (b + 1 < n && bucket_start(b + 1) <= t) ++b;
    return b;
  };
  auto on_interval = [&](const SchedInterval& interval) {
    if (interval.pcpu >= time.size()) {
      time.resize(interval.pcpu + 1, std::vector<std::vector<std::pair<uint16_t, uint64_t>>>(n));
      last_slice.resize(interval.pcpu + 1, SIZE_MAX);
    }
    const uint16_t domain = interval.entity == kSchedNobody ? kTimelineUnknown
                            : entities[interval.entity].idle ? hvprof::kIdleDomain
                                                             : entities[interval.entity].domain;
    for (uint64_t b = bucket_of(interval.start_ns); b < n && bucket_start(b) < interval.end_ns; ++b) {
      const uint64_t to = b + 1 < n ? std::min(interval.end_ns, bucket_start(b + 1)) : interval.end_ns;
      const uint64_t overlap = to - std::max(interval.start_ns, bucket_start(b));
      auto& cell = time[interval.pcpu][b];
      auto it = std::find_if(cell.begin(), cell.end(), [&](const auto& entry) { return entry.first == domain; });
      if (it == cell.end()) {
        cell.push_back({domain, overlap});
      } else {
        it->second += overlap;
      }
    }
    if (!options.slices || domain == kTimelineUnknown || domain == hvprof::kIdleDomain) return;
    size_t& last = last_slice[interval.pcpu];
    if (last != SIZE_MAX && slices[last].entity == interval.entity && slices[last].end_ns == interval.start_ns) {
      slices[last].end_ns = interval.end_ns;
    } else {
      last = slices.size();
      slices.push_back({interval.pcpu, interval.entity, interval.start_ns, interval.end_ns});
    }
  };
  HVPROF_TRY(report, AnalyzeSched(records, sched, window == 0 ? std::function<void(const SchedInterval&)>{}
                                                               : std::function<void(const SchedInterval&)>(on_interval)));
  Timeline timeline;
  timeline.buckets = n;
  time.resize(report.pcpus, std::vector<std::vector<std::pair<uint16_t, uint64_t>>>(n));
  std::vector<bool> used(0x10000, false);
  for (const auto& row : time) {
    std::vector<uint16_t> cells(n, kTimelineUnknown);
    for (uint32_t b = 0; b < n; ++b) {
      uint64_t most = 0;
      for (const auto& [domain, ns] : row[b]) {
        if (ns > most || (ns == most && ns > 0 && domain < cells[b])) {
          most = ns;
          cells[b] = domain;
        }
      }
      used[cells[b]] = true;
    }
    timeline.cells.push_back(std::move(cells));
  }
  std::vector<const SchedDomainStats*> by_running;
  for (const SchedDomainStats& d : report.domains) by_running.push_back(&d);
  std::stable_sort(by_running.begin(), by_running.end(), [](const SchedDomainStats* a, const SchedDomainStats* b) {
    return a->ns[0] > b->ns[0];
  });
  for (const SchedDomainStats* d : by_running) {
    if (used[d->domain]) timeline.legend.push_back(d->domain);
  }
  for (uint16_t special : {hvprof::kIdleDomain, kTimelineUnknown}) {
    if (used[special]) timeline.legend.push_back(special);
  }
  std::sort(slices.begin(), slices.end(), [](const TimelineSlice& a, const TimelineSlice& b) {
    return std::tie(a.pcpu, a.start_ns) < std::tie(b.pcpu, b.start_ns);
  });
  timeline.slices = std::move(slices);
  timeline.report = std::move(report);
  return timeline;
}

}  // namespace hvprof::report
