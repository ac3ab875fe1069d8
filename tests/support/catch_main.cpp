#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "case_log.h"

namespace hvprof::testing {

namespace {

CaseState g_case;

// Counts what a test case does, for SkipTest (skip.cpp). Catch reports every assertion,
// passing ones included, to a run that has a listener.
class CaseListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    g_case = CaseState{info.name, 0, 0};
    LogCaseEvent("case", "");
  }
  void sectionStarting(const Catch::SectionInfo&) override { ++g_case.section_depth; }
  void sectionEnded(const Catch::SectionStats&) override { --g_case.section_depth; }
  bool assertionEnded(const Catch::AssertionStats&) override {
    ++g_case.assertions;
    return true;
  }
};

CATCH_REGISTER_LISTENER(CaseListener)

}  // namespace

const CaseState& CurrentCase() { return g_case; }

void LogCaseEvent(const std::string& kind, const std::string& extra) {
  if (std::getenv("HVPROF_UNDER_CTEST") == nullptr) return;
  const char* path = HVPROF_TEST_LOG;
  std::string binary = "?";
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    binary.assign(exe, static_cast<size_t>(n));
    binary = binary.substr(binary.rfind('/') + 1);
  }
  std::string line = kind + "\t" + binary + "\t" + g_case.name;
  if (!extra.empty()) line += "\t" + extra;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  line += '\n';
  // O_APPEND: entries that CTest runs in parallel each add whole lines.
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t written = ::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace hvprof::testing

// Under CTest (HVPROF_UNDER_CTEST, set by hvprof_discover_tests): no debuginfod server but the
// ones tests start themselves on loopback, whatever the machine's profile sets. Always: no
// build-id cache but the ones tests give (--build-id-cache=DIR), so that no test fills or reads
// the machine's (/var/cache/hvprof/build-id, ~/.cache/hvprof/build-id).
int main(int argc, char** argv) {
  if (std::getenv("HVPROF_UNDER_CTEST") != nullptr) ::setenv("DEBUGINFOD_URLS", "", 1);
  ::setenv("HVPROF_BUILD_ID_CACHE", "none", 1);
  return Catch::Session().run(argc, argv);
}
