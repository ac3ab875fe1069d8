#include "hvprof/report/writers/folded.h"

#include "hvprof/base/escape.h"

namespace hvprof::report {

namespace {

void AppendFrame(std::string& out, const std::string& name) {
  const std::string safe = EscapeForTerminal(name);
  for (char c : safe) out += c == ';' ? ':' : c;
}

}  // namespace

std::string FormatFolded(const std::vector<NamedStack>& stacks) {
  std::string out;
  for (const NamedStack& stack : stacks) {
    for (size_t i = 0; i < stack.frames.size(); ++i) {
      if (i != 0) out += ';';
      AppendFrame(out, stack.frames[i]);
    }
    out += fmt::format(" {}\n", stack.count);
  }
  return out;
}

}  // namespace hvprof::report
