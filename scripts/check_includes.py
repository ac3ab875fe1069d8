#!/usr/bin/env python3
"""Checks the direction of every #include between hvprof's folders.

Each library folder may include headers only from the folders listed for it in LAYERS below;
the list is the architecture (data flows engine -> rings -> agent -> store -> report), and a
change to it is a design decision, made here on purpose. Also fails on:
  - a folder missing from LAYERS (each new library folder says where it stands),
  - a cycle among the allowed dependencies themselves,
  - an include circle between the components (name.h + name.cpp) of one folder.
Run from the top of the tree; scripts/check-layering.sh calls it.
"""
import os
import re
import sys

# folder -> folders whose headers it may include. Lower layers first.
LAYERS = {
    "hypervisor-pmu": [],  # the freestanding engine (check-layering.sh checks it further)
    "base": [],
    # What every sample says (mode, reserved domains, unknown pid), for user space: the ABI's values.
    "facts": ["hypervisor-pmu"],
    "symbolizer": ["base"],
    # What the hosts tell of a run besides its samples: context events, domains, sampling stats, and
    # the sim's ground truth (its rows name modes: facts).
    "context": ["facts", "base"],
    "store": ["context", "facts", "base"],
    # Statistics of comparisons: pure numbers, used by the report's diff.
    "stats": ["base"],
    "hosted": ["hypervisor-pmu", "base"],
    "sim": ["hosted", "context", "facts", "hypervisor-pmu", "base", "symbolizer"],
    "linux": ["hosted", "context", "facts", "hypervisor-pmu", "base"],
    "hvprof-hv/protocol": ["context", "hypervisor-pmu", "base"],
    "hvprof-hv/daemon": ["hvprof-hv/protocol", "sim", "linux", "hosted", "context", "hypervisor-pmu", "base",
                         "symbolizer"],
    # Copies of sampled images by build-id, for reports of sessions whose files were rebuilt.
    "buildid-cache": ["symbolizer", "base"],
    "agent-core": ["hvprof-hv/protocol", "buildid-cache", "store", "context", "facts", "hypervisor-pmu", "base"],
    # A Linux domain under Xen follows its own tasks with linux/'s task tracker.
    "xen": ["agent-core", "linux", "store", "context", "hypervisor-pmu", "base"],
    "setup": ["store", "context", "symbolizer", "hypervisor-pmu", "base"],
    "dom0-agent": ["agent-core", "buildid-cache", "setup", "store", "context", "hypervisor-pmu", "base", "symbolizer"],
    # A guest's agent hands dom0 the profile `hvprof --publish` (control) made of its session.
    "guest-agent": ["agent-core", "buildid-cache", "setup", "store", "context", "hypervisor-pmu", "base", "symbolizer"],
    # Session archives: a session and its images by build-id, written and unpacked (tar).
    "archive": ["buildid-cache", "store", "symbolizer", "base"],
    "report": ["stats", "archive", "buildid-cache", "store", "context", "symbolizer", "base"],
    # Sends the report's stacks (as pprof) to other tools' servers; continuous mode's windows (store)
    # labelled by mode (facts).
    "push": ["report", "store", "facts", "symbolizer", "base"],
    "control": ["archive", "buildid-cache", "push", "report", "agent-core", "setup", "hvprof-hv/protocol", "store", "symbolizer", "hypervisor-pmu",
                "base"],
    "tests/fake-platform": ["hosted", "hypervisor-pmu", "base"],
}
# Mains (cli/), tests/, bench/ and fuzz/ may include any library; tests/fake-platform/ is a
# library of its own and is checked.

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCE = (".h", ".hpp", ".cpp", ".c")


def library_folders():
    """Folders that hold a library: those with an include/ or src/ beside a CMakeLists.txt."""
    found = []
    for root, dirs, files in os.walk("."):
        # Build trees (build/, build-asan/, ...) hold a CMakeCache.txt; buildid-cache/ is source.
        dirs[:] = [d for d in dirs
                   if not d.startswith(".") and not os.path.exists(os.path.join(root, d, "CMakeCache.txt"))]
        if "CMakeLists.txt" in files and ("include" in dirs or "src" in dirs):
            found.append(os.path.relpath(root, "."))
    return sorted(found)


