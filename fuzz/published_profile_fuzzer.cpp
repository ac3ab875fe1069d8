// Fuzzes the parser of the profiles guests publish to dom0 (report/published.h): to dom0 they
// are untrusted input. What it accepts must keep the accounting dom0 relies on (the total is
// the sum of every row, with no sum that wraps; one count per event in every row; bounded
// sizes; the expected domain) and survive a round trip unchanged.
#include <string_view>

#include "hvprof/report/published.h"

namespace {

using hvprof::report::PublishedProfile;

// The sum of every row's counts, or false if it does not fit 64 bits.
bool SumRows(const PublishedProfile& p, uint64_t* sum) {
  *sum = 0;
  auto add = [&](const std::vector<uint64_t>& samples) {
    if (samples.size() != p.events.size()) return false;
    for (uint64_t count : samples) {
      if (__builtin_add_overflow(*sum, count, sum)) return false;
    }
    return true;
  };
  for (const auto& symbol : p.symbols) {
    if (symbol.mode > 1 || !add(symbol.samples)) return false;
  }
  for (const auto& address : p.hypervisor) {
    if (!add(address.samples)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = hvprof::report::ParsePublished(text, 1);
  if (!parsed) return 0;
  const PublishedProfile& p = parsed.value();
  uint64_t sum = 0;
  if (p.domain != 1 || p.events.empty() || p.events.size() > hvprof::report::kMaxPublishedEvents ||
      p.symbols.size() > hvprof::report::kMaxPublishedRows || p.hypervisor.size() > hvprof::report::kMaxPublishedRows ||
      !SumRows(p, &sum) || sum != p.samples) {
    __builtin_trap();
  }
  const std::string again = hvprof::report::SerializePublished(p);
  auto reparsed = hvprof::report::ParsePublished(again, 1);
  if (!reparsed || hvprof::report::SerializePublished(reparsed.value()) != again) __builtin_trap();
  return 0;
}
