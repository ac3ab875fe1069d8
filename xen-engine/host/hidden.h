// SPDX-License-Identifier: GPL-2.0-or-later
// Included first in every C++ file Xen compiles (-include): every symbol, declared or defined,
// gets hidden visibility, as Xen's own C gets from <xen/compiler.h>. With -fpic, code then
// reaches other objects' functions, data and vtables PC-relative, never through a GOT, which
// Xen's linker script requires to stay empty.
#pragma GCC visibility push(hidden)
