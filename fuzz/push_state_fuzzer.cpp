// Fuzzes push.json as hvprof-push and `hvprof --status` read it (push/windows.h): any bytes are
// read or refused with a message, never a crash; a state that reads is written back the same
// (every field kept, none invented).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hvprof/push/windows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto state = hvprof::push::ParsePushState(text, "push.json");
  if (!state) {
    if (state.error().message().find("push.json") == std::string::npos) std::abort();
    return 0;
  }
  const std::string written = hvprof::push::SerializePushState(state.value());
  auto again = hvprof::push::ParsePushState(written, "push.json");
  if (!again || hvprof::push::SerializePushState(again.value()) != written) std::abort();
  return 0;
}
