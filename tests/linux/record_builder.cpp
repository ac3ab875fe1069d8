#include "record_builder.h"

#include <cstring>

namespace hvprof::testing {

using namespace hvprof::linux_host;

void RecordBuilder::U16(uint16_t v) {
  for (int i = 0; i < 2; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void RecordBuilder::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void RecordBuilder::U64(uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void RecordBuilder::Begin(uint32_t type, uint16_t misc) {
  start_ = bytes_.size();
  U32(type);
  U16(misc);
  U16(0);  // size, patched by End
}

void RecordBuilder::End() {
  while ((bytes_.size() - start_) % 8 != 0) bytes_.push_back(0);
  const auto size = static_cast<uint16_t>(bytes_.size() - start_);
  std::memcpy(bytes_.data() + start_ + 6, &size, 2);
}

void RecordBuilder::PaddedString(const std::string& text) {
  for (char c : text) bytes_.push_back(static_cast<uint8_t>(c));
  bytes_.push_back(0);
  while ((bytes_.size() - start_) % 8 != 0) bytes_.push_back(0);
}

void RecordBuilder::Trailer(const Sid& sid) {
  if (!layout_.sample_id_all) return;
  const uint64_t type = layout_.sample_type;
  if (type & kSampleTid) {
    U32(sid.pid);
    U32(sid.tid);
  }
  if (type & kSampleTime) U64(sid.time);
  if (type & kSampleId) U64(sid.id);
  if (type & kSampleStreamId) U64(0);
  if (type & kSampleCpu) {
    U32(sid.cpu);
    U32(0);
  }
  if (type & kSampleIdentifier) U64(sid.id);
}

RecordBuilder& RecordBuilder::Sample(uint16_t misc, uint64_t id, uint64_t ip, uint32_t pid,
                                     uint32_t tid, uint64_t time, uint32_t cpu, uint64_t period,
                                     const std::vector<uint64_t>& callchain,
                                     const std::vector<uint8_t>& raw) {
  Begin(static_cast<uint32_t>(RecordType::kSample), misc);
  uint8_t id_bytes[8];
  std::memcpy(id_bytes, &id, 8);
  const uint64_t type = layout_.SampleTypeOf(id_bytes, 8);
  if (type & kSampleIdentifier) U64(id);
  if (type & kSampleIp) U64(ip);
  if (type & kSampleTid) {
    U32(pid);
    U32(tid);
  }
  if (type & kSampleTime) U64(time);
  if (type & kSampleAddr) U64(0);
  if (type & kSampleId) U64(id);
  if (type & kSampleStreamId) U64(0);
  if (type & kSampleCpu) {
    U32(cpu);
    U32(0);
  }
  if (type & kSamplePeriod) U64(period);
  if (type & kSampleCallchain) {
    U64(callchain.size());
    for (uint64_t entry : callchain) U64(entry);
  }
  if (type & kSampleRaw) {
    // The size counts the padding that makes the u32 and the data a whole number of u64s.
    const auto size = static_cast<uint32_t>((raw.size() + 4 + 7) / 8 * 8 - 4);
    U32(size);
    for (uint8_t byte : raw) U8(byte);
    for (size_t i = raw.size(); i < size; ++i) U8(0);
  }
  End();
  return *this;
}

RecordBuilder& RecordBuilder::Tracepoint(uint64_t id, uint32_t pid, uint32_t tid, uint64_t time,
                                         uint32_t cpu, const std::vector<uint8_t>& raw) {
  return Sample(kMiscKernel, id, 0, pid, tid, time, cpu, 1, {}, raw);
}

RecordBuilder& RecordBuilder::Mmap2(uint32_t pid, uint32_t tid, uint64_t addr, uint64_t len,
                                    uint64_t pgoff, const std::string& filename, Sid sid,
                                    const std::string& build_id_hex, uint32_t prot) {
  Begin(static_cast<uint32_t>(RecordType::kMmap2), build_id_hex.empty() ? kMiscUser
                                                                        : kMiscUser | kMiscMmapBuildId);
  U32(pid);
  U32(tid);
  U64(addr);
  U64(len);
  U64(pgoff);
  if (build_id_hex.empty()) {
    U32(8);      // maj
    U32(1);      // min
    U64(12345);  // ino
    U64(0);
  } else {
    uint8_t id[20] = {};
    const size_t n = std::min<size_t>(build_id_hex.size() / 2, 20);
    for (size_t i = 0; i < n; ++i) id[i] = static_cast<uint8_t>(std::stoul(build_id_hex.substr(2 * i, 2), nullptr, 16));
    U8(static_cast<uint8_t>(n));
    U8(0);
    U16(0);
    for (uint8_t byte : id) U8(byte);
  }
  U32(prot);
  U32(2);  // MAP_PRIVATE
  PaddedString(filename);
  Trailer(sid);
  End();
  return *this;
}

RecordBuilder& RecordBuilder::Comm(uint32_t pid, uint32_t tid, const std::string& comm, bool exec,
                                   Sid sid) {
  Begin(static_cast<uint32_t>(RecordType::kComm), exec ? kMiscCommExec : 0);
  U32(pid);
  U32(tid);
  PaddedString(comm);
  Trailer(sid);
  End();
  return *this;
}

RecordBuilder& RecordBuilder::Task(uint32_t type, uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid, Sid sid) {
  Begin(type, 0);
  U32(pid);
  U32(ppid);
  U32(tid);
  U32(ptid);
  U64(sid.time);
  Trailer(sid);
  End();
  return *this;
}

RecordBuilder& RecordBuilder::Fork(uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid, Sid sid) {
  return Task(static_cast<uint32_t>(RecordType::kFork), pid, ppid, tid, ptid, sid);
}

RecordBuilder& RecordBuilder::Exit(uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid, Sid sid) {
  return Task(static_cast<uint32_t>(RecordType::kExit), pid, ppid, tid, ptid, sid);
}

RecordBuilder& RecordBuilder::Lost(uint64_t id, uint64_t lost, Sid sid) {
  Begin(static_cast<uint32_t>(RecordType::kLost), 0);
  U64(id);
  U64(lost);
  Trailer(sid);
  End();
  return *this;
}

RecordBuilder& RecordBuilder::Throttle(bool throttle, uint64_t time, uint64_t id, Sid sid) {
  Begin(static_cast<uint32_t>(throttle ? RecordType::kThrottle : RecordType::kUnthrottle), 0);
  U64(time);
  U64(id);
  U64(id);
  Trailer(sid);
  End();
  return *this;
}

RecordBuilder& RecordBuilder::LostSamples(uint64_t lost, Sid sid) {
  Begin(static_cast<uint32_t>(RecordType::kLostSamples), 0);
  U64(lost);
  Trailer(sid);
  End();
  return *this;
}

RecordBuilder& RecordBuilder::Switch(bool out, uint32_t other_pid, uint32_t other_tid, Sid sid) {
  Begin(static_cast<uint32_t>(RecordType::kSwitchCpuWide), out ? kMiscSwitchOut : 0);
  U32(other_pid);
  U32(other_tid);
  Trailer(sid);
  End();
  return *this;
}

RecordBuilder& RecordBuilder::Raw(uint32_t type, uint16_t misc, const std::vector<uint8_t>& body,
                                  int size) {
  start_ = bytes_.size();
  U32(type);
  U16(misc);
  U16(static_cast<uint16_t>(size >= 0 ? size : static_cast<int>(8 + body.size())));
  bytes_.insert(bytes_.end(), body.begin(), body.end());
  return *this;
}

}  // namespace hvprof::testing
