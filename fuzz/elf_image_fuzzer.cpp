// Fuzzes the ELF path of the symbolizer end to end: header checks, libelf section and symbol
// reading, build-id and debuglink notes, the symbol table sweep, and the DWARF unit index,
// line tables and inline scopes. Any crash, sanitizer report or leak is a bug.

#include <cstring>
#include <vector>

#include "hvprof/symbolizer/symbolizer.h"
#include "memfd_file.h"

namespace sym = hvprof::symbolizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hvprof::fuzz::MemfdFile file(data, size);
  if (!file.ok()) return 0;
  sym::SymbolizerOptions options;
  options.find_debuginfo = false;  // never wander the file system for the input's build-id
  options.dwarf_threads = 1;       // deterministic runs
  sym::Symbolizer symbolizer(options);
  sym::ImageSpec spec;
  spec.path = file.path();

  // Addresses: fixed ones, and some taken from the input so they can land on its symbols.
  std::vector<uint64_t> addresses = {0, 1, 0x400000, 0x401000, 0xffffffff81000000,
                                     UINT64_MAX};
  for (size_t offset = 0; offset + 8 <= size && addresses.size() < 64; offset += 61) {
    uint64_t v;
    std::memcpy(&v, data + offset, sizeof v);
    addresses.push_back(v);
    addresses.push_back(v + 3);
  }
  for (sym::Detail detail : {sym::Detail::kFunctions, sym::Detail::kInlines}) {
    sym::LookupOptions lookup;
    lookup.detail = detail;
    auto batch = symbolizer.Symbolize(spec, addresses, lookup);
    if (!batch) continue;
    for (size_t i = 0; i < batch.value().size(); ++i) {
      sym::Symbolization s = batch.value()[i];
      for (const sym::Frame& f : s.frames) {
        // Touch every byte the views point at.
        volatile size_t sink = f.function.size() + f.file.size();
        for (char c : f.function) sink = sink + static_cast<unsigned char>(c);
        for (char c : f.file) sink = sink + static_cast<unsigned char>(c);
        (void)sink;
      }
    }
  }
  auto functions = symbolizer.ListFunctions(spec);
  if (functions && !functions.value().empty()) {
    std::vector<uint64_t> starts;
    for (size_t i = 0; i < functions.value().size() && starts.size() < 256; i += 7) {
      starts.push_back(functions.value()[i].start);
      starts.push_back(functions.value()[i].start + functions.value()[i].size);
    }
    sym::LookupOptions lookup;
    lookup.detail = sym::Detail::kInlines;
    (void)symbolizer.Symbolize(spec, starts, lookup);
  }
  (void)symbolizer.Describe(spec);
  return 0;
}
