#include "test_support.h"

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace hvprof::symbolizer::testing {

ImageSpec ElfSpec(const std::string& path, uint64_t bias) { return ImageSpec::Elf(path, bias); }

ImageSpec TextSpec(const std::string& path, ImageFormat format, uint64_t bias) {
  ImageSpec spec = format == ImageFormat::kKallsyms ? ImageSpec::Kallsyms(path)
                                                    : ImageSpec::SystemMap(path);
  spec.bias = bias;
  return spec;
}

ImageSpec WithBuildId(ImageSpec spec, const std::string& build_id) {
  spec.expected_build_id = build_id;
  return spec;
}

ImageSpec WithDebugFile(ImageSpec spec, const std::string& debug_file) {
  spec.debug_file = debug_file;
  return spec;
}

LookupOptions With(Detail detail, bool demangle) { return LookupOptions::With(detail, demangle); }

PrintOptions Style(OutputStyle style, bool print_address) {
  PrintOptions options;
  options.style = style;
  options.print_address = print_address;
  return options;
}

Answers Resolve(Symbolizer* symbolizer, const ImageSpec& spec,
                const std::vector<uint64_t>& addresses, LookupOptions options) {
  return Resolve(symbolizer, std::vector<ImageSpec>{spec}, addresses, options);
}

Answers Resolve(Symbolizer* symbolizer, const std::vector<ImageSpec>& chain,
                const std::vector<uint64_t>& addresses, LookupOptions options) {
  auto batch = symbolizer->Symbolize(chain, addresses, options);
  if (!batch) throw std::runtime_error("Symbolize failed: " + batch.error().message());
  Answers out;
  out.images = batch.value().images();
  for (size_t i = 0; i < batch.value().size(); ++i) {
    Symbolization s = batch.value()[i];
    Answer a;
    a.address = s.address;
    a.reason = s.reason;
    a.detail = std::string(s.detail);
    a.module = std::string(s.module);
    a.image_index = s.image_index;
    for (const hvprof::symbolizer::Frame& f : s.frames) {
      a.frames.push_back({std::string(f.function), f.function_start, f.offset, std::string(f.file),
                          f.line, f.column, f.inlined});
    }
    out.answers.push_back(std::move(a));
  }
  return out;
}

std::string FixturePaths::Pie(int dwarf_version) {
  return dwarf_version == 4 ? HVPROF_SYMFIX_PIE_DWARF4 : HVPROF_SYMFIX_PIE_DWARF5;
}
std::string FixturePaths::PieWithoutBuildId() { return HVPROF_SYMFIX_PIE_NO_BUILD_ID; }
std::string FixturePaths::Library() { return HVPROF_SYMFIX_LIB; }
std::string FixturePaths::SourceDir() { return HVPROF_SYMFIX_SOURCE_DIR; }
std::string FixturePaths::Cli() { return HVPROF_SYMBOLIZE_CLI; }

std::string RunCommand(const std::string& command, const std::string& input, int* status) {
  TempDir dir;
  std::string in = dir.File("stdin");
  dir.Write("stdin", input);
  std::string full = command + " < '" + in + "'";
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + full);
  std::string out;
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int raw = ::pclose(pipe);
  if (status != nullptr) *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

bool HaveTool(const std::string& tool) {
  int status = 0;
  RunCommand("command -v " + tool + " >/dev/null 2>&1", "", &status);
  return status == 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void CopyFile(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

FixtureReport RunFixture(const std::string& program) {
  int status = 0;
  std::string out = RunCommand("'" + program + "'", "", &status);
  if (status != 0) throw std::runtime_error("fixture failed: " + program);
  FixtureReport report;
  for (const std::string& line : SplitLines(out)) {
    std::istringstream in(line);
    std::string kind;
    std::string name;
    std::string address;
    in >> kind >> name >> address;
    uint64_t value = std::stoull(address, nullptr, 16);
    if (kind == "bias") {
      std::string path;
      std::getline(in >> std::ws, path);
      report.modules[name] = {value, path};
    } else if (kind == "func") {
      report.functions[name] = value;
    } else if (kind == "site") {
      report.sites[name] = value;
    }
  }
  return report;
}

int MarkLine(const std::string& source_file, const std::string& mark) {
  std::vector<std::string> lines = SplitLines(ReadFile(source_file));
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("MARK:" + mark + " ") != std::string::npos) return static_cast<int>(i + 1);
  }
  throw std::runtime_error("no MARK:" + mark + " in " + source_file);
}

std::vector<NmSymbol> NmSymbols(const std::string& file) {
  std::vector<NmSymbol> out;
  for (const std::string& line : SplitLines(RunCommand("nm -S --defined-only '" + file + "'"))) {
    std::istringstream in(line);
    std::vector<std::string> fields;
    std::string f;
    while (in >> f) fields.push_back(f);
    NmSymbol s;
    if (fields.size() == 4) {
      s.address = std::stoull(fields[0], nullptr, 16);
      s.size = std::stoull(fields[1], nullptr, 16);
      s.has_size = true;
      s.type = fields[2][0];
      s.name = fields[3];
    } else if (fields.size() == 3) {
      s.address = std::stoull(fields[0], nullptr, 16);
      s.type = fields[1][0];
      s.name = fields[2];
    } else {
      continue;
    }
    out.push_back(s);
  }
  return out;
}

std::set<std::pair<uint64_t, std::string>> ReadelfFunctions(const std::string& file) {
  std::set<std::pair<uint64_t, std::string>> out;
  // "   Num:    Value          Size Type    Bind   Vis      Ndx Name"
  for (const std::string& line : SplitLines(RunCommand("readelf -sW '" + file + "'"))) {
    std::istringstream in(line);
    std::string num, value, size, type, bind, vis, ndx, name;
    if (!(in >> num >> value >> size >> type >> bind >> vis >> ndx >> name)) continue;
    if (type != "FUNC" || ndx == "UND" || ndx == "ABS") continue;
    auto at = name.find('@');
    if (at != std::string::npos) name = name.substr(0, at);
    out.insert({std::stoull(value, nullptr, 16), name});
  }
  return out;
}

std::map<uint64_t, std::set<std::string>> NamesByAddress(const std::vector<NmSymbol>& symbols) {
  std::map<uint64_t, std::set<std::string>> out;
  for (const NmSymbol& s : symbols) out[s.address].insert(s.name);
  return out;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string Hex(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

}  // namespace hvprof::symbolizer::testing
