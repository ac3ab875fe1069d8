#!/usr/bin/env bash
# Fails if the freestanding engine object needs any symbol a hypervisor would not provide.
# The engine reaches the machine only through the Platform interface (virtual calls, so no
# symbols); the only external symbols allowed are the four memory functions every
# freestanding C++ compiler may call.
set -u
object=${1:?usage: check-freestanding.sh hvpmu_core_freestanding.o}
[ -f "$object" ] || { echo "freestanding: $object not built"; exit 1; }

allowed='^(memcpy|memset|memmove|memcmp)$'
undefined=$(nm -u --format=posix "$object" | awk '{print $1}' | sort -u)
bad=0
for symbol in $undefined; do
  if ! [[ $symbol =~ $allowed ]]; then
    echo "freestanding: undefined symbol '$symbol' ($(echo "$symbol" | c++filt))"
    bad=1
  fi
done
if grep -q -a -e '__gxx_personality' -e '_Unwind_Resume' <(nm "$object"); then
  echo "freestanding: exception-handling support is referenced"
  bad=1
fi
if [ $bad -eq 0 ]; then
  echo "freestanding: $object needs only: $(echo $undefined)"
fi
exit $bad
