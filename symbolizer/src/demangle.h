// Internal: C++ (Itanium ABI) demangling.
#pragma once

#include <string>

namespace hvprof::symbolizer {

// True if `name` looks like an Itanium-mangled C++ name ("_Z...").
inline bool IsMangled(const char* name) {
  return name != nullptr && name[0] == '_' && name[1] == 'Z';
}

// The demangled form of `name`, or an empty string if it does not demangle.
std::string Demangle(const char* name);

}  // namespace hvprof::symbolizer
