#!/usr/bin/env python3
"""hvprof's linux platform against perf record -a: slowdown and top-symbol shares (run.sh)."""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys


def timed(work, name, command):
    """bash that runs `command` and writes its own wall time (ns) to a file."""
    out = os.path.join(work, name + ".ns")
    script = 'start=$(date +%s%N); "$@" >/dev/null; status=$?; echo $(( $(date +%s%N) - start )) > ' + out + '; exit $status'
    return ["bash", "-c", script, "timed"] + command, out


def read_seconds(path):
    with open(path) as f:
        return int(f.read()) / 1e9


def without_parameters(name):
    """perf prints C++ names without their parameter lists; hvprof with them."""
    depth = 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif c == "(" and depth == 0 and not name.startswith("(anonymous namespace)", i) and i > 0:
            return name[:i]
    return name


def pool_key(image, symbol, resolved):
    """One name per symbol; what neither tool can name is pooled per image."""
    if image.startswith("anon (") or image == "[unknown]":
        return ("[unknown]", "[unknown]")
    if not resolved:
        return (image, "[unknown]")
    return (image, without_parameters(symbol))


# Each tool's own user-space code (its collector processes), which its system-wide profile
# includes: pooled, shown, and left out of a second comparison.
OWN = ("[the tool itself]", "")
HVPROF_OWN = {"hvprof-hv", "hvprofd", "hvprof"}


def without_own(shares):
    own = shares.get(OWN, 0.0)
    return {k: 100.0 * v / (100.0 - own) for k, v in shares.items() if k != OWN} if own < 100 else {}


def hvprof_run(args, work, tag, rate, command):
    period_ns = round(1e9 / rate)  # CPU_CLOCK: the cpu-clock timer's period, as perf -F sets it
    root = os.path.join(work, "h-" + tag)
    shutil.rmtree(root, ignore_errors=True)
    wrapped, time_file = timed(work, "h-" + tag, command)
    subprocess.run([os.path.join(args.bin, "hvprof"), "run", "--platform=linux", "--session-dir=" + root,
                    "--run-dir=" + os.path.join(work, "run-" + tag), f"--event=CPU_CLOCK:{period_ns}",
                    "--top=0", "--"] + wrapped, check=True, stdout=subprocess.DEVNULL)
    saved = [d for d in os.listdir(os.path.join(root, "samples")) if d != "current"]
    report = subprocess.run([os.path.join(args.bin, "hvprof-report"), "--session-dir=" + root, saved[0], "-l",
                             "--by-domain", "--format=json"], stdout=subprocess.PIPE, text=True)
    if report.returncode not in (0, 3):
        sys.exit(f"hvprof-report failed ({report.returncode})")
    data = json.loads(report.stdout)
    shares, total = {}, 0
    for row in data["rows"]:
        if row["domain"] == "idle":  # the idle loop: see IDLE below
            continue
        if row["image"] in HVPROF_OWN:
            key = OWN
        else:
            key = pool_key(row["image"], row["symbol"], row["resolved"])
        shares[key] = shares.get(key, 0) + row["samples"][0]
        total += row["samples"][0]
    for key in shares:
        shares[key] = 100.0 * shares[key] / total
    return read_seconds(time_file), total, shares


PERF_LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(.+?)\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")
# IDLE: whether a timer sample lands in an idle CPU's halt loop depends on how deep that CPU
# sleeps, which differs from run to run for both tools; shares are of the samples outside it
# (perf's pid 0, "swapper"; hvprof's idle domain).


