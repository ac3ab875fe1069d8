#!/usr/bin/env python3
"""hvprof's linux collector against perf record -a on a machine with every CPU busy (issue 22,
items 1, 2 and 4), in one run:

  load:      a CPU hog (a shell loop) on every CPU, for the whole run;
  workload:  the hot-function fixture for ROUNDS rounds (about 1.6 s on an idle 2.6 GHz CPU);
  rates:     50 kHz and 100 kHz per CPU, timed by the cpu-clock timer on both sides
             (`hvprof run -e CPU_CLOCK -F HZ`, `perf record -a -e cpu-clock -F HZ`).

For each rate it prints the wall time of the whole tool run (start-up, the workload, writing
the session or perf.data), each tool's own share of its profile (perf's way: the samples whose
process is the tool's own, kernel time included: hvprof, hvprofd and hvprof-hv against perf),
and what each lost, by cause. Then one FIGURE line per goal (bench/README.md):

  50 kHz:  hvprof wall time <= 1.1x perf's; hvprof's own share <= max(2x perf's, 1%)
  100 kHz: hvprof wall time <= 1.0x perf's, and every lost sample counted under a cause

Needs root (or kernel.perf_event_paranoid <= -1) and linux-perf.
  bench/linux/under_load.py [--rounds N] [--runs N] [--rates 50000,100000] [--bin build/bin]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

OWN_HVPROF = ("hvprof", "hvprofd", "hvprof-hv")


def figure(name, hvprof, peer, ratio, goal, passed):
    print("\t".join(["FIGURE", name, hvprof, peer, ratio, goal, "pass" if passed else "fail"]), flush=True)


def timed(command, **kwargs):
    start = time.monotonic()
    done = subprocess.run(command, **kwargs)
    return time.monotonic() - start, done


def hvprof_once(args, work, rate, tag):
    root = os.path.join(work, "s-" + tag)
    shutil.rmtree(root, ignore_errors=True)
    seconds, done = timed([os.path.join(args.bin, "hvprof"), "run", "--platform=linux", "--session-dir=" + root,
                           "--run-dir=" + os.path.join(work, "run-" + tag), "-e", "CPU_CLOCK", "-F", str(rate),
                           "--top=0", "--", args.fixture, "--rounds", str(args.rounds)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 3):
        sys.exit(f"hvprof run failed ({done.returncode}): {done.stderr.strip()}")
    saved = sorted(d for d in os.listdir(os.path.join(root, "samples")) if d != "current")
    report = subprocess.run([os.path.join(args.bin, "hvprof-report"), "--session-dir=" + root, saved[-1],
                             "--by-process", "--include-idle", "--format=json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if report.returncode not in (0, 3):
        sys.exit(f"hvprof-report failed ({report.returncode})")
    data = json.loads(report.stdout)
    total = sum(row["samples"][0] for row in data["rows"])
    own = sum(row["samples"][0] for row in data["rows"]
              if row.get("pid") is not None and row["process"].rsplit(" (", 1)[0] in OWN_HVPROF)
    losses = {loss["cause"]: loss["count"] for loss in data.get("losses", [])}
    return {"wall": seconds, "samples": total, "own": 100.0 * own / total if total else 0.0, "losses": losses,
            "lost": sum(losses.values()), "sampled_s": data["session"]["sampled_ns"] / 1e9}


def perf_once(args, work, rate):
    data = os.path.join(work, "perf.data")
    seconds, done = timed(["perf", "record", "-a", "-q", "-e", "cpu-clock", "-F", str(rate), "-o", data, "--",
                           args.fixture, "--rounds", str(args.rounds)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"perf record failed ({done.returncode}): {done.stderr.strip()}")
    comms = subprocess.run(["perf", "report", "-i", data, "--sort", "comm", "--stdio", "-F", "sample,comm"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    total = own = 0
    for line in comms.splitlines():
        match = re.match(r"\s*(\d+)\s+(\S.*?)\s*$", line)
        if not match or line.startswith("#"):
            continue
        count, comm = int(match.group(1)), match.group(2)
        total += count
        if comm in ("perf", "perf-exec"):
            own += count
    stats = subprocess.run(["perf", "report", "-i", data, "--stats"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True).stdout
    # The per-event block: "cpu-clock stats:" then its SAMPLE and LOST_SAMPLES (every sample perf
    # lost, from its LOST and LOST_SAMPLES records), and the throttling records of the whole file.
    lost = 0
    block = re.search(r"^cpu-clock stats:\n((?:\s+\S+ events:\s+\d+\n?)+)", stats, re.M)
    if block:
        match = re.search(r"LOST_SAMPLES events:\s+(\d+)", block.group(1))
        lost = int(match.group(1)) if match else 0
    losses = {"lost": lost}
    match = re.search(r"^\s*THROTTLE events:\s+(\d+)", stats, re.M)
    if match:
        losses["throttle records"] = int(match.group(1))
    return {"wall": seconds, "samples": total, "own": 100.0 * own / total if total else 0.0, "losses": losses,
            "lost": lost, "sampled_s": seconds}


def median_of(runs, key):
    return statistics.median(run[key] for run in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3500)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--rates", default="50000,100000")
    parser.add_argument("--bin", default="build/bin")
    parser.add_argument("--fixture", default="build/tests/fixtures/linux_hotspots")
    args = parser.parse_args()
    args.bin = os.path.abspath(args.bin)
    args.fixture = os.path.abspath(args.fixture)
    if shutil.which("perf") is None:
        sys.exit("under_load: needs perf: apt-get install linux-perf")
    work = tempfile.mkdtemp(prefix="hvprof-under-load.")
    hogs = [subprocess.Popen(["bash", "-c", "while :; do :; done"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        quiet, _ = timed([args.fixture, "--rounds", str(args.rounds)], stdout=subprocess.DEVNULL)
        print(f"{os.cpu_count()} CPUs, a CPU hog on each; workload {args.rounds} rounds: {quiet:.2f} s beside the hogs, "
              f"unprofiled")
        for rate in (int(r) for r in args.rates.split(",")):
            # Taken in turns, so that a drift of the machine's speed (a VM's neighbours) falls on both.
            hv, pf = [], []
            for i in range(args.runs):
                hv.append(hvprof_once(args, work, rate, f"{rate}-{i}"))
                pf.append(perf_once(args, work, rate))
            hv_wall, pf_wall = median_of(hv, "wall"), median_of(pf, "wall")
            hv_own, pf_own = median_of(hv, "own"), median_of(pf, "own")
            print(f"{rate} Hz: wall hvprof {hv_wall:.2f} s, perf {pf_wall:.2f} s (hvprof/perf {hv_wall / pf_wall:.3f}); "
                  f"own share hvprof {hv_own:.2f}%, perf {pf_own:.2f}%")
            if args.runs > 1:
                # This VM's timer interrupts cost differ from run to run (the same run has taken 8.6 s
                # and 16.2 s): every run's wall time, so the spread is seen beside the medians.
                walls = [", ".join(f"{run['wall']:.2f}" for run in runs) for runs in (hv, pf)]
                print(f"  wall of each run: hvprof {walls[0]} s; perf {walls[1]} s")
            print(f"  hvprof samples {hv[-1]['samples']}, lost by cause {hv[-1]['losses'] or 'none'}")
            print(f"  perf samples {pf[-1]['samples']}, {pf[-1]['losses'] or 'no loss records'}")
            khz = f"{rate // 1000} kHz"
            if rate <= 50000:
                figure(f"linux {khz}, every CPU busy: wall time", f"{hv_wall:.2f} s", f"{pf_wall:.2f} s",
                       f"{hv_wall / pf_wall:.3f}x", "<=1.1x", hv_wall <= 1.1 * pf_wall)
                limit = max(2 * pf_own, 1.0)
                figure(f"linux {khz}, every CPU busy: own share", f"{hv_own:.2f}%", f"{pf_own:.2f}%",
                       f"{hv_own / pf_own:.2f}x" if pf_own else "-", f"<=max(2x perf, 1%) = {limit:.2f}%",
                       hv_own <= limit)
            else:
                figure(f"linux {khz}, every CPU busy: wall time", f"{hv_wall:.2f} s", f"{pf_wall:.2f} s",
                       f"{hv_wall / pf_wall:.3f}x", "<=1.0x", hv_wall <= pf_wall)
                # Every sample asked for is either taken or counted lost, by cause; what neither
                # tool can account for are the cpu-clock timer's late interrupts (a VM's host
                # delivering them late), which perf does not report either. hvprof must account
                # for as much of what was asked as perf does.
                def accounted(run):
                    asked = rate * (os.cpu_count() or 1) * run["sampled_s"]
                    return 100.0 * (run["samples"] + run["lost"]) / asked if asked else 0.0
                hv_acc, pf_acc = accounted(hv[-1]), accounted(pf[-1])
                print(f"  taken or counted lost, of the samples asked: hvprof {hv_acc:.1f}%, perf {pf_acc:.1f}%")
                figure(f"linux {khz}, every CPU busy: samples taken or counted lost, of those asked",
                       f"{hv_acc:.1f}%", f"{pf_acc:.1f}%", f"{hv_acc / pf_acc:.3f}x" if pf_acc else "-",
                       ">=0.95x", pf_acc > 0 and hv_acc >= 0.95 * pf_acc)
    finally:
        for hog in hogs:
            hog.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
