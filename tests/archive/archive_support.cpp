#include "archive_support.h"

#include <filesystem>
#include <fstream>
#include <regex>

#include <catch2/catch.hpp>

#include "hvprof/base/files.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "programs.h"
#include "sim_harness.h"
#include "skip.h"
#include "synthetic_session.h"

namespace hvprof::testing {

uint64_t FunctionAddress(const std::string& image, const std::string& function, bool dynamic) {
  std::vector<std::string> argv = {"/usr/bin/nm"};
  if (dynamic) argv.push_back("-D");
  argv.push_back(image);
  const CommandResult nm = RunProgram(argv);
  REQUIRE(nm.status == 0);
  std::smatch match;
  INFO(image << ": " << function);
  REQUIRE(std::regex_search(nm.out, match, std::regex("([0-9a-f]+) [TtWi] " + function + "(@@?[A-Z_0-9.]+)?\n")));
  return std::stoull(match[1], nullptr, 16);
}

std::string BuildIdOf(const std::string& image) {
  symbolizer::Symbolizer symbolizer;
  auto info = symbolizer.Describe(symbolizer::ImageSpec::Elf(image));
  REQUIRE(info.has_value());
  return info.value().build_id;
}

void CopyFile(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(std::filesystem::path(to).parent_path());
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

std::string WriteImageSession(const std::string& root, const std::string& name, const std::vector<SampledImage>& images,
                              const std::string& kallsyms, const std::vector<uint64_t>& kernel_addresses) {
  store::ProcessRecord process{100, "app", {}};
  std::vector<store::StoredSample> samples;
  auto add = [&](uint64_t ip, uint8_t mode, int times) {
    for (int i = 0; i < times; ++i) {
      store::StoredSample s;
      s.ip = ip;
      s.pid = s.tid = mode == 0 ? 100 : 0xFFFFFFFF;
      s.mode = mode;
      s.period = 1000000;
      samples.push_back(s);
    }
  };
  int times = 1;
  for (const SampledImage& image : images) {
    process.mappings.push_back({image.path, image.start, image.start + 0x1000000, image.bias, image.build_id});
    for (uint64_t address : image.addresses) add(address, 0, times++);
  }
  for (uint64_t address : kernel_addresses) add(address, 1, times++);
  const std::string directory =
      WriteSyntheticSession(root + "/samples/" + name, "linux", {process}, samples);
  if (!kallsyms.empty()) {
    const std::string metadata_path = directory + "/" + store::kMetadataFile;
    auto text = ReadFileToString(metadata_path);
    REQUIRE(text.has_value());
    auto metadata = store::ParseMetadata(text.value(), metadata_path);
    REQUIRE(metadata.has_value());
    store::ImageRecord kernel;
    kernel.role = "kernel";
    kernel.domain = 0;
    kernel.path = kallsyms;
    kernel.format = "kallsyms";
    metadata.value().images.push_back(kernel);
    uint64_t kernel_samples = 0;
    for (const store::StoredSample& sample : samples) kernel_samples += sample.mode == 1;
    metadata.value().samples_by_domain_mode["0/kernel"] = kernel_samples;
    metadata.value().samples_by_domain_mode["0/user"] = samples.size() - kernel_samples;
    REQUIRE(WriteFileAtomically(metadata_path, store::SerializeMetadata(metadata.value())).has_value());
  }
  return directory;
}

std::optional<nlohmann::json> ScenarioOfCopies(const std::string& directory, std::map<std::string, std::string>* copies) {
  for (const char* image : {kXenSyms, kXenMap, kLibc, kLibz}) {
    if (!std::filesystem::exists(image)) {
      (void)SkipTest(std::string("needs ") + image + " (scripts/install-deps.sh installs it)");
      return std::nullopt;
    }
    (*copies)[image] = directory + "/" + std::filesystem::path(image).filename().string();
    CopyFile(image, (*copies)[image]);
  }
  nlohmann::json scenario = TestScenario("intel-arch-v4", 11);
  scenario["hypervisor"]["image"] = copies->at(kXenSyms);
  for (auto& domain : scenario["domains"]) {
    domain["kernel"]["system_map"] = copies->at(kXenMap);
    for (auto& process : domain["processes"]) {
      for (auto& mapping : process["mappings"]) mapping["path"] = copies->at(mapping["path"].get<std::string>());
    }
    auto& user = domain["workload"]["user"]["auto"];
    user["image"] = copies->at(user["image"].get<std::string>());
  }
  return scenario;
}

}  // namespace hvprof::testing
