#!/usr/bin/env python3
"""Checks that CTest runs every Catch test case, once, and lists the skips with their causes.

    scripts/check-test-count.py BUILD_DIR            before a run: the registration
    scripts/check-test-count.py BUILD_DIR --ran      after a full run: also what ran

The registration: every Catch test binary CTest knows (the entries hvprof_discover_tests made,
cmake/HvprofTests.cmake) lists its cases with --list-test-names-only; each case must have
exactly one CTest entry of the same name, and no name may hold what CTest's or Catch's filters
read as something else (';' splits a CTest list, a leading '-' reads as an option, '*' at an
end as a wildcard, '~' or '#' at the start as a filter). With --ran, the case log the test
support library writes under CTest (BUILD_DIR/Testing/hvprof-cases.log) must show every
listed case started, and the skips are printed with their reasons.

Exit status: 0 when all hold, 1 otherwise (each problem on stderr).
"""
import argparse
import collections
import json
import os
import subprocess
import sys


def ctest_entries(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def is_catch_entry(test):
    """An entry hvprof_discover_tests made: its command ends with Catch's -w NoTests."""
    command = test.get("command") or []
    return command[-2:] == ["-w", "NoTests"]


def bad_name(name):
    if ";" in name:
        return "has ';' (CTest splits it into two entries, and neither runs the case)"
    if name != name.strip():
        return "starts or ends with a space"
    if name.startswith("-"):
        return "starts with '-' (CTest passes it on as an option)"
    if name[:1] in ("~", "#", "*") or name.endswith("*"):
        return "starts with '~', '#' or '*', or ends with '*' (Catch reads it as a filter)"
    if "\\" in name:
        return "has a backslash (Catch reads it as an escape)"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--ran", action="store_true",
                        help="also check that every case started, from the case log of a full run")
    args = parser.parse_args()
    build_dir = os.path.abspath(args.build_dir)
    problems = []

    entries = collections.defaultdict(list)  # binary path -> CTest entry names
    for test in ctest_entries(build_dir):
        if is_catch_entry(test) and test.get("command"):
            entries[test["command"][0]].append(test["name"])

    listed = {}  # binary basename -> case names
    for binary, names in sorted(entries.items()):
        if not os.path.exists(binary):
            problems.append(f"{binary}: not built")
            continue
        run = subprocess.run([binary, "--list-test-names-only"], capture_output=True, text=True)
        cases = [line for line in run.stdout.split("\n") if line != ""]
        listed[os.path.basename(binary)] = cases
        for case in cases:
            why = bad_name(case)
            if why:
                problems.append(f"{os.path.basename(binary)}: test case \"{case}\" {why}")
        counts = collections.Counter(names)
        for case in cases:
            if counts[case] != 1:
                problems.append(f"{os.path.basename(binary)}: test case \"{case}\" has "
                                f"{counts[case]} CTest entries, not 1")
        for name in set(names) - set(cases):
            problems.append(f"{os.path.basename(binary)}: CTest entry \"{name}\" names no test case")
    total = sum(len(c) for c in listed.values())

    if args.ran:
        log = os.path.join(build_dir, "Testing", "hvprof-cases.log")
        started = collections.defaultdict(set)
        skips = []
        if os.path.exists(log):
            with open(log, encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.rstrip("\n").split("\t")
                    if len(fields) >= 3 and fields[0] == "case":
                        started[fields[1]].add(fields[2])
                    elif len(fields) >= 4 and fields[0] == "skip":
                        skips.append((fields[1], fields[2], "\t".join(fields[3:])))
        ran = 0
        for binary, cases in sorted(listed.items()):
            for case in cases:
                if case in started[binary]:
                    ran += 1
                else:
                    problems.append(f"{binary}: test case \"{case}\" never started")
        print(f"check-test-count: {total} Catch test cases listed, {ran} started")
        if skips:
            print(f"check-test-count: {len(skips)} skipped, each with its cause:")
            for binary, case, reason in sorted(skips):
                print(f"  {binary}: {case}\n      {reason}")
    else:
        print(f"check-test-count: {total} Catch test cases, each with one CTest entry")

    for problem in problems:
        print(f"check-test-count: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
