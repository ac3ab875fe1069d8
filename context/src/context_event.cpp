#include "hvprof/context/context_event.h"

#include <string_view>

#include "hvprof/base/varint.h"

namespace hvprof::context {

namespace {

using varint::Cursor;
using varint::kMaxVarint;
using varint::PutVarint;
using varint::UnZigZag;
using varint::ZigZag;

// Bounds on what one event may hold: a path, a build-id (hex), a name.
constexpr size_t kMaxPath = 4096;
constexpr size_t kMaxBuildId = 128;
constexpr size_t kMaxComm = 256;

void PutNumber(std::string& out, uint64_t value) {
  uint8_t bytes[kMaxVarint];
  const uint8_t* end = PutVarint(bytes, value);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(end - bytes));
}

void PutText(std::string& out, std::string_view text, size_t bound) {
  text = text.substr(0, bound);
  PutNumber(out, text.size());
  out.append(text);
}

// A string of at most `bound` bytes from `in`; false (the cursor failed) when longer or cut.
bool GetText(Cursor& in, std::string* out, size_t bound) {
  const uint64_t length = in.Varint();
  if (!in.ok() || length > bound) return false;
  out->clear();
  out->reserve(length);
  for (uint64_t i = 0; i < length; ++i) {
    const uint8_t byte = in.Byte();
    if (!in.ok()) return false;
    out->push_back(static_cast<char>(byte));
  }
  return true;
}

}  // namespace

void EncodeContextEvent(const ContextEvent& event, std::string& out) {
  out.push_back(static_cast<char>(event.kind));
  PutNumber(out, event.domain);
  PutNumber(out, event.pid);
  switch (event.kind) {
    case ContextKind::kImage:
      PutNumber(out, event.image);
      PutText(out, event.path, kMaxPath);
      PutText(out, event.build_id, kMaxBuildId);
      break;
    case ContextKind::kProcess:
    case ContextKind::kComm:
      PutNumber(out, event.time_ns);
      PutText(out, event.comm, kMaxComm);
      break;
    case ContextKind::kMapping:
      PutNumber(out, event.time_ns);
      PutNumber(out, event.start);
      PutNumber(out, event.end >= event.start ? event.end - event.start : 0);
      PutNumber(out, ZigZag(static_cast<int64_t>(event.bias)));
      PutNumber(out, event.image);
      if (event.image == 0) {
        PutText(out, event.path, kMaxPath);
        PutText(out, event.build_id, kMaxBuildId);
      }
      break;
    case ContextKind::kExit:
      PutNumber(out, event.time_ns);
      break;
    case ContextKind::kTask:
      PutNumber(out, event.tid);
      PutText(out, event.comm, kMaxComm);
      break;
  }
}

bool DecodeContextEvents(std::span<const uint8_t> bytes, const std::function<void(ContextEvent&&)>& on_event,
                         uint64_t* decoded) {
  Cursor in(bytes);
  while (!in.done()) {
    ContextEvent event;
    const uint8_t kind = in.Byte();
    if (!in.ok() || kind == 0 || kind > kMaxContextKind) return false;
    event.kind = static_cast<ContextKind>(kind);
    const uint64_t domain = in.Varint(), pid = in.Varint();
    if (!in.ok() || domain > 0xFFFF || pid > 0xFFFFFFFFULL) return false;
    event.domain = static_cast<uint16_t>(domain);
    event.pid = static_cast<uint32_t>(pid);
    bool ok = true;
    switch (event.kind) {
      case ContextKind::kImage: {
        const uint64_t image = in.Varint();
        ok = in.ok() && image != 0 && image <= 0xFFFFFFFFULL &&
             GetText(in, &event.path, kMaxPath) &&
             GetText(in, &event.build_id, kMaxBuildId);
        event.image = static_cast<uint32_t>(image);
        break;
      }
      case ContextKind::kProcess:
      case ContextKind::kComm:
        event.time_ns = in.Varint();
        ok = in.ok() && GetText(in, &event.comm, kMaxComm);
        break;
      case ContextKind::kMapping: {
        event.time_ns = in.Varint();
        event.start = in.Varint();
        const uint64_t length = in.Varint();
        event.bias = static_cast<uint64_t>(UnZigZag(in.Varint()));
        const uint64_t image = in.Varint();
        ok = in.ok() && length <= UINT64_MAX - event.start && image <= 0xFFFFFFFFULL;
        event.end = event.start + length;
        event.image = static_cast<uint32_t>(image);
        if (ok && image == 0) {
          ok = GetText(in, &event.path, kMaxPath) &&
               GetText(in, &event.build_id, kMaxBuildId);
        }
        break;
      }
      case ContextKind::kExit:
        event.time_ns = in.Varint();
        ok = in.ok();
        break;
      case ContextKind::kTask: {
        const uint64_t tid = in.Varint();
        ok = in.ok() && tid <= 0xFFFFFFFFULL && GetText(in, &event.comm, kMaxComm);
        event.tid = static_cast<uint32_t>(tid);
        break;
      }
    }
    if (!ok) return false;
    on_event(std::move(event));
    if (decoded != nullptr) ++*decoded;
  }
  return true;
}

}  // namespace hvprof::context
