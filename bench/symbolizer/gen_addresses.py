#!/usr/bin/env python3
"""Writes address files for the symbolizer benchmark, one hex address per line.

  uniform: uniform over the bytes of the image's executable sections
  hot:     90% from 1000 "hot" functions chosen at random, weighted by a Zipf law (s = 1.2),
           at a uniform offset inside each; 10% uniform as above

Sections come from `readelf -SW`, function symbols from `nm -S` (binutils), so the files do not
depend on the symbolizer under test.
"""
import argparse
import bisect
import random
import re
import subprocess
import sys


def executable_sections(image):
    out = subprocess.run(["readelf", "-SW", image], check=True, capture_output=True,
                         text=True).stdout
    sections = []
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)"
                     r"\s+\S+\s+(\S*)", line)
        if not m:
            continue
        name, kind, address, size, flags = m.groups()
        if "X" in flags and "A" in flags and int(size, 16) > 0:
            sections.append((int(address, 16), int(size, 16)))
    if not sections:
        sys.exit(f"gen_addresses: {image} has no executable sections")
    return sections


def text_functions(image):
    out = subprocess.run(["nm", "-S", "--defined-only", image], check=True,
                         capture_output=True, text=True).stdout
    functions = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[2] in "tTwW" and int(fields[1], 16) > 0:
            functions.append((int(fields[0], 16), int(fields[1], 16)))
    return functions


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--distribution", choices=["uniform", "hot"], required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    sections = executable_sections(args.image)
    cumulative = []
    total = 0
    for _, size in sections:
        total += size
        cumulative.append(total)

    def uniform():
        x = rng.randrange(total)
        i = bisect.bisect_right(cumulative, x)
        start = cumulative[i - 1] if i else 0
        return sections[i][0] + (x - start)

    hot_pick = None
    if args.distribution == "hot":
        functions = text_functions(args.image)
        hot = rng.sample(functions, min(1000, len(functions)))
        weights = []
        acc = 0.0
        for rank in range(1, len(hot) + 1):
            acc += 1.0 / rank ** 1.2
            weights.append(acc)

        def hot_pick():
            i = bisect.bisect_right(weights, rng.random() * acc)
            start, size = hot[min(i, len(hot) - 1)]
            return start + rng.randrange(size)

    with open(args.out, "w") as out:
        lines = []
        for _ in range(args.count):
            if hot_pick is not None and rng.random() < 0.9:
                a = hot_pick()
            else:
                a = uniform()
            lines.append(f"{a:#x}\n")
        out.writelines(lines)


if __name__ == "__main__":
    main()
