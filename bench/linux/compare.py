#!/usr/bin/env python3
"""hvprof's linux platform against perf record -a: slowdown and top-symbol shares (run.sh)."""
import argparse
import json
import os
import re
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


def hvprof_run(args, work, tag, rate, command):
    period_ns = round(1e9 / rate)  # CPU_CLOCK: the cpu-clock timer's period, as perf -F sets it
    root = os.path.join(work, "h-" + tag)
    wrapped, time_file = timed(work, "h-" + tag, command)
    subprocess.run([os.path.join(args.bin, "hvprof"), "run", "--platform=linux", "--session-dir=" + root,
                    "--run-dir=" + os.path.join(work, "run-" + tag), f"--event=CPU_CLOCK:{period_ns}",
                    "--top=0", "--"] + wrapped, check=True, stdout=subprocess.DEVNULL)
    saved = [d for d in os.listdir(os.path.join(root, "samples")) if d != "current"]
    report = subprocess.run([os.path.join(args.bin, "hvprof-report"), "--session-dir=" + root, saved[0], "-l",
                             "--format=json"], stdout=subprocess.PIPE, text=True)
    if report.returncode not in (0, 3):
        sys.exit(f"hvprof-report failed ({report.returncode})")
    data = json.loads(report.stdout)
    shares, total = {}, 0
    for row in data["rows"]:
        key = pool_key(row["image"], row["symbol"], row["resolved"])
        shares[key] = shares.get(key, 0) + row["samples"][0]
        total += row["samples"][0]
    for key in shares:
        shares[key] = 100.0 * shares[key] / total
    return read_seconds(time_file), total, shares


PERF_LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")


def perf_run(args, work, tag, rate, command):
    data = os.path.join(work, "p-" + tag + ".data")
    wrapped, time_file = timed(work, "p-" + tag, command)
    subprocess.run(["perf", "record", "-a", "-F", str(rate), "-e", "cpu-clock", "-o", data, "--"] + wrapped,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso,sym", "--no-children", "-n",
                             "-q", "--percent-limit", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, check=True)
    shares, total = {}, 0
    for line in report.stdout.splitlines():
        m = PERF_LINE.match(line)
        if not m:
            continue
        samples, dso, symbol = int(m.group(2)), m.group(3), m.group(5)
        key = pool_key(dso, symbol, not symbol.startswith("0x"))
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
    parser.add_argument("--workload", action="append", required=True)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    failures = []
    for spec in args.workload:
        name, command_text = spec.split("=", 1)
        command = command_text.split()
        base = []
        for i in range(args.repeats):
            wrapped, time_file = timed(args.work, f"base-{name}-{i}", command)
            subprocess.run(wrapped, check=True)
            base.append(read_seconds(time_file))
        baseline = statistics.median(base)
        print(f"\n== {name}: {command_text}\n   unprofiled: {baseline:.3f} s (median of {args.repeats})")
        for rate in rates:
            runs = {"hvprof": [], "perf": []}
            for i in range(args.repeats):  # interleaved, so drift hits both tools alike
                runs["hvprof"].append(hvprof_run(args, args.work, f"{name}-{rate}-{i}", rate, command))
                runs["perf"].append(perf_run(args, args.work, f"{name}-{rate}-{i}", rate, command))
            slow = {t: statistics.median(r[0] for r in runs[t]) / baseline for t in runs}
            samples = {t: statistics.median(r[1] for r in runs[t]) for t in runs}
            # Shares: the last run of each, as one report a user would read.
            hv_shares, perf_shares = runs["hvprof"][-1][2], runs["perf"][-1][2]
            print(f"-- {rate} Hz: slowdown hvprof {100 * (slow['hvprof'] - 1):+.2f}%, perf "
                  f"{100 * (slow['perf'] - 1):+.2f}% (wall x{slow['hvprof']:.4f} vs x{slow['perf']:.4f}; "
                  f"overhead ratio hvprof/perf {((slow['hvprof'] - 1) / (slow['perf'] - 1)) if slow['perf'] > 1 else float('nan'):.2f}); "
                  f"samples {samples['hvprof']:.0f} vs {samples['perf']:.0f}")
            top = sorted(perf_shares.items(), key=lambda kv: -kv[1])[:10]
            worst = 0.0
            for (image, symbol), share in top:
                other = hv_shares.get((image, symbol), 0.0)
                worst = max(worst, abs(other - share))
                print(f"   {share:6.2f}%  {other:6.2f}%  {image:<24} {symbol[:70]}")
            print(f"   (perf, hvprof) top-10 worst difference {worst:.2f} points")
            if worst > 2.0:
                failures.append(f"{name} at {rate} Hz: shares differ by {worst:.2f} points")
            if slow["hvprof"] > slow["perf"] * 1.01:
                failures.append(f"{name} at {rate} Hz: slowdown {slow['hvprof']:.4f} above perf's {slow['perf']:.4f}")
    print("\nlinux bench: " + ("; ".join(failures) if failures else "all top-10 shares within 2 points, "
                               "slowdown never above perf's (1% noise margin)"))


if __name__ == "__main__":
    main()
