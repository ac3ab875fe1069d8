// Fuzzes the JSON records that cross between hvprof's processes: hvprofd's status, as `hvprof
// --status` reads it (agent/agent_status.h), and what hvprof-hv's platform says of itself, as
// hvprofd reads it: its account of its sampling (context/platform_stats.h; the session keeps
// its statistics), its domains and their images (context/domains.h), and the sim's ground truth
// (context/ground_truth.h), as dom0's tests and benchmarks read it. Each input is offered to
// every reader. What a reader accepts must survive a round trip unchanged:
// written again and read back, it writes the same.
#include <string_view>

#include <nlohmann/json.hpp>

#include "hvprof/agent/agent_status.h"
#include "hvprof/base/json_fields.h"
#include "hvprof/context/domains.h"
#include "hvprof/context/ground_truth.h"
#include "hvprof/context/platform_stats.h"

namespace {

template <typename Parse>
void RoundTrip(const nlohmann::json& document, Parse parse) {
  auto first = parse(document);
  if (!first) {
    if (first.error().message().empty()) __builtin_trap();  // a refusal says why
    return;
  }
  const nlohmann::json written = ToJson(first.value());
  auto second = parse(nlohmann::json::parse(written.dump()));
  if (!second || ToJson(second.value()) != written) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return 0;
  RoundTrip(document, [](const nlohmann::json& d) { return hvprof::agent::ParseAgentStatus(d); });
  auto node = [](const nlohmann::json& d) { return hvprof::json::Node::Root(d, "hvprof-hv", hvprof::ErrorKind::kProtocol); };
  RoundTrip(document, [&](const nlohmann::json& d) { return hvprof::context::ParsePlatformInfo(node(d)); });
  RoundTrip(document, [&](const nlohmann::json& d) { return hvprof::context::ParseDomainList(node(d)); });
  RoundTrip(document, [&](const nlohmann::json& d) { return hvprof::context::ParseDomainImages(node(d)); });
  RoundTrip(document, [&](const nlohmann::json& d) { return hvprof::context::ParseGroundTruth(node(d)); });
  return 0;
}
