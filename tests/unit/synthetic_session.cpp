#include "synthetic_session.h"

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

namespace hvprof::testing {

std::string WriteSyntheticSession(const std::string& directory, const std::string& platform,
                                  const std::vector<store::ProcessRecord>& processes,
                                  const std::vector<store::StoredSample>& samples) {
  store::SessionMetadata m;
  m.session_id = "0102030405060708090a0b0c0d0e0f10";
  m.platform = platform;
  m.role = "dom0";
  m.backtrace_depth = 16;
  m.num_cpus = 1;
  m.events.push_back({0, "CPU_CLOCK", 0, 0, "", 1000000, true, true, ""});
  store::DomainRecord dom0;
  dom0.name = "Domain-0";
  dom0.role = "active";
  dom0.processes = processes;
  m.domains.push_back(dom0);
  std::filesystem::create_directories(directory);
  const uint8_t id[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  auto writer = store::SamplesWriter::Open(directory + "/" + store::kSamplesFile, std::span<const uint8_t, 16>(id, 16));
  REQUIRE(writer.has_value());
  for (const store::StoredSample& sample : samples) writer.value().Append(sample);
  REQUIRE(writer.value().Flush(true).has_value());
  m.samples_stored = samples.size();
  m.samples_by_domain_mode["0/user"] = samples.size();
  std::ofstream(directory + "/" + store::kMetadataFile) << store::SerializeMetadata(m);
  return directory;
}

}  // namespace hvprof::testing
