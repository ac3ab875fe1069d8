#!/usr/bin/env python3
"""Watches processes while a benchmark runs: every INTERVAL seconds, the resident memory and the
CPU time used so far of each process whose command line contains one of the PATTERNs, as one
JSON line per process and tick ({"t", "pid", "name", "rss_kb", "cpu_s", "threads"}; t from the
start; "threads": per thread id, its name, CPU seconds and voluntary context switches so far).

    monitor.py OUT INTERVAL PATTERN...        (until SIGTERM)
    monitor.py --summary OUT WINDOW_S END_S   (what a benchmark prints from OUT)

The summary is a JSON object: per name and for all processes together, the peak resident
memory, the memory at WINDOW_S seconds and at END_S (the workload's end, seconds from the
watch's start: before the session is written), and the CPU used in the first and the last
WINDOW_S seconds before END_S (as a share of one CPU); and per name, per thread (by thread name
and id) the same CPU shares and the thread's wake-ups per second in both windows, to say which
thread changed when the CPU use does (a thread that waits in epoll_wait wakes once per switch).
"""
import json
import os
import signal
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def matching(patterns):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(p in cmdline for p in patterns) and "monitor.py" not in cmdline:
            yield int(pid)


def sample(pid):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        statm = open(f"/proc/{pid}/statm").read().split()
    except OSError:
        return None
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
    return name, int(statm[1]) * PAGE_KB, cpu, threads(pid)


def threads(pid):
    """{tid: [name, cpu_s, voluntary switches]} of the process's threads."""
    found = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            status = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        switches = next((int(line.split()[1]) for line in status.splitlines()
                         if line.startswith("voluntary_ctxt_switches")), 0)
        found[tid] = [stat[stat.index("(") + 1:stat.rindex(")")],
                      (int(fields[11]) + int(fields[12])) / TICKS, switches]
    return found


def watch(out, interval, patterns):
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    start = time.monotonic()
    with open(out, "w") as f:
        while not stop:
            now = time.monotonic() - start
            for pid in matching(patterns):
                got = sample(pid)
                if got:
                    name, rss, cpu, tasks = got
                    f.write(json.dumps({"t": round(now, 2), "pid": pid, "name": name, "rss_kb": rss, "cpu_s": cpu,
                                        "threads": tasks}) + "\n")
            f.flush()
            time.sleep(interval)


def summary(out, window, workload_end):
    rows = [json.loads(line) for line in open(out) if line.strip()]
    if not rows:
        return {}
    ticks = sorted({r["t"] for r in rows})
    end = min(ticks[-1], workload_end)

    def summarize(selected):
        by_tick = {}
        cpu_by_pid = {}
        for r in selected:
            by_tick[r["t"]] = by_tick.get(r["t"], 0) + r["rss_kb"]
            cpu_by_pid.setdefault(r["pid"], []).append((r["t"], r["cpu_s"]))

        def rss_at(t):  # the watched processes' memory at the last tick at or before t
            at = [x for x in ticks if x <= t and x in by_tick]
            return by_tick[at[-1]] if at else 0

        def cpu_between(a, b):  # CPU seconds used between a and b by every process
            used = 0.0
            for series in cpu_by_pid.values():
                before = [c for t, c in series if t <= a]
                inside = [c for t, c in series if t <= b]
                first = before[-1] if before else (series[0][1] if series[0][0] <= b else None)
                if first is None or not inside:
                    continue
                used += max(0.0, inside[-1] - first)
            return used

        span = min(window, end)
        return {
            "peak_rss_mb": max(by_tick.values(), default=0) / 1024,
            "rss_at_window_mb": rss_at(span) / 1024,
            "rss_at_end_mb": rss_at(end) / 1024,
            "cpu_first": cpu_between(0, span) / span if span else 0,
            "cpu_last": cpu_between(end - span, end) / span if span else 0,
            "watched_s": end,
        }

    def per_thread(selected):  # "THREAD-NAME/TID": CPU and wake-ups per second, first and last window
        span = min(window, end)
        series = {}
        for r in selected:
            for tid, (thread, cpu, switches) in r.get("threads", {}).items():
                series.setdefault(f"{thread}/{tid}", []).append((r["t"], cpu, switches))

        def rate(points, a, b, field):
            inside = [p for p in points if a <= p[0] <= b]
            if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
                return None
            return (inside[-1][field] - inside[0][field]) / (inside[-1][0] - inside[0][0])

        result = {}
        for key, points in sorted(series.items()):
            result[key] = {"cpu_first": rate(points, 0, span, 1), "cpu_last": rate(points, end - span, end, 1),
                           "wakeups_first": rate(points, 0, span, 2), "wakeups_last": rate(points, end - span, end, 2)}
        return result

    names = sorted({r["name"] for r in rows})
    result = {"all": summarize(rows)}
    for name in names:
        selected = [r for r in rows if r["name"] == name]
        result[name] = summarize(selected)
        result[name]["threads"] = per_thread(selected)
    return result


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--summary":
        print(json.dumps(summary(sys.argv[2], float(sys.argv[3]), float(sys.argv[4])), indent=1))
        return 0
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    watch(sys.argv[1], float(sys.argv[2]), sys.argv[3:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
