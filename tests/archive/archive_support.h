// What the archive and debuginfod tests share: sessions whose samples fall in copies of real
// images, made here, and the images' function addresses and build-ids.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hvprof/store/session.h"

namespace hvprof::testing {

// The address of `function` in `image`'s symbol table (nm; -D for the dynamic one).
uint64_t FunctionAddress(const std::string& image, const std::string& function, bool dynamic = false);
// The image's build-id (lower-case hex), or "" when it has none.
std::string BuildIdOf(const std::string& image);
// Copies `from` to `to` (creating its directory).
void CopyFile(const std::string& from, const std::string& to);

// An image of a synthetic session: a mapping of pid 100 in dom0 at [start, start+0x1000000)
// (bias `bias`), and the functions its samples fall in (each `samples` times).
struct SampledImage {
  std::string path;
  std::string build_id;  // as recorded
  uint64_t start = 0;
  uint64_t bias = 0;
  std::vector<uint64_t> addresses;  // runtime addresses sampled
};

// Writes a saved session ROOT/samples/NAME (linux platform) with user samples in `images` and,
// if `kallsyms` is not empty, kernel samples at `kernel_addresses` symbolized by that kallsyms
// text (recorded without a build-id, as kallsyms is). Returns the session directory.
std::string WriteImageSession(const std::string& root, const std::string& name, const std::vector<SampledImage>& images,
                              const std::string& kallsyms = "", const std::vector<uint64_t>& kernel_addresses = {});

// The sim scenario of the archive tests (TestScenario("intel-arch-v4", 11)) with every image it
// names (xen-syms, its map, libc, libz) copied into `directory`, so that a test may delete or
// replace them; `copies` maps each original to its copy. nullopt, the test skipped, when one is
// missing here.
std::optional<nlohmann::json> ScenarioOfCopies(const std::string& directory, std::map<std::string, std::string>* copies);

}  // namespace hvprof::testing
