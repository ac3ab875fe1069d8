#include "hvprof/agent/session_writer.h"

#include <sys/random.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "hvprof/base/files.h"

namespace hvprof::agent {

std::array<uint8_t, 16> NewSessionId() {
  std::array<uint8_t, 16> id{};
  if (::getrandom(id.data(), id.size(), 0) != static_cast<ssize_t>(id.size())) {
    // Not a secret: a clock is good enough to tell sessions apart.
    const auto now = std::chrono::system_clock::now().time_since_epoch().count();
    std::memcpy(id.data(), &now, sizeof now);
  }
  return id;
}

std::string HexId(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t byte : bytes) out += fmt::format("{:02x}", byte);
  return out;
}

namespace {

bool SameEvents(const store::SessionMetadata& a, const store::SessionMetadata& b) {
  if (a.events.size() != b.events.size()) return false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    const auto& x = a.events[i];
    const auto& y = b.events[i];
    if (x.counter != y.counter || x.code != y.code || x.unit_mask != y.unit_mask ||
        x.count != y.count || x.kernel != y.kernel || x.user != y.user) {
      return false;
    }
  }
  return true;
}

}  // namespace

SessionWriter::SessionWriter(std::string directory, store::SessionMetadata metadata,
                             store::SamplesWriter writer)
    : directory_(std::move(directory)),
      metadata_(std::move(metadata)),
      writer_(std::move(writer)),
      by_domain_mode_(size_t{hvpmu::kDomainIdle} + 1) {}

Result<SessionWriter> SessionWriter::Open(const std::string& directory,
                                          store::SessionMetadata metadata) {
  HVPROF_TRYV(MakeDirectories(directory));
  const std::string samples_path = directory + "/" + store::kSamplesFile;
  const std::string metadata_path = directory + "/" + store::kMetadataFile;
  std::error_code ec;
  std::array<uint8_t, 16> id = NewSessionId();
  if (std::filesystem::exists(metadata_path, ec)) {
    HVPROF_TRY(text, ReadFileToString(metadata_path, size_t{64} << 20, Links::kRefuse));
    auto previous = store::ParseMetadata(text, metadata_path);
    if (!previous) {
      return MakeError(ErrorKind::kBadState,
                       "{} holds a damaged session ({}); run `hvprof --reset` or move it away",
                       directory, previous.error().message());
    }
    if (!SameEvents(previous.value(), metadata)) {
      return MakeError(ErrorKind::kBadState,
                       "{} holds a session with other events; keep it with `hvprof --save=NAME` or "
                       "discard it with `hvprof --reset` first",
                       directory);
    }
    // Continue it: same id, keep what it recorded so far.
    metadata.session_id = previous.value().session_id;
    metadata.created_ns = previous.value().created_ns;
    metadata.profiling = previous.value().profiling;
    std::vector<std::string> notes = previous.value().notes;
    notes.push_back("the session was continued by a new hvprofd");
    notes.insert(notes.end(), metadata.notes.begin(), metadata.notes.end());
    metadata.notes = std::move(notes);
    for (size_t i = 0; i < 16 && 2 * i + 1 < metadata.session_id.size(); ++i) {
      id[i] = static_cast<uint8_t>(std::stoul(metadata.session_id.substr(2 * i, 2), nullptr, 16));
    }
  } else {
    metadata.session_id = HexId(id);
    metadata.created_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count());
  }
  HVPROF_TRY(writer, store::SamplesWriter::Open(samples_path, id));
  SessionWriter session(directory, std::move(metadata), std::move(writer));
  session.metadata_.samples_stored = session.writer_.stats().samples;
  HVPROF_TRYV(session.WriteMetadata());
  return session;
}

void SessionWriter::Add(const hvpmu::ring::SampleRecord& record, std::span<const uint64_t> frames) {
  store::StoredSample sample;
  sample.ip = record.ip;
  sample.time_ns = record.time_ns;
  sample.period = record.period;
  sample.pid = record.pid;
  sample.tid = record.tid;
  sample.domain = record.domain;
  sample.vcpu = record.vcpu;
  sample.pcpu = record.pcpu;
  sample.mode = record.mode <= 2 ? record.mode : 2;
  sample.event = record.event;
  sample.flags = record.flags;
  sample.frames = frames;
  writer_.Append(sample);
  if (metadata_.first_sample_ns == 0 || record.time_ns < metadata_.first_sample_ns) {
    metadata_.first_sample_ns = record.time_ns;
  }
  if (record.time_ns > metadata_.last_sample_ns) metadata_.last_sample_ns = record.time_ns;
  if (record.domain < by_domain_mode_.size()) ++by_domain_mode_[record.domain][sample.mode];
}

uint64_t SessionWriter::samples(uint16_t domain, uint8_t mode) const {
  return domain < by_domain_mode_.size() && mode < 3 ? by_domain_mode_[domain][mode] : 0;
}

Result<void> SessionWriter::WriteMetadata() {
  static constexpr const char* kModes[] = {"user", "kernel", "hypervisor"};
  for (size_t domain = 0; domain < by_domain_mode_.size(); ++domain) {
    for (int mode = 0; mode < 3; ++mode) {
      if (by_domain_mode_[domain][mode] == 0) continue;
      metadata_.samples_by_domain_mode[fmt::format("{}/{}", domain, kModes[mode])] =
          by_domain_mode_[domain][mode];
    }
  }
  metadata_.samples_stored = writer_.stats().samples;
  metadata_.losses.store_failed = writer_.stats().failed;
  return WriteFileAtomically(directory_ + "/" + store::kMetadataFile,
                             store::SerializeMetadata(metadata_));
}

Result<void> SessionWriter::Flush() { return writer_.Flush(false); }

Result<void> SessionWriter::Dump() {
  auto flushed = writer_.Flush(true);
  // The metadata is written even when the samples could not be: what was counted survives.
  auto metadata = WriteMetadata();
  if (!flushed) return flushed.error().WithContext("samples were lost");
  HVPROF_TRYV(metadata);
  const std::string samples_path = directory_ + "/" + store::kSamplesFile;
  HVPROF_TRY(aggregate, store::AggregateSamplesFile(samples_path));
  return store::WriteAggregate(directory_ + "/" + store::kAggregateFile, aggregate);
}

}  // namespace hvprof::agent
