// Plain data types of the symbolizer: what an image is, what a lookup asks for, and what comes
// back for each address. See symbolizer.h for the entry point and docs/symbolizer.md for the
// rules (address spaces, symbol choice, failure reasons, caching).
//
// Address spaces. Every address passed to or returned by the symbolizer is a *runtime* virtual
// address: the value a sample or a stack walk produced. The caller says where the image was
// loaded with ImageSpec::bias:
//
//     address in the image (link-time, as in its symbol table and DWARF) = runtime - bias
//
//   - ET_EXEC images (xen-syms, vmlinux without KASLR, non-PIE programs): bias 0.
//   - ET_DYN images (shared libraries, PIE programs): the load bias, i.e. the mapping's start
//     address minus the page-aligned p_vaddr of the PT_LOAD that covers the mapped file offset
//     (what dl_iterate_phdr reports as dlpi_addr).
//   - Kernels (vmlinux, System.map) with KASLR: the KASLR offset. /proc/kallsyms already shows
//     runtime addresses, so it is read with bias 0.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvprof::symbolizer {

// What the file named by ImageSpec::path is.
enum class ImageFormat : uint8_t {
  kElf,        // an ELF executable, shared library, PIE, vmlinux or xen-syms (ET_EXEC / ET_DYN)
  kKallsyms,   // /proc/kallsyms text: "ADDR TYPE NAME [MODULE]" per line
  kSystemMap,  // System.map (or xen-syms' .map) text: "ADDR TYPE NAME" per line
};

std::string_view ImageFormatName(ImageFormat format);

struct ImageSpec {
  std::string path;
  ImageFormat format = ImageFormat::kElf;
  // runtime address = image address + bias (see the top of this file). Wraps modulo 2^64.
  uint64_t bias = 0;
  // Lower-case hex build-id the caller recorded for this image (e.g. at sampling time). Empty:
  // not checked. If the image's build-id differs, every address fails with kBuildIdMismatch.
  std::string expected_build_id;
  // ELF only: a separate debug file to use instead of searching by build-id / .gnu_debuglink.
  std::string debug_file;

  // Spelled-out constructors (GCC 12 -Wextra warns on designated initializers that skip
  // members).
  static ImageSpec Elf(std::string path, uint64_t bias = 0) {
    ImageSpec spec;
    spec.path = std::move(path);
    spec.bias = bias;
    return spec;
  }
  static ImageSpec Kallsyms(std::string path) {
    ImageSpec spec;
    spec.path = std::move(path);
    spec.format = ImageFormat::kKallsyms;
    return spec;
  }
  static ImageSpec SystemMap(std::string path, uint64_t kaslr_offset = 0) {
    ImageSpec spec = Elf(std::move(path), kaslr_offset);
    spec.format = ImageFormat::kSystemMap;
    return spec;
  }
};

// How much to resolve. Each level includes the previous one.
enum class Detail : uint8_t {
  kFunctions,  // symbol table only: function name and offset
  kLines,      // + file:line:column from DWARF line tables (the out-of-line function's name)
  kInlines,    // + the chain of inlined functions at the address, innermost first
};

struct LookupOptions {
  Detail detail = Detail::kLines;
  bool demangle = true;  // C++ (Itanium ABI) names are demangled

  static LookupOptions With(Detail detail, bool demangle = true) {
    LookupOptions options;
    options.detail = detail;
    options.demangle = demangle;
    return options;
  }
};

// Why an address resolved to nothing, or (kNoLineInfo) resolved to less than was asked.
// Image-level reasons (kUnreadableFile ... kBuildIdMismatch) apply to every address of a batch
// and are reported once per image in BatchResult::images().
enum class Reason : uint8_t {
  kNone = 0,              // resolved to everything that was asked for
  kNoLineInfo,            // the function is known, but no DWARF line covers the address
  kOutsideImage,          // not inside any loadable segment of the image (wrong image or bias?)
  kNoSymbol,              // inside the image but before the first symbol of its section, or in
                          // a section (or a kernel hole) that has no symbols
  kPastSymbolEnd,         // after the end (start + size) of the nearest sized symbol
  kStripped,              // no .symtab and no debuginfo found; not covered by .dynsym
  kNoSymbols,             // the image has no usable symbols at all
  kUnreadableFile,        // the file cannot be opened, read or mapped
  kNotElf,                // not an ELF file (and not the text format it was declared as)
  kTruncatedElf,          // ELF whose headers or sections point past the end of the file
  kCorruptElf,            // ELF whose headers are inconsistent (bad sizes, unreadable tables)
  kCompressedImage,       // a compressed kernel (vmlinuz/bzImage, gzip, xz, zstd...)
  kUnsupportedImage,      // an ELF we cannot symbolize (relocatable .o/.ko, core dump...)
  kMalformedSymbolFile,   // a System.map/kallsyms file without a single valid line
  kBuildIdMismatch,       // the image's build-id differs from ImageSpec::expected_build_id
};

