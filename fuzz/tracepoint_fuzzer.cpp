// Fuzzes what hvprof-hv reads of the kernel's scheduler tracepoints (linux, --sched): tracefs
// format files and the raw records decoded by their offsets. Input: a format text, a NUL, then
// raw record bytes. The text is parsed; where it describes a usable event, it stands for every
// scheduler event and the bytes are decoded as each; the bytes are also decoded with a known
// kernel's layout. Nothing may read outside the bytes (ASan), and what decodes must be sane.
#include <cstring>
#include <string_view>
#include <vector>

#include "hvprof/linux/tracepoints.h"

using namespace hvprof::linux_host;

namespace {

constexpr const char* kSwitch =
    "name: sched_switch\nID: 372\nformat:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n"
    "\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";
constexpr const char* kWaking =
    "name: sched_waking\nID: 375\nformat:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n";
constexpr const char* kMigrate =
    "name: sched_migrate_task\nID: 371\nformat:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:__data_loc char[] comm;\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n"
    "\tfield:int orig_cpu;\toffset:20;\tsize:4;\tsigned:1;\n"
    "\tfield:int dest_cpu;\toffset:24;\tsize:4;\tsigned:1;\n";

void DecodeAll(const SchedTracepoints& points, std::span<const uint8_t> raw) {
  for (uint32_t k = 0; k < kSchedTracepoints; ++k) {
    const auto kind = static_cast<SchedTracepoint>(k);
    const auto record = points.Decode(kind, raw);
    if (record && record->kind != kind) __builtin_trap();
    if (record && points.id(kind) == 0) __builtin_trap();  // an event this kernel lacks decodes nothing
    if (record) (void)ClassifyPrevState(record->prev_state);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t text_size = nul != nullptr ? static_cast<size_t>(nul - data) : size;
  const std::string_view text(reinterpret_cast<const char*>(data), text_size);
  // The raw record in its own allocation, so that ASan sees a read past its end.
  const std::vector<uint8_t> raw(nul != nullptr ? nul + 1 : data + size, data + size);

  static const auto known = [] {
    auto points = SchedTracepoints::FromFormats(ParseTracepointFormat(kSwitch, "switch").value(),
                                                ParseTracepointFormat(kWaking, "waking").value(), std::nullopt,
                                                ParseTracepointFormat(kMigrate, "migrate").value());
    if (!points) __builtin_trap();
    return points.value();
  }();
  DecodeAll(known, raw);

  auto format = ParseTracepointFormat(text, "fuzz");
  if (!format) return 0;
  for (const TracepointField& field : format.value().fields) {
    if (field.name.empty()) __builtin_trap();
  }
  auto points = SchedTracepoints::FromFormats(format.value(), format.value(), format.value(), format.value());
  if (points) DecodeAll(points.value(), raw);
  return 0;
}
