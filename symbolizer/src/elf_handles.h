// Internal: RAII owners for libelf and libdw handles.
#pragma once

#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>

#include "hvprof/base/unique_resource.h"

namespace hvprof::symbolizer {

inline void EndElf(Elf* elf) { elf_end(elf); }
inline void EndDwarf(Dwarf* dwarf) { dwarf_end(dwarf); }

using ScopedElf = UniqueResource<Elf*, &EndElf, nullptr>;
using ScopedDwarf = UniqueResource<Dwarf*, &EndDwarf, nullptr>;

}  // namespace hvprof::symbolizer
