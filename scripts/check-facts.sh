#!/usr/bin/env bash
# Checks that the facts every sample carries are named, not spelt as numbers, outside the one
# header that defines them for user space (facts/include/hvprof/facts/sample.h) and the engine's
# ABI that defines them for the wire (hypervisor-pmu/, xen-engine/):
#  - no 0x7FFF (the idle domain) or 0x7FF4 (no domain);
#  - no 0xFFFFFFFF (the unknown pid or tid; other all-ones words are written as what they are,
#    std::numeric_limits<uint32_t>::max() or ~uint32_t{0});
#  - no mode compared with, or set to, a bare number, no mode array sized by one, and no other
#    table of the modes' names.
# Tests, fuzzers and benchmarks may spell values out (a test checks the numbers themselves). A
# line that means another thing by the same number says so with a `// literal:` comment.
set -u
cd "$(dirname "$0")/.."

status=0
files=$(find . \( -path './build' -o -path './build-*' -o -path './build/*' \) -prune -o -path './.*' -prune -o -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.c' -o -name '*.cc' \) -print |
        sed 's|^\./||' | grep -v -E '^(hypervisor-pmu|xen-engine|facts|tests|fuzz|bench)/' | sort)
report() {  # pattern, what is wrong
  local hits
  # shellcheck disable=SC2086
  hits=$(grep -n -P "$1" $files | grep -v -P '//\s*literal:|^[^:]+:\d+:\s*//' || true)
  if [ -n "$hits" ]; then
    echo "$hits" | sed "s|\$|   <- $2|"
    status=1
  fi
}
report '\b0x7[fF]{3}\b' 'the idle domain: hvprof::kIdleDomain'
report '\b0x7[fF]{2}4\b' 'no domain: hvprof::kInvalidDomain'
report '\b0x[fF]{8}[uU]?\b' 'the unknown pid or tid: hvprof::kNoPid, kNoTid'
report '\bmode\w*\s*(==|!=|<=|>=|<|>)\s*[0-9]' 'a mode as a number: sample_mode::'
report '^(?!.*\bfor \().*(\buint8_t\s+mode\w*|\.mode)\s*=\s*[0-9]\b' 'a mode as a number: sample_mode::'
report '\[\s*3\s*\]\s*(=|;).*\bmode' 'an array per mode: sample_mode::kCount'
report '"user",\s*"kernel",\s*"hypervisor"' 'the modes'"'"' names: sample_mode::Name'
if [ $status -eq 0 ]; then
  echo "facts: $(echo "$files" | wc -l) files name modes, domains and unknown pids"
else
  echo "facts: use hvprof/facts/sample.h for the values above (or mark another meaning with // literal:)"
fi
exit $status
