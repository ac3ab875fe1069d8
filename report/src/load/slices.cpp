// Counts per time slice (SliceCounts, --slices), from the aggregate or samples.hvs.
#include "profile_builder.h"

namespace hvprof::report {

Result<std::vector<uint32_t>> ProfileBuilder::Slice(const Profile& profile, uint32_t slices) {
  if (slices == 0) return std::vector<uint32_t>{};
  if (!profile.published_.empty()) {
    return MakeError(ErrorKind::kInvalidArgument,
                     "the profiles guests published (--all-domains) hold no samples to cut into time slices");
  }
  // Each entry's count per slice: from the aggregate's time spans when it has at least as many
  // (hvprofd counts up to 64 spans of equal length, doubling their length as the session grows:
  // slice k is spans [k*n/slices, (k+1)*n/slices), so slices differ by at most one span in
  // length, and the last span may be partly empty), else from the samples, in one pass.
  std::vector<uint32_t> counts;  // entry-major
  const uint32_t spans = profile.time_slices_;
  if (spans >= slices && profile.slice_counts_.size() == profile.entries_.size() * spans) {
    counts.assign(profile.entries_.size() * slices, 0);
    std::vector<uint32_t> slice_of(spans);
    for (uint32_t span = 0; span < spans; ++span) {
      slice_of[span] = static_cast<uint32_t>(uint64_t{span} * slices / spans);
    }
    for (size_t e = 0; e < profile.entries_.size(); ++e) {
      for (uint32_t span = 0; span < spans; ++span) {
        uint32_t& count = counts[e * slices + slice_of[span]];
        if (__builtin_add_overflow(count, profile.slice_counts_[e * spans + span], &count)) {
          return MakeError(ErrorKind::kInvalidArgument, "{}: a sample's count in one time slice is beyond 32 bits",
                           profile.loaded_directory_);
        }
      }
    }
  } else {
    // Equal spans of the platform's clock from the first sample to the last (the file's order
    // is the order the agent drained the rings in, a vCPU at a time: not time).
    const std::string path = profile.loaded_directory_ + "/" + store::kSamplesFile;
    const auto id = store::ParseSessionId(profile.metadata_.session_id);
    const auto session = id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt;
    uint64_t first = profile.metadata_.first_sample_ns;
    uint64_t last = profile.metadata_.last_sample_ns;
    if (last <= first) {
      first = UINT64_MAX;
      last = 0;
      HVPROF_TRY(scanned, store::ReadSamplesFile(
                              path,
                              [&](const store::StoredSample& s) {
                                first = std::min(first, s.time_ns);
                                last = std::max(last, s.time_ns);
                              },
                              session));
      (void)scanned;
    }
    // The whole context (a profile of an aggregate may hold only its regions).
    const store::Translation translation{profile.has_context_file_ ? &profile.context() : nullptr,
                                         profile.keeps_pids_};
    HVPROF_TRY(counted, store::AggregateSamplesFile(path, nullptr, session, store::StackDetail::kNone,
                                                    {slices, first, last}, 0, translation));
    if (counted.time_slices != slices) {
      return MakeError(ErrorKind::kInvalidArgument, "{}: a sample's count in one time slice is beyond 32 bits", path);
    }
    // Both sorted by key: the profile's entries find their counts in one merge. A key the profile
    // does not have (the file grew since it was loaded) is left out.
    std::vector<std::pair<store::AggregateKey, uint32_t>> index;
    index.reserve(profile.entries_.size());
    for (size_t e = 0; e < profile.entries_.size(); ++e) {
      const Entry& entry = profile.entries_[e];
      index.push_back({store::AggregateKey{entry.ip, entry.pid, entry.domain, entry.mode, entry.event},
                       static_cast<uint32_t>(e)});
    }
    std::sort(index.begin(), index.end(), [](const auto& l, const auto& r) { return l.first < r.first; });
    counts.assign(profile.entries_.size() * slices, 0);
    size_t at = 0;
    for (size_t i = 0; i < counted.entries.size(); ++i) {
      while (at < index.size() && index[at].first < counted.entries[i].key) ++at;
      if (at == index.size()) break;
      if (!(index[at].first == counted.entries[i].key)) continue;
      // An address named apart by time (JIT code replaced there) is counted below, by time.
      if (at + 1 < index.size() && index[at + 1].first == counted.entries[i].key) continue;
      std::copy_n(counted.slice_counts.begin() + static_cast<ptrdiff_t>(i * slices), slices,
                  counts.begin() + static_cast<ptrdiff_t>(index[at].second) * slices);
    }
    HVPROF_TRYV(CountTimeSplits(profile, store::TimeSlicing{slices, first, last}, counts));
  }
  return counts;
}

Result<void> ProfileBuilder::CountTimeSplits(const Profile& profile, const store::TimeSlicing& slicing,
                                             std::vector<uint32_t>& counts) {
  const uint32_t slices = slicing.count;
  if (!profile.time_splits_.empty()) {
    // The entries one address was split into, by the span of their samples' times.
    std::map<std::tuple<uint16_t, uint32_t, uint8_t, uint8_t, uint64_t>, std::vector<Profile::TimeSplit>> splits;
    for (const Profile::TimeSplit& split : profile.time_splits_) {
      const Entry& entry = profile.entries_[split.entry];
      splits[{entry.domain, entry.pid, entry.mode, entry.event, entry.ip}].push_back(split);
      std::fill_n(counts.begin() + static_cast<ptrdiff_t>(split.entry * slices), slices, 0);
    }
    const std::string path = profile.loaded_directory_ + "/" + store::kSamplesFile;
    const auto id = store::ParseSessionId(profile.metadata_.session_id);
    HVPROF_TRY(scanned, store::ReadSamplesFile(
                            path,
                            [&](const store::StoredSample& s) {
                              const auto found = splits.find({s.domain, s.pid, s.mode, s.event, s.ip});
                              if (found == splits.end()) return;
                              for (const Profile::TimeSplit& split : found->second) {
                                if (s.time_ns < split.first_ns || s.time_ns > split.last_ns) continue;
                                ++counts[split.entry * slices + slicing.SliceOf(s.time_ns)];
                                break;
                              }
                            },
                            id ? std::optional<std::span<const uint8_t, 16>>(*id) : std::nullopt));
    (void)scanned;
  }
  return Ok();
}

Result<std::vector<uint32_t>> SliceCounts(const Profile& profile, uint32_t slices) {
  return ProfileBuilder::Slice(profile, slices);
}

}  // namespace hvprof::report
