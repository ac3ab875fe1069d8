// Helpers shared by the symbolizer tests: running tools, temporary directories, the fixture
// program's report, source markers and nm listings (the independent sources of truth).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hvprof/symbolizer/output.h"
#include "hvprof/symbolizer/symbolizer.h"

#include "temp_dir.h"

namespace hvprof::symbolizer::testing {

// A copy of one answer, independent of the batch's lifetime.
struct Answer {
  uint64_t address = 0;
  Reason reason = Reason::kNone;
  std::string detail;
  std::string module;
  struct Frame {
    std::string function;
    uint64_t start = 0;
    uint64_t offset = 0;
    std::string file;
    uint32_t line = 0;
    uint32_t column = 0;
    bool inlined = false;
  };
  std::vector<Frame> frames;
  uint32_t image_index = 0;

  bool resolved() const { return !frames.empty(); }
  // The out-of-line function (the last frame); "" if unresolved.
  std::string function() const { return frames.empty() ? "" : frames.back().function; }
};

struct Answers {
  std::vector<Answer> answers;
  std::vector<ImageStatus> images;
};

// Spelled-out requests (designated initializers that skip members trip -Wextra on GCC 12).
ImageSpec ElfSpec(const std::string& path, uint64_t bias = 0);
ImageSpec TextSpec(const std::string& path, ImageFormat format, uint64_t bias = 0);
ImageSpec WithBuildId(ImageSpec spec, const std::string& build_id);
ImageSpec WithDebugFile(ImageSpec spec, const std::string& debug_file);
LookupOptions With(Detail detail, bool demangle = true);
PrintOptions Style(OutputStyle style, bool print_address = false);

// Symbolizes and copies the results; fails the test (throws) if the request itself fails.
Answers Resolve(Symbolizer* symbolizer, const ImageSpec& spec, const std::vector<uint64_t>& addresses,
                LookupOptions options = {});
Answers Resolve(Symbolizer* symbolizer, const std::vector<ImageSpec>& chain,
                const std::vector<uint64_t>& addresses, LookupOptions options = {});

// Paths of the fixtures built by tests/symbolizer/CMakeLists.txt.
struct FixturePaths {
  static std::string Pie(int dwarf_version);  // 4 or 5
  static std::string PieWithoutBuildId();
  static std::string Library();
  static std::string SourceDir();
  static std::string Cli();
};

// Runs a shell command with `input` on its stdin; returns stdout. `status` gets the exit code.
std::string RunCommand(const std::string& command, const std::string& input = "",
                       int* status = nullptr);
// True if `tool` is on PATH.
bool HaveTool(const std::string& tool);

using hvprof::testing::TempDir;

std::string ReadFile(const std::string& path);
void CopyFile(const std::string& from, const std::string& to);

// What the fixture program printed (see fixtures/fixture_main.c).
struct FixtureReport {
  struct Module {
    uint64_t bias = 0;
    std::string path;
  };
  std::map<std::string, Module> modules;      // "main", "lib", "libc"
  std::map<std::string, uint64_t> functions;  // name -> entry address
  std::map<std::string, uint64_t> sites;      // name -> return address
};
FixtureReport RunFixture(const std::string& program);

// The 1-based line of the source line containing "MARK:<mark>".
int MarkLine(const std::string& source_file, const std::string& mark);

struct NmSymbol {
  uint64_t address = 0;
  uint64_t size = 0;
  bool has_size = false;
  char type = '?';
  std::string name;
};
// `nm -S --defined-only` (binutils) of `file`.
std::vector<NmSymbol> NmSymbols(const std::string& file);
// The STT_FUNC symbols of `file` as `readelf -sW` (binutils) lists them: address -> names.
std::set<std::pair<uint64_t, std::string>> ReadelfFunctions(const std::string& file);
// Names of the symbols at each address.
std::map<uint64_t, std::set<std::string>> NamesByAddress(const std::vector<NmSymbol>& symbols);

// Lines of text split on '\n' (without the newlines).
std::vector<std::string> SplitLines(const std::string& text);
std::string Hex(uint64_t value);

}  // namespace hvprof::symbolizer::testing
