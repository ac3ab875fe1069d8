#include "hvprof/symbolizer/types.h"

#include <cctype>

#include "image.h"

namespace hvprof::symbolizer {

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kElf: return "ELF";
    case ImageFormat::kKallsyms: return "kallsyms";
    case ImageFormat::kSystemMap: return "System.map";
  }
  return "?";
}

std::string_view ReasonName(Reason reason) {
  switch (reason) {
    case Reason::kNone: return "none";
    case Reason::kNoLineInfo: return "no-line-info";
    case Reason::kOutsideImage: return "outside-image";
    case Reason::kNoSymbol: return "no-symbol";
    case Reason::kPastSymbolEnd: return "past-symbol-end";
    case Reason::kStripped: return "stripped";
    case Reason::kNoSymbols: return "no-symbols";
    case Reason::kUnreadableFile: return "unreadable-file";
    case Reason::kNotElf: return "not-elf";
    case Reason::kTruncatedElf: return "truncated-elf";
    case Reason::kCorruptElf: return "corrupt-elf";
    case Reason::kCompressedImage: return "compressed-image";
    case Reason::kUnsupportedImage: return "unsupported-image";
    case Reason::kMalformedSymbolFile: return "malformed-symbol-file";
    case Reason::kBuildIdMismatch: return "build-id-mismatch";
  }
  return "unknown";
}

std::string_view ReasonDescription(Reason reason) {
  switch (reason) {
    case Reason::kNone: return "resolved";
    case Reason::kNoLineInfo: return "function known, but no source line covers the address";
    case Reason::kOutsideImage: return "address is outside the image";
    case Reason::kNoSymbol: return "no symbol covers the address";
    case Reason::kPastSymbolEnd: return "address is past the end of the nearest symbol";
    case Reason::kStripped: return "image is stripped and no debuginfo was found";
    case Reason::kNoSymbols: return "image has no usable symbols";
    case Reason::kUnreadableFile: return "image file cannot be read";
    case Reason::kNotElf: return "image is not an ELF file";
    case Reason::kTruncatedElf: return "image is a truncated ELF file";
    case Reason::kCorruptElf: return "image is a corrupt ELF file";
    case Reason::kCompressedImage: return "image is a compressed kernel (vmlinuz)";
    case Reason::kUnsupportedImage: return "image is an ELF of an unsupported kind";
    case Reason::kMalformedSymbolFile: return "symbol map has no valid line";
    case Reason::kBuildIdMismatch: return "image build-id differs from the expected one";
  }
  return "unknown";
}

std::string_view BindingName(Binding binding) {
  switch (binding) {
    case Binding::kLocal: return "local";
    case Binding::kGlobal: return "global";
    case Binding::kWeak: return "weak";
  }
  return "?";
}

std::string BuildIdToHex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

bool NormalizeBuildIdHex(std::string_view in, std::string* out) {
  out->clear();
  if (in.empty() || in.size() % 2 != 0) return false;
  for (char c : in) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    *out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return true;
}

ImageFailure MakeFailure(Reason reason, std::string detail) {
  return ImageFailure{reason, std::move(detail), ErrorKindForReason(reason)};
}

ErrorKind ErrorKindForReason(Reason reason) {
  switch (reason) {
    case Reason::kUnreadableFile: return ErrorKind::kIo;
    case Reason::kNoSymbols:
    case Reason::kStripped: return ErrorKind::kNotFound;
    case Reason::kCompressedImage:
    case Reason::kUnsupportedImage: return ErrorKind::kUnsupported;
    case Reason::kBuildIdMismatch: return ErrorKind::kInvalidArgument;
    default: return ErrorKind::kCorrupt;
  }
}

Error ToError(const ImageFailure& failure) { return Error(failure.kind, failure.detail); }

}  // namespace hvprof::symbolizer
