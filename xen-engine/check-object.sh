#!/bin/sh
# Checks the C++ object Xen links for hvprof's engine (arch/x86/hvprof/hvprof_engine.o, made by
# the patch series' Makefile from hypervisor-pmu/src/*.cpp and host/platform_adapter.cpp):
#   - no global constructors or destructors: .init_array, .ctors, .fini_array, .dtors empty;
#   - no GOT (Xen's linker script asserts it empty), no unwind tables or exception tables,
#     no thread-local data;
#   - nothing undefined but the host's functions (hvprof_host_*), the memory functions every
#     freestanding compiler may call, and Xen's indirect-branch and return thunks. (This is
#     scripts/check-freestanding.sh's rule, plus what Xen's code generation adds.)
#
#   check-object.sh OBJECT        (NM and OBJDUMP from the environment, as Xen's build sets them)
set -eu
object=${1:?usage: check-object.sh OBJECT}
nm=${NM:-nm}
objdump=${OBJDUMP:-objdump}
[ -f "$object" ] || { echo "check-object: $object: no such file" >&2; exit 1; }

bad=0
# Sections that must not exist, or be empty.
sections=$("$objdump" -h "$object" | awk '$1 ~ /^[0-9]+$/ { print $2, $3 }')
echo "$sections" | while read -r name size; do
  case "$name" in
    .init_array*|.ctors*|.fini_array*|.dtors*|.got*|.plt*|.eh_frame*|.gcc_except_table*|.tdata*|.tbss*)
      if [ "$(printf '%d' "0x$size")" -ne 0 ]; then
        echo "check-object: $object: section $name is not empty ($size bytes)" >&2
        exit 1
      fi ;;
  esac
done || bad=1

undefined=$("$nm" -u --format=posix "$object" | awk '{ print $1 }' | sort -u)
for symbol in $undefined; do
  case "$symbol" in
    hvprof_host_*|memcpy|memset|memmove|memcmp) ;;
    __x86_indirect_thunk_*|__x86_return_thunk) ;;
    *)
      echo "check-object: $object: undefined symbol $symbol ($(echo "$symbol" | c++filt 2>/dev/null || echo "$symbol"))" >&2
      bad=1 ;;
  esac
done
if "$nm" "$object" | grep -q -e '__gxx_personality' -e '_Unwind_' -e '__cxa_atexit' -e '__cxa_guard'; then
  echo "check-object: $object: C++ runtime support is referenced (exceptions, guards, atexit)" >&2
  bad=1
fi
exit $bad
