#include "hvprof/symbolizer/kernel_symbols.h"

#include <algorithm>

#include "hvprof/symbolizer/output.h"

namespace hvprof::symbolizer {
namespace {

constexpr size_t kMaxProblems = 5;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// Splits off the next blank-separated token.
std::string_view NextToken(std::string_view* rest) {
  size_t start = 0;
  while (start < rest->size() && IsBlank((*rest)[start])) ++start;
  size_t end = start;
  while (end < rest->size() && !IsBlank((*rest)[end])) ++end;
  std::string_view token = rest->substr(start, end - start);
  rest->remove_prefix(end);
  return token;
}

}  // namespace

Result<KernelSymbolText> ParseKernelSymbols(std::string_view text, ImageFormat format) {
  KernelSymbolText out;
  size_t position = 0;
  size_t line_number = 0;
  bool all_zero = true;
  // The line is not quoted: a session can name any file as its kernel map, and a report run by
  // root must not print what such a file holds.
  auto malformed = [&out, &line_number](std::string_view why, std::string_view /*line*/) {
    ++out.malformed;
    if (out.problems.size() < kMaxProblems) out.problems.push_back(fmt::format("line {}: {}", line_number, why));
  };
  while (position < text.size()) {
    size_t newline = text.find('\n', position);
    if (newline == std::string_view::npos) newline = text.size();
    std::string_view line = text.substr(position, newline - position);
    position = newline + 1;
    ++line_number;
    while (!line.empty() && (IsBlank(line.back()) || line.back() == '\r')) line.remove_suffix(1);
    std::string_view rest = line;
    std::string_view address_text = NextToken(&rest);
    if (address_text.empty()) continue;  // blank line
    ++out.lines;
    std::string_view type_text = NextToken(&rest);
    std::string_view name = NextToken(&rest);
    std::string_view module = NextToken(&rest);
    std::string_view extra = NextToken(&rest);
    uint64_t address = 0;
    if (!ParseHexAddress(address_text, &address)) {
      malformed("the address is not hex", line);
      continue;
    }
    if (type_text.size() != 1 || name.empty()) {
      malformed("expected 'ADDRESS TYPE NAME'", line);
      continue;
    }
    if (!extra.empty()) {
      malformed("unexpected text after the name", line);
      continue;
    }
    if (!module.empty()) {
      if (module.size() < 3 || module.front() != '[' || module.back() != ']') {
        malformed("a module must be written [name]", line);
        continue;
      }
      // System.map has no modules, but a kallsyms copy saved under that name does: accept.
      module = module.substr(1, module.size() - 2);
    }
    char type = type_text[0];
    KernelSymbol symbol;
    switch (type) {
      case 'a': case 'A':  // absolute: not an address of code or data
      case 'U':            // undefined
      case 'N': case 'n':  // debugging
      case '?': case '-':
        continue;
      case 't': case 'T': case 'i':
        symbol.is_text = true;
        break;
      case 'w': case 'W':
        symbol.is_text = true;
        break;
      case 'd': case 'D': case 'b': case 'B': case 'r': case 'R': case 'g': case 'G':
      case 's': case 'S': case 'v': case 'V': case 'u': case 'p': case 'c': case 'C':
        break;
      default:
        malformed("unknown symbol type", line);
        continue;
    }
    if (type == 'w' || type == 'W' || type == 'v' || type == 'V') {
      symbol.binding = Binding::kWeak;
    } else if (type >= 'a' && type <= 'z' && type != 'u') {
      symbol.binding = Binding::kLocal;
    } else {
      symbol.binding = Binding::kGlobal;
    }
    symbol.address = address;
    symbol.name = name;
    symbol.module = module;
    symbol.type = type;
    if (address != 0) all_zero = false;
    out.symbols.push_back(symbol);
  }
  if (out.symbols.empty() && out.malformed != 0) {
    return MakeError(ErrorKind::kCorrupt, "no valid {} line among {} lines ({})",
                     ImageFormatName(format), out.lines, out.problems.front());
  }
  out.all_addresses_zero = !out.symbols.empty() && all_zero;
  return out;
}

}  // namespace hvprof::symbolizer
