// A guest's profile as it publishes it for dom0 (`hvprof --publish`): its user and kernel
// samples already symbolized by the guest, which alone has its files, and its hypervisor-mode
// samples as raw addresses, for dom0 to resolve with xen-syms. dom0 keeps each one in its
// session as published/domain-N.json; `hvprof-report --all-domains` merges them.
// The format is in docs/session-format.md. To dom0 a published profile is untrusted input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvprof/base/result.h"
#include "hvprof/report/model.h"
#include "hvprof/store/session.h"

namespace hvprof::report {

inline constexpr int kPublishedVersion = 1;
inline constexpr size_t kMaxPublishedRows = 500000;
inline constexpr size_t kMaxPublishedEvents = 16;

struct PublishedEvent {
  uint32_t counter = 0;  // the logical counter, as in dom0's session
  std::string name;
  uint64_t count = 0;    // events per sample
};

// Samples of one symbol, resolved by the guest.
struct PublishedSymbol {
  uint8_t mode = sample_mode::kUser;  // user or kernel: the hypervisor's are addresses
  std::string image;
  std::string symbol;
  uint64_t address = 0;  // the symbol's start, or the address when unresolved
  bool resolved = false;
  std::vector<uint64_t> samples;  // one per event
};

// Samples at one hypervisor address, for dom0 to resolve.
struct PublishedAddress {
  uint64_t ip = 0;
  std::vector<uint64_t> samples;  // one per event
};

struct PublishedProfile {
  uint16_t domain = 0;
  std::string name;
  std::string session_id;
  std::string hvprof_version;
  std::string cpu_type;
  uint64_t published_ns = 0;
  uint64_t samples = 0;
  store::LossRecord losses;
  std::vector<PublishedEvent> events;
  std::vector<PublishedSymbol> symbols;
  std::vector<PublishedAddress> hypervisor;
};

// From a guest's session, loaded as a Profile (load.h).
PublishedProfile BuildPublished(const Profile& profile);
// The published format (docs/session-format.md) as JSON, and as the text dom0 keeps.
nlohmann::json PublishedToJson(const PublishedProfile& profile);
std::string SerializePublished(const PublishedProfile& profile);
// Checks everything: format, version, types, sizes, and that the profile is `expected_domain`'s.
Result<PublishedProfile> ParsePublished(std::string_view text, uint16_t expected_domain);

}  // namespace hvprof::report