def perf_run(args, work, tag, rate, command):
    data = os.path.join(work, "p-" + tag + ".data")
    wrapped, time_file = timed(work, "p-" + tag, command)
    subprocess.run(["perf", "record", "-a", "-F", str(rate), "-e", "cpu-clock", "-o", data, "--"] + wrapped,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "comm,dso,sym", "--no-children", "-n",
                             "-q", "--percent-limit", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, check=True)
    shares, total = {}, 0
    for line in report.stdout.splitlines():
        m = PERF_LINE.match(line)
        if not m:
            continue
        samples, comm, dso, symbol = int(m.group(2)), m.group(3), m.group(4), m.group(6)
        if comm == "swapper":
            continue
        key = OWN if dso == "perf" else pool_key(dso, symbol, not symbol.startswith("0x"))
        shares[key] = shares.get(key, 0) + samples
        total += samples
    for key in shares:
        shares[key] = 100.0 * shares[key] / total
    os.unlink(data)
    return read_seconds(time_file), total, shares


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rates", required=True)
    parser.add_argument("--bin", required=True)
    # NAME|SIZE1,SIZE2,...|COMMAND with {} for the size: one size per rate, so that every rate
    # gets enough samples for a 2-point comparison without running for minutes at the top rate.
    parser.add_argument("--workload", action="append", required=True)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    failures = []
    for spec in args.workload:
        name, sizes, template = spec.split("|", 2)
        print(f"\n== {name}: {template}")
        for rate, size in zip(rates, sizes.split(",")):
            command = template.format(size).split()
            base = []
            for i in range(args.repeats):
                wrapped, time_file = timed(args.work, f"base-{name}-{i}", command)
                subprocess.run(wrapped, check=True)
                base.append(read_seconds(time_file))
            baseline = statistics.median(base)
            runs = {"hvprof": [], "perf": []}
            for i in range(args.repeats):  # interleaved, so drift hits both tools alike
                runs["hvprof"].append(hvprof_run(args, args.work, f"{name}-{rate}-{i}", rate, command))
                runs["perf"].append(perf_run(args, args.work, f"{name}-{rate}-{i}", rate, command))
            slow = {t: statistics.median(r[0] for r in runs[t]) / baseline for t in runs}
            samples = {t: statistics.median(r[1] for r in runs[t]) for t in runs}
            # The wall time each non-idle sample added to the workload: the timer interrupt's
            # cost dominates, so slowdowns compare fairly only at equal achieved rates.
            cost = {t: 1e6 * (slow[t] - 1) * baseline / samples[t] for t in runs}
            ratio = (slow["hvprof"] - 1) / (slow["perf"] - 1) if slow["perf"] > 1 else float("nan")
            print(f"-- {rate} Hz, size {size}: unprofiled {baseline:.3f} s; slowdown (median of {args.repeats}) "
                  f"hvprof {100 * (slow['hvprof'] - 1):+.2f}%, perf {100 * (slow['perf'] - 1):+.2f}% "
                  f"(overhead ratio hvprof/perf {ratio:.2f}); non-idle samples {samples['hvprof']:.0f} vs "
                  f"{samples['perf']:.0f}; added wall per sample {cost['hvprof']:.2f} vs {cost['perf']:.2f} us")
            # Shares: the last run of each, as one report a user would read.
            hv_shares, perf_shares = runs["hvprof"][-1][2], runs["perf"][-1][2]
            print(f"   own collector's user space: hvprof {hv_shares.get(OWN, 0):.2f}%, perf {perf_shares.get(OWN, 0):.2f}%")
            top = sorted((kv for kv in perf_shares.items() if kv[0] != OWN), key=lambda kv: -kv[1])[:10]
            worst = 0.0
            for (image, symbol), share in top:
                other = hv_shares.get((image, symbol), 0.0)
                worst = max(worst, abs(other - share))
                print(f"   {share:6.2f}%  {other:6.2f}%  {image:<24} {symbol[:70]}")
            # Two independent samplings of the same shares differ by chance too: 2 standard errors.
            p = top[0][1] / 100 if top else 0
            n = min(runs["hvprof"][-1][1], runs["perf"][-1][1])
            noise = 200 * (2 * p * (1 - p) / max(n, 1)) ** 0.5
            print(f"   (perf, hvprof) top-10 worst difference {worst:.2f} points; sampling noise on the top "
                  f"symbol alone is {noise:.2f} points (2 SE)")
            # The same without either tool's own code: how the workload itself is seen.
            hv_rest, perf_rest = without_own(hv_shares), without_own(perf_shares)
            worst_rest = max((abs(hv_rest.get(k, 0.0) - v) for k, v in
                              sorted(perf_rest.items(), key=lambda kv: -kv[1])[:10]), default=0.0)
            print(f"   without each tool's own code: top-10 worst difference {worst_rest:.2f} points")
            if worst > 2.0:
                failures.append(f"{name} at {rate} Hz: shares differ by {worst:.2f} points "
                                f"({worst_rest:.2f} without each tool's own code)")
            if slow["hvprof"] > slow["perf"] * 1.01:
                failures.append(f"{name} at {rate} Hz: slowdown x{slow['hvprof']:.4f} above perf's x{slow['perf']:.4f}"
                                f" (per sample {cost['hvprof']:.2f} vs {cost['perf']:.2f} us)")
    print("\nlinux bench: " + ("; ".join(failures) if failures else "all top-10 shares within 2 points, "
                               "slowdown never above perf's (1% noise margin)"))


if __name__ == "__main__":
    main()
