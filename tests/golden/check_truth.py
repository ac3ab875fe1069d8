#!/usr/bin/env python3
"""Checks the golden session against the simulator's ground truth, before any output is compared.

    check_truth.py TRUTH_JSON SESSION HVPROF_REPORT

The golden outputs (expected/*.out) are made by the code under test, so a change that moves every
count would regenerate them wrong and still compare equal. This holds the session they are made
from to the truth hvprof-hv wrote (--ground-truth): for each event, the samples and the idle
samples are the overflows the simulated PMU raised; per domain and mode, the samples are the
truth's; and the 15 largest rows of `hvprof-report -l` (by image and symbol) have the truth's
counts exactly. Image names follow the report's rules (docs/report-formats.md): the hypervisor's
samples in dom0 and the idle loop under xen-syms' own name, a passive domain's under
domainN-xen, domainN-kernel and domainN-apps (no symbols), dom0's kernel as vmlinux, dom0's
user code under its file's name.

Exit status 0 when all hold; 1 with each difference on stderr.
"""
import collections
import json
import os
import subprocess
import sys

IDLE_DOMAIN = 32767


def image_name(row, xen_image):
    domain, mode = row["domain"], row["mode"]
    if domain == IDLE_DOMAIN or (domain == 0 and mode == "hypervisor"):
        return os.path.basename(xen_image)
    if domain == 0:
        return "vmlinux" if mode == "kernel" else os.path.basename(row["image"])
    return {"hypervisor": f"domain{domain}-xen", "kernel": f"domain{domain}-kernel", "user": f"domain{domain}-apps"}[mode]


def main():
    truth_path, session, report_bin = sys.argv[1:4]
    truth = json.load(open(truth_path))
    out = subprocess.run([report_bin, session, "-l", "-t", "0", "--include-idle", "--format=json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"check_truth: hvprof-report failed ({out.returncode}): {out.stderr}", file=sys.stderr)
        return 1
    report = json.loads(out.stdout)
    problems = []
    if report["losses"]:
        problems.append(f"the session lost samples: {report['losses']}")
    xen_image = next(r["image"] for r in truth["rows"] if r["domain"] == IDLE_DOMAIN)

    checked_rows = 0
    for k, event in enumerate(report["events"]):
        counter = event["counters"][0]
        total = sum(r["overflows"][counter] for r in truth["rows"])
        idle = sum(r["overflows"][counter] for r in truth["rows"] if r["domain"] == IDLE_DOMAIN)
        # --include-idle: the idle loop's samples are in the event's samples, and counted apart.
        reported_idle = report["idle"]["events"][k]["idle"]
        if event["samples"] != total or reported_idle != idle:
            problems.append(f"{event['name']}: {event['samples']} samples of which {reported_idle} idle, "
                            f"the truth {total} of which {idle}")
        # Rows by image and symbol.
        expected = collections.Counter()
        for r in truth["rows"]:
            symbol = "(no symbols)" if r["domain"] not in (0, IDLE_DOMAIN) and r["mode"] == "user" else r["function"]
            expected[(image_name(r, xen_image), symbol)] += r["overflows"][counter]
        got = collections.Counter()
        for row in report["rows"]:
            got[(row["image"], row["symbol"])] += int(row["samples"][k])
        for key, count in expected.most_common(15):
            checked_rows += 1
            if got.get(key, 0) != count:
                problems.append(f"{event['name']}: {key[0]} {key[1]}: {got.get(key, 0)} samples, the truth {count}")
        # Per domain and mode, for the first event (the domain table's).
        if k == 0:
            by_mode = collections.Counter()
            for r in truth["rows"]:
                by_mode[(r["domain"], r["mode"])] += r["overflows"][counter]
            for domain in report["domains"]:
                for mode, count in domain["samples"].items():
                    if by_mode.get((domain["id"], mode), 0) != count:
                        problems.append(f"dom{domain['id']} {mode}: {count} samples, the truth "
                                        f"{by_mode.get((domain['id'], mode), 0)}")
    for problem in problems:
        print(f"check_truth: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_truth: the golden session agrees with the ground truth ({len(report['events'])} events, "
              f"{checked_rows} rows, every domain and mode)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