// Stable kebab-case token ("past-symbol-end"), used in text and JSON output.
std::string_view ReasonName(Reason reason);
// One-line explanation for people ("address is past the end of the nearest symbol").
std::string_view ReasonDescription(Reason reason);

// One function at an address. For an address inside inlined code there is one Frame per level,
// innermost first; the last frame is the out-of-line function that contains the address.
struct Frame {
  // Demangled if asked. The out-of-line frame is named from the symbol table; inlined frames
  // from DWARF (the linkage name if present, else DW_AT_name).
  std::string_view function;
  // Runtime address where `function` starts: the symbol's value + bias for the out-of-line
  // frame; the lowest address of the inlined instance's range that holds the address otherwise.
  uint64_t function_start = 0;
  uint64_t offset = 0;        // address - function_start
  std::string_view file;      // source file; empty if unknown
  uint32_t line = 0;          // 1-based; 0 if unknown
  uint32_t column = 0;        // 1-based; 0 if unknown
  bool inlined = false;       // true for all frames but the last
};

// The answer for one input address. Views point into the BatchResult that produced it and stay
// valid as long as it lives.
struct Symbolization {
  uint64_t address = 0;                // the runtime address that was asked about
  std::span<const Frame> frames;       // innermost first; empty when reason is a failure
  Reason reason = Reason::kNone;       // kNone, kNoLineInfo (frames present), or a failure
  std::string_view detail;             // for people: what exactly failed; empty for kNone
  std::string_view module;             // kallsyms module ("kvm") for module symbols, else empty
  uint32_t image_index = 0;            // which ImageSpec of the chain answered (see Symbolize)

  bool resolved() const { return !frames.empty(); }
};

enum class Binding : uint8_t { kLocal, kGlobal, kWeak };
std::string_view BindingName(Binding binding);

// One function symbol, for callers that need the function ranges of an image (the simulator
// picks real functions of real images from these).
struct FunctionSymbol {
  std::string name;           // demangled if asked
  uint64_t start = 0;         // runtime address (image address + bias)
  uint64_t size = 0;          // 0 for sizeless (assembly) symbols of an ELF
  Binding binding = Binding::kGlobal;
  std::string section;        // ELF section name (".text"); empty for System.map/kallsyms
  std::string module;         // kallsyms module name, else empty
  bool size_inferred = false; // System.map/kallsyms: size = distance to the next symbol
};

struct ListOptions {
  bool demangle = true;
  bool executable_only = true;  // ELF: only symbols in SHF_EXECINSTR sections
};

// What the symbolizer learned about an image.
struct ImageInfo {
  std::string path;
  ImageFormat format = ImageFormat::kElf;
  std::string elf_type;         // "exec", "dyn" (ELF only)
  std::string build_id;         // lower-case hex; empty if the image has none
  std::string symbol_file;      // the file whose symbol table is used (may be the debug file)
  std::string symbol_table;     // ".symtab", ".dynsym", "kallsyms" or "System.map"
  std::string debug_file;       // the separate debug file found, if any
  bool has_dwarf = false;       // line tables are available (in the image or its debug file)
  size_t symbol_count = 0;      // symbols usable for lookup
  uint64_t low_address = 0;     // image address range covered (image addresses, no bias)
  uint64_t high_address = 0;
  std::vector<std::string> warnings;  // e.g. malformed lines skipped, debug file rejected
};

// Helpers for build-ids.
std::string BuildIdToHex(std::span<const uint8_t> bytes);
// Lower-cases and checks a hex string; returns false if it is not an even-length hex string.
bool NormalizeBuildIdHex(std::string_view in, std::string* out);

}  // namespace hvprof::symbolizer
