// Fuzzes the xen link's reading of Xen's trace buffers: the input is one CPU's buffer as Xen
// shares it (t_buf's cons and prod, then the data area), indexes included, read as the link
// reads it (CopyTraceWindow), then decoded twice on two CPUs as windows come. The reader must
// never read outside the buffer, hand back a cons Xen would take for bogus, loop forever or hand
// out a malformed scheduling record.
#include <algorithm>
#include <cstring>
#include <vector>

#include "hvpmu/abi/xen_trace.h"
#include "hvprof/xen/trace_decoder.h"

namespace ring = hvpmu::ring;
namespace xt = hvpmu::xentrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint32_t kPages = 1;
  const uint32_t data_size = xt::DataSize(kPages);
  std::vector<uint8_t> buffer(size_t{kPages} * xt::kPageSize, 0);
  std::memcpy(buffer.data(), data, std::min(size, buffer.size()));
  hvprof::xen::TraceDecoder decoder(size > 0 ? data[0] * 1000u : 0);
  uint64_t last_ns = 0;
  auto check = [&last_ns](const ring::SchedRecord& record) {
    if (record.kind != static_cast<uint8_t>(ring::RecordKind::kSched) || record.type == 0 ||
        record.type > ring::kMaxSchedType || record.slots != 1 || record.pcpu > 1 ||
        record.old_state >= ring::kRunstateCount || record.new_state >= ring::kRunstateCount ||
        record.time_ns < last_ns) {
      __builtin_trap();
    }
    last_ns = record.time_ns;
  };
  for (uint16_t cpu = 0; cpu < 2; ++cpu) {
    std::vector<uint8_t> window;
    const auto cons = hvprof::xen::CopyTraceWindow(buffer.data(), data_size, &window);
    if (cons) {
      if (!xt::ValidIndex(*cons, data_size) || window.size() > data_size) __builtin_trap();
      if (decoder.Decode(cpu, window) > window.size()) __builtin_trap();
    } else if (!window.empty()) {
      __builtin_trap();
    }
    // The rest of the input as a window of its own, cut anywhere.
    if (size > buffer.size()) {
      std::span<const uint8_t> rest(data + buffer.size(), size - buffer.size());
      if (decoder.Decode(cpu, rest) > rest.size()) __builtin_trap();
    }
  }
  decoder.Flush(check);
  return 0;
}
