// The images a session's samples fall in: what `hvprof archive` must store with a session, and
// what hvprofd keeps in its build-id cache so that the session still reports its symbols after
// the files are rebuilt or removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvprof/store/session.h"

namespace hvprof::store {

// An image as the session recorded it.
struct SampledImage {
  std::string path;
  std::string build_id;  // as recorded (hex); empty when it has none
  std::string format;    // "elf", "kallsyms", "system_map"
  bool operator==(const SampledImage&) const = default;
};

// Every image the aggregate's entries and the frames of its stacks fall in: the hypervisor's
// (hypervisor-mode and idle samples), each sampled domain's kernel, and the user images its
// image words name (Aggregate::images). User addresses counted by process (no file, or a process
// the context did not know) need no image. With `hypervisor`, the hypervisor's image even when no
// sample of the aggregate was in it (guests' published profiles leave it to dom0). Sorted by path,
// then build-id, each once.
std::vector<SampledImage> SampledImagesOf(const SessionMetadata& metadata, const Aggregate& aggregate,
                                          bool hypervisor = false);

}  // namespace hvprof::store
