#include "hvprof/report/writers/folded.h"

#include "hvprof/base/escape.h"

namespace hvprof::report {

namespace {

// A name as a folded frame: escaped for the terminal, ';' (the separator) made ':'.
std::string FoldedName(const std::string& name) {
  std::string safe = EscapeForTerminal(name);
  for (char& c : safe) c = c == ';' ? ':' : c;
  return safe;
}

}  // namespace

std::string FormatFolded(const NamedStacks& stacks) {
  std::vector<std::string> names;
  names.reserve(stacks.names.size());
  for (const std::string& name : stacks.names) names.push_back(FoldedName(name));
  std::string out;
  for (const NamedStack& stack : stacks.stacks) {
    for (size_t i = 0; i < stack.frames.size(); ++i) {
      if (i != 0) out += ';';
      out += names[stack.frames[i]];
    }
    out += ' ';
    out += std::to_string(stack.count);
    out += '\n';
  }
  return out;
}

}  // namespace hvprof::report