def component_of(folder, path):
    """"report/src/load.cpp" and "report/include/hvprof/report/load.h" -> "load";
    "hypervisor-pmu/include/hvpmu/abi/ops.h" -> "abi/ops" (not the same as src/ops.cpp)."""
    relative = os.path.relpath(path, folder)
    parts = relative.split(os.sep)
    if parts[0] == "include":
        parts = parts[1:]
        # Drop the namespace folders: hvprof/<name>/ or hvpmu/.
        if parts[0] == "hvprof" and len(parts) > 2:
            parts = parts[2:]
        elif parts[0] == "hvpmu" and len(parts) > 1:
            parts = parts[1:]
    elif parts[0] == "src":
        parts = parts[1:]
    return os.path.splitext("/".join(parts))[0]


def sources(folder):
    for root, dirs, files in os.walk(folder):
        for name in files:
            if name.endswith(SOURCE):
                yield os.path.join(root, name)


def main():
    problems = []
    folders = library_folders()
    for folder in folders:
        if folder not in LAYERS:
            problems.append(f"{folder}: a library folder not in scripts/check_includes.py's LAYERS; "
                            "add it with the folders it may include")
    for folder in LAYERS:
        if folder not in folders:
            problems.append(f"{folder}: listed in LAYERS but not a library folder any more")

    # The allowed graph itself must have no cycle.
    state = {}

    def visit(folder, trail):
        if state.get(folder) == "done":
            return
        if state.get(folder) == "open":
            problems.append("LAYERS has a cycle: " + " -> ".join(trail + [folder]))
            return
        state[folder] = "open"
        for dep in LAYERS.get(folder, []):
            visit(dep, trail + [folder])
        state[folder] = "done"

    for folder in LAYERS:
        visit(folder, [])

    # Which folder owns each public header ("hvprof/store/session.h" -> "store").
    owner = {}
    for folder in folders:
        include_dir = os.path.join(folder, "include")
        for path in sources(include_dir):
            owner[os.path.relpath(path, include_dir)] = folder

    checked = 0
    for folder in folders:
        allowed = set(LAYERS.get(folder, [])) | {folder}
        # Components: a public header and the source of the same name ("load" is
        # include/hvprof/report/load.h with src/load.cpp). Circles between them are
        # circles in the folder's design; private headers in src/ are the component's own.
        public = {component_of(folder, p) for p in sources(os.path.join(folder, "include"))}
        components = {}
        for path in sources(folder):
            # Nested library folders are checked on their own.
            if any(other != folder and other.startswith(folder + "/") and path.startswith(other + "/")
                   for other in folders):
                continue
            checked += 1
            text = open(path, encoding="utf-8", errors="replace").read()
            me = component_of(folder, path)
            for match in INCLUDE.finditer(text):
                header = match.group(1)
                line = text.count("\n", 0, match.start()) + 1
                target = owner.get(header)
                if target is None:
                    continue
                if target not in allowed:
                    problems.append(f"{path}:{line}: includes \"{header}\" of {target}/, which {folder}/ may not "
                                    f"use (it may use: {', '.join(sorted(LAYERS.get(folder, []))) or 'nothing'})")
                elif target == folder and me in public:
                    other = component_of(folder, os.path.join(folder, "include", header))
                    if other != me:
                        components.setdefault(me, set()).add(other)
        # Circles between components of this folder.
        colour = {}

        def walk(node, trail):
            if colour.get(node) == "done":
                return
            if colour.get(node) == "open":
                cycle = trail[trail.index(node):] + [node]
                problems.append(f"{folder}/: include circle between components: {' -> '.join(cycle)}")
                return
            colour[node] = "open"
            for nxt in sorted(components.get(node, ())):
                if nxt != node:
                    walk(nxt, trail + [node])
            colour[node] = "done"

        for node in sorted(components):
            walk(node, [])

    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"includes: {checked} files in {len(folders)} library folders include only downward, no circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
