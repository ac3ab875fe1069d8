// Counts per time slice (LoadOptions::time_slices), from the aggregate's spans or from the pass
// over samples.hvs.
#include "profile_builder.h"

namespace hvprof::report {

Result<void> ProfileBuilder::SlicesFromSpans(const store::Aggregate& aggregate, uint32_t slices) {
  // hvprofd counts up to 64 spans of equal length, doubling their length as the session grows:
  // slice k is spans [k*n/slices, (k+1)*n/slices), so slices differ by at most one span in
  // length, and the last span may be partly empty.
  const uint32_t spans = aggregate.time_slices;
  std::vector<uint32_t>& counts = p_.slice_counts;
  counts.assign(p_.entries.size() * slices, 0);
  std::vector<uint32_t> slice_of(spans);
  for (uint32_t span = 0; span < spans; ++span) slice_of[span] = static_cast<uint32_t>(uint64_t{span} * slices / spans);
  for (size_t e = 0; e < p_.entries.size(); ++e) {
    for (uint32_t span = 0; span < spans; ++span) {
      uint32_t& count = counts[e * slices + slice_of[span]];
      if (__builtin_add_overflow(count, aggregate.slice_counts[e * spans + span], &count)) {
        return MakeError(ErrorKind::kInvalidArgument, "{}: a sample's count in one time slice is beyond 32 bits",
                         p_.loaded_directory);
      }
    }
  }
  p_.time_slices = slices;
  return Ok();
}

void ProfileBuilder::SlicesFromPass(const store::Aggregate& counted, uint32_t slices, bool by_key) {
  std::vector<uint32_t>& counts = p_.slice_counts;
  p_.time_slices = slices;
  if (!by_key) {
    // The pass counted the entries themselves: one to one.
    counts = counted.slice_counts;
    return;
  }
  // Both sorted by key: the profile's entries find their counts in one merge. A key the profile
  // does not have (the file grew since the aggregate was written) is left out.
  std::vector<std::pair<store::AggregateKey, uint32_t>> index;
  index.reserve(p_.entries.size());
  for (size_t e = 0; e < p_.entries.size(); ++e) {
    const Entry& entry = p_.entries[e];
    index.push_back({store::AggregateKey{entry.ip, entry.pid, entry.domain, entry.mode, entry.event},
                     static_cast<uint32_t>(e)});
  }
  std::sort(index.begin(), index.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
  counts.assign(p_.entries.size() * slices, 0);
  size_t at = 0;
  for (size_t i = 0; i < counted.entries.size(); ++i) {
    while (at < index.size() && index[at].first < counted.entries[i].key) ++at;
    if (at == index.size()) break;
    if (!(index[at].first == counted.entries[i].key)) continue;
    std::copy_n(counted.slice_counts.begin() + static_cast<ptrdiff_t>(i * slices), slices,
                counts.begin() + static_cast<ptrdiff_t>(index[at].second) * slices);
  }
}

Result<void> ProfileBuilder::SlicesWithoutPass(const store::Aggregate& aggregate, uint32_t slices, bool spans_serve) {
  if (spans_serve) return SlicesFromSpans(aggregate, slices);
  p_.time_slices = slices;
  p_.slice_counts.assign(p_.entries.size() * slices, 0);
  if (p_.entries.empty()) return Ok();
  const std::string& directory = p_.loaded_directory.empty() ? p_.directory : p_.loaded_directory;
  if (aggregate.time_slices < 2) {
    return MakeError(ErrorKind::kUnsupported,
                     "{} has no raw samples (dropped to keep the windows within their disk budget), and its aggregate "
                     "kept no time slices: compare windows that kept their raw samples, or compare them as repeats",
                     directory);
  }
  return MakeError(ErrorKind::kUnsupported,
                   "{} has no raw samples (dropped to keep the windows within their disk budget), and its aggregate "
                   "counts {} time spans, fewer than the {} slices asked for: ask for at most {} (--slices), or "
                   "compare windows that kept their raw samples",
                   directory, aggregate.time_slices, slices, aggregate.time_slices);
}

}  // namespace hvprof::report
