// Runtime support the compiler may call into, for the freestanding build only (a hosted build
// gets these from libstdc++). A hypervisor provides memcpy, memset, memmove and memcmp.
extern "C" void __cxa_pure_virtual() { __builtin_trap(); }
