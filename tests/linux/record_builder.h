// Writes perf ring records (perf_event.h layouts) for tests, for a given RecordLayout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvprof/linux/perf_records.h"

namespace hvprof::testing {

class RecordBuilder {
 public:
  // The sample_id_all trailer of non-sample records.
  struct Sid {
    uint32_t pid = 0;
    uint32_t tid = 0;
    uint64_t time = 0;
    uint32_t cpu = 0;
    uint64_t id = 0;
  };

  explicit RecordBuilder(hvprof::linux_host::RecordLayout layout) : layout_(layout) {}

  RecordBuilder& Sample(uint16_t misc, uint64_t id, uint64_t ip, uint32_t pid, uint32_t tid,
                        uint64_t time, uint32_t cpu, uint64_t period,
                        const std::vector<uint64_t>& callchain = {},
                        const std::vector<uint8_t>& raw = {});
  // A tracepoint's sample (laid out by the layout's other_sample_type when `id` is one of its
  // other_ids): the running task, the time, the CPU and the raw record.
  RecordBuilder& Tracepoint(uint64_t id, uint32_t pid, uint32_t tid, uint64_t time, uint32_t cpu,
                            const std::vector<uint8_t>& raw);
  RecordBuilder& Mmap2(uint32_t pid, uint32_t tid, uint64_t addr, uint64_t len, uint64_t pgoff,
                       const std::string& filename, Sid sid, const std::string& build_id_hex = "",
                       uint32_t prot = 5 /* PROT_READ | PROT_EXEC */);
  RecordBuilder& Comm(uint32_t pid, uint32_t tid, const std::string& comm, bool exec, Sid sid);
  RecordBuilder& Fork(uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid, Sid sid);
  RecordBuilder& Exit(uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid, Sid sid);
  RecordBuilder& Lost(uint64_t id, uint64_t lost, Sid sid);
  RecordBuilder& Throttle(bool throttle, uint64_t time, uint64_t id, Sid sid);
  RecordBuilder& LostSamples(uint64_t lost, Sid sid);
  // A CPU-wide context switch (PERF_RECORD_SWITCH_CPU_WIDE): `sid` switches in (or out), the
  // other task is the previous (or next) one.
  RecordBuilder& Switch(bool out, uint32_t other_pid, uint32_t other_tid, Sid sid);
  // Any record: header + body as given (the size field is computed unless `size` is set).
  RecordBuilder& Raw(uint32_t type, uint16_t misc, const std::vector<uint8_t>& body,
                     int size = -1);

  const std::vector<uint8_t>& bytes() const { return bytes_; }
  void Clear() { bytes_.clear(); }

 private:
  // FORK and EXIT share one layout.
  RecordBuilder& Task(uint32_t type, uint32_t pid, uint32_t ppid, uint32_t tid, uint32_t ptid, Sid sid);
  void Begin(uint32_t type, uint16_t misc);
  void End();
  void U8(uint8_t v) { bytes_.push_back(v); }
  void U16(uint16_t v);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void PaddedString(const std::string& text);
  void Trailer(const Sid& sid);

  hvprof::linux_host::RecordLayout layout_;
  std::vector<uint8_t> bytes_;
  size_t start_ = 0;
};

}  // namespace hvprof::testing
