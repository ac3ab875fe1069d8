#include "profile_counts.h"

#include <catch2/catch.hpp>

namespace hvprof::testing {

namespace {

const char* ModeName(uint8_t mode) {
  static constexpr const char* kNames[] = {"user", "kernel", "hypervisor"};
  return mode < 3 ? kNames[mode] : "invalid";
}

}  // namespace

std::map<DomainMode, uint64_t> TruthByMode(const context::GroundTruth& truth, uint32_t counter) {
  std::map<DomainMode, uint64_t> out;
  for (const context::TruthRow& row : truth.rows) {
    const uint64_t overflows = row.overflows.at(counter);
    if (overflows != 0) out[{row.domain, std::string(sample_mode::Name(row.mode))}] += overflows;
  }
  return out;
}

std::map<DomainMode, uint64_t> ProfileByMode(const report::Profile& profile) {
  std::map<DomainMode, uint64_t> out;
  for (const report::Entry& entry : profile.entries()) out[{entry.domain, ModeName(entry.mode)}] += entry.count;
  return out;
}

report::Profile Load(const std::string& session, bool all_domains) {
  report::LoadOptions options;
  options.all_domains = all_domains;
  auto profile = report::LoadProfile(session, options);
  if (!profile) FAIL(profile.error().message());
  return std::move(profile).value();
}

}  // namespace hvprof::testing
