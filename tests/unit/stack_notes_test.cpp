// What the stacks say of the images: on a real machine, an image whose chains mostly stop at
// the sampled function was built without frame pointers, and the report says so (as a warning,
// not a problem: the report is complete without callers). Sessions are written here with the
// store's own writers, with chains of known depth.
#include <catch2/catch.hpp>

#include "hvprof/report/load.h"
#include "synthetic_session.h"
#include "temp_dir.h"

using namespace hvprof;

namespace {

// A linux session of dom0 user samples in two processes' code: process 100's samples all have
// a caller, process 200's stop at the sampled function in `shallow_share` of them.
std::string WriteSession(const testing::TempDir& dir, const std::string& platform, double shallow_share) {
  std::vector<store::ProcessRecord> processes;
  for (const char* comm : {"deep", "shallow"}) {
    processes.push_back({processes.empty() ? 100u : 200u, comm, {{dir.File(comm), 0x400000, 0x500000, 0, ""}}});
  }
  static const uint64_t callers[] = {0x401100, 0x401200};
  std::vector<store::StoredSample> samples;
  for (uint32_t i = 0; i < 200; ++i) {
    for (uint32_t pid : {100u, 200u}) {
      store::StoredSample s;
      s.ip = 0x401000 + i % 16;
      s.pid = s.tid = pid;
      s.time_ns = 1000 + i;
      s.period = 1000000;
      const bool shallow = pid == 200 && i < shallow_share * 200;
      s.frames = shallow ? std::span<const uint64_t>() : std::span<const uint64_t>(callers);
      samples.push_back(s);
    }
  }
  return testing::WriteSyntheticSession(dir.File("session"), platform, processes, samples);
}

std::vector<std::string> Notes(const std::string& session) {
  report::LoadOptions options;
  options.stacks = true;
  auto profile = report::LoadProfile(session, options);
  INFO((profile ? std::string() : profile.error().message()));
  REQUIRE(profile.has_value());
  CHECK(profile.value().problems().empty());
  return profile.value().stack_notes();
}

}  // namespace

TEST_CASE("an image whose chains stop at the sampled function is named as built without frame pointers",
          "[report][stacks]") {
  testing::TempDir dir;
  const auto notes = Notes(WriteSession(dir, "linux", 0.9));
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("shallow") != std::string::npos);
  CHECK(notes[0].find("180 of its 200 sampled stacks (90%)") != std::string::npos);
  CHECK(notes[0].find("-fno-omit-frame-pointer") != std::string::npos);
}

TEST_CASE("chains that mostly reach a caller, and the sim's modelled chains, say nothing of frame pointers",
          "[report][stacks]") {
  testing::TempDir linux_dir, sim_dir;
  CHECK(Notes(WriteSession(linux_dir, "linux", 0.4)).empty());
  CHECK(Notes(WriteSession(sim_dir, "sim", 1.0)).empty());
}
