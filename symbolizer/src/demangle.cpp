#include "demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace hvprof::symbolizer {
namespace {

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// Longer names are left mangled: the demangler recurses over its input.
constexpr size_t kMaxMangledLength = 4096;

}  // namespace

std::string Demangle(const char* name) {
  if (!IsMangled(name) || std::strlen(name) > kMaxMangledLength) return {};
  int status = 0;
  std::unique_ptr<char, FreeDeleter> out(abi::__cxa_demangle(name, nullptr, nullptr, &status));
  if (status != 0 || out == nullptr) return {};
  return std::string(out.get());
}

}  // namespace hvprof::symbolizer
