#!/usr/bin/env python3
"""The README's demo excerpt, from a real run.

Runs what scripts/demo.sh runs (`hvprof run --platform=sim`, the default scenario, 2 s) with the
programs of a build directory, and puts the head of its output into README.md between the
demo-output markers. The simulated machine is deterministic (its seed is the scenario's), so the
same programs print the same report; only the session's directory and time stamp change, and
those are written as scripts/demo.sh names them.

  scripts/readme-demo.py [BUILD_DIR]            rewrite README.md's excerpt (default BUILD_DIR: build)
  scripts/readme-demo.py --check [BUILD_DIR]    compare instead: exit 1 with the difference if the
                                                README is stale (CI runs this as a test)

Exit 77 (skipped) without a readable /proc/kallsyms (the scenario's dom0 kernel then falls back to
another symbol source). On a host whose kernel or images (the scenario's xen-syms and libraries,
whose symbols place its functions) are not the ones the excerpt was made with (the block records
them as a fingerprint), --check compares the header only: everything above the table, which the
simulator draws from the scenario alone.
"""
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BEGIN = "<!-- demo-output: made by scripts/readme-demo.py from a real run; CI checks it -->"
END = "<!-- /demo-output -->"
ROWS = 12  # table rows shown


def kallsyms_readable():
    try:
        with open("/proc/kallsyms") as f:
            for line in f:
                return not line.startswith("0000000000000000")
    except OSError:
        return False
    return False


def host_fingerprint():
    """The kernel release and the images of the default scenario: what else the output depends on."""
    with open(os.path.join(ROOT, "examples", "default.json")) as f:
        scenario = json.loads("".join(line for line in f if not line.lstrip().startswith("//")))
    paths = {scenario["hypervisor"]["image"]}
    for domain in scenario["domains"]:
        for process in domain.get("processes", []):
            paths.update(m["path"] for m in process.get("mappings", []))
    digest = hashlib.sha256(os.uname().release.encode())
    for path in sorted(paths):
        try:
            with open(path, "rb") as image:
                digest.update(path.encode() + hashlib.sha256(image.read()).digest())
        except OSError:
            digest.update(path.encode() + b" missing")
    return digest.hexdigest()[:16]


def excerpt(build):
    hvprof = os.path.join(build, "bin", "hvprof")
    with tempfile.TemporaryDirectory() as sessions:
        run = subprocess.run([hvprof, "run", "--platform=sim", "--duration=2s",
                              f"--session-dir={sessions}"],
                             capture_output=True, text=True, env=dict(os.environ, NO_COLOR="1"))
        if run.returncode != 0:
            sys.exit(f"readme-demo: hvprof run failed ({run.returncode}):\n{run.stderr}")
        out = run.stdout.replace(sessions, "build/demo/sessions")
    out = re.sub(r"run-\d{8}-\d{6}", "run-YYYYmmdd-HHMMSS", out)
    lines = out.rstrip("\n").split("\n")
    # The header and the first rows of the table (its rule is the line of dashes), then the
    # line that says where the session is.
    rule = next((i for i, line in enumerate(lines) if line and set(line) == {"-"}), None)
    if rule is None:
        sys.exit("readme-demo: hvprof run printed no table:\n" + out)
    shown = lines[:rule + 1 + ROWS]
    hidden = len(lines) - 1 - len(shown)
    shown.append(f"... ({hidden} more lines)")
    shown.append(lines[-1])
    return "\n".join(shown) + "\n"


def block(text, fingerprint):
    return f"{BEGIN}\n<!-- host {fingerprint} -->\n```text\n$ scripts/demo.sh\n...\n{text}```\n{END}"


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    build = os.path.abspath(args[0] if args else os.path.join(ROOT, "build"))
    if not kallsyms_readable():
        print("readme-demo: skipped: /proc/kallsyms is not readable here (run as root), so dom0's kernel "
              "symbols would not be the excerpt's")
        sys.exit(77)
    with open(README) as f:
        readme = f.read()
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        sys.exit(f"readme-demo: README.md has no '{BEGIN}' ... '{END}' block")
    current = readme[start:end + len(END)]
    fingerprint = host_fingerprint()
    made_on = re.search(r"<!-- host ([0-9a-f]+) -->", current)
    if check and made_on and made_on.group(1) != fingerprint:
        # Another kernel or other images: the rows (symbols of this host's images) differ, but the
        # header does not (the platform, the event, the time, the buffers, and the samples by domain
        # and mode, which the simulator draws from the scenario's shares alone): compare that.
        made = excerpt(build)
        def header(text):
            return text[:text.find("\nCPU_CLK_UNHALTED:")] if "\nCPU_CLK_UNHALTED:" in text else text
        now_header = header(made)
        readme_text = current[current.find("...\n", current.find("$ scripts/demo.sh")) + 4:]
        readme_header = header(readme_text)
        if now_header == readme_header:
            print(f"readme-demo: README.md's excerpt was made on another host (fingerprint {made_on.group(1)}, "
                  f"here {fingerprint}); its header, which does not depend on the host, is what the demo prints")
            return
        diff = difflib.unified_diff(readme_header.splitlines(), now_header.splitlines(), "README.md", "demo output",
                                    lineterm="")
        print("\n".join(diff))
        sys.exit("readme-demo: the header of README.md's excerpt (which does not depend on the host) is not what the "
                 "demo prints now: run scripts/readme-demo.py and commit README.md")
    wanted = block(excerpt(build), fingerprint)
    if current == wanted:
        print("readme-demo: README.md's excerpt is what the demo prints")
        return
    if check:
        diff = difflib.unified_diff(current.splitlines(), wanted.splitlines(), "README.md", "demo output",
                                    lineterm="")
        print("\n".join(diff))
        sys.exit("readme-demo: README.md's excerpt is not what the demo prints now: run scripts/readme-demo.py "
                 "and commit README.md")
    with open(README, "w") as f:
        f.write(readme[:start] + wanted + readme[end + len(END):])
    print("readme-demo: README.md's excerpt rewritten")


if __name__ == "__main__":
    main()
