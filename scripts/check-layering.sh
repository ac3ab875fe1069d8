#!/usr/bin/env bash
# Checks the layering of the tree:
#  1. the engine's folder (hypervisor-pmu/, all of it: its user-space hosts live in hosted/,
#     sim/, linux/ and hvprof-hv/) uses nothing a hypervisor cannot provide: library headers
#     beyond the <cstdint> class, user-space hvprof headers, exceptions, RTTI, the heap or the
#     std:: library;
#  2. every folder includes only from the folders below it, with no include circles
#     (scripts/check_includes.py, which holds the table of who may use whom);
#  3. the facts every sample carries (its mode, the idle domain, the unknown pid) are named from
#     hvprof/facts/sample.h, never spelt as numbers (scripts/check-facts.sh).
set -u
cd "$(dirname "$0")/.."

allowed_system='^(cstdint|cstddef|climits|type_traits|stdint\.h|stddef\.h)$'
status=0
files=$(find hypervisor-pmu -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.c' -o -name '*.cc' -o -name '*.cpp' \) | sort)

for f in $files; do
  while IFS=: read -r line header; do
    if ! [[ $header =~ $allowed_system ]]; then
      echo "$f:$line: includes <$header>; the engine may only include <cstdint>-class headers"
      status=1
    fi
  done < <(grep -n -o -P '^\s*#\s*include\s*<\K[^>]+' "$f" | sed 's/:/:/')
  while IFS=: read -r line header; do
    if ! [[ $header =~ ^hvpmu/ || -f "$(dirname "$f")/$header" ]]; then
      echo "$f:$line: includes \"$header\", which is not part of the engine"
      status=1
    fi
  done < <(grep -n -o -P '^\s*#\s*include\s*"\K[^"]+' "$f")
  # Strip comments and string literals, then look for forbidden constructs.
  while IFS=: read -r line text; do
    echo "$f:$line: forbidden in the engine: $text"
    status=1
  done < <(sed -e 's://.*$::' -e 's/"[^"]*"//g' "$f" |
           grep -n -P '\b(throw|try|catch|dynamic_cast|typeid|malloc|calloc|realloc|free)\b|\bstd::|\bnew\b|(?<!= )\bdelete\b' |
           grep -v -P '^\d+:\s*\*')
done

if [ $status -eq 0 ]; then
  echo "layering: $(echo "$files" | wc -l) engine files include only what a hypervisor has"
fi
if ! command -v python3 >/dev/null; then
  echo "layering: python3 is needed for the include check: run scripts/install-deps.sh"
  exit 1
fi
python3 scripts/check_includes.py || status=1
bash scripts/check-facts.sh || status=1
exit $status
