// Fuzzes the System.map / kallsyms parser, and the kernel symbol image built from its output
// (sorting, module grouping, page-capped coverage, lookups and the function listing).

#include <string_view>
#include <vector>

#include "hvprof/symbolizer/kernel_symbols.h"
#include "hvprof/symbolizer/symbolizer.h"
#include "memfd_file.h"

namespace sym = hvprof::symbolizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = sym::ParseKernelSymbols(text, sym::ImageFormat::kKallsyms);
  std::vector<uint64_t> addresses = {0, 0xffffffff81000000, UINT64_MAX};
  if (parsed) {
    for (const sym::KernelSymbol& s : parsed.value().symbols) {
      if (addresses.size() > 512) break;
      addresses.push_back(s.address);
      addresses.push_back(s.address - 1);
      addresses.push_back(s.address + 0x800);
    }
  }
  hvprof::fuzz::MemfdFile file(data, size);
  if (!file.ok()) return 0;
  sym::Symbolizer symbolizer;
  for (sym::ImageFormat format : {sym::ImageFormat::kKallsyms, sym::ImageFormat::kSystemMap}) {
    sym::ImageSpec spec;
    spec.path = file.path();
    spec.format = format;
    spec.bias = format == sym::ImageFormat::kSystemMap ? 0x1000 : 0;
    auto batch = symbolizer.Symbolize(spec, addresses);
    if (batch) {
      for (size_t i = 0; i < batch.value().size(); ++i) {
        sym::Symbolization s = batch.value()[i];
        volatile size_t sink = s.module.size() + s.detail.size();
        for (const sym::Frame& f : s.frames) sink = sink + f.function.size() + f.offset;
        (void)sink;
      }
    }
    (void)symbolizer.ListFunctions(spec);
  }
  return 0;
}
