#!/usr/bin/env bash
# Tests hvprof as a user installs it: builds the .deb with CPack from a build directory, checks
# the man pages it holds, installs it with apt-get, runs the demo (scripts/demo.sh) from the
# installed programs only, checks the bash completion, removes the package and checks that its
# files are gone. As root (it installs a package); the package is removed again however the test
# ends, and a package already installed is refused, not replaced.
#   scripts/test-package.sh [BUILD_DIR]      (default build/; only what is out of date is built)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

build=${1:-build}
fail() { echo "test-package: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root: it installs and removes the hvprof package; run it with sudo"
for tool in apt-get dpkg dpkg-query cpack python3 man; do
  command -v "$tool" >/dev/null || fail "$tool is missing: this test needs Debian's apt and the packages of scripts/install-deps.sh"
done
[ -f "$build/CMakeCache.txt" ] || fail "$build is not a build directory: configure one first (scripts/run-tests.sh, or cmake -S . -B $build -G Ninja)"
[ -f /usr/share/bash-completion/bash_completion ] || fail "bash-completion is missing: run scripts/install-deps.sh"
if [ "$(dpkg-query -W -f='${db:Status-Status}' hvprof 2>/dev/null || true)" = installed ]; then
  fail "hvprof is installed already ($(dpkg-query -W -f='${Version}' hvprof)); this test installs and removes its own: apt-get remove hvprof first"
fi

work=$(mktemp -d /tmp/hvprof-package.XXXXXX)
installed=0
cleanup() {
  local status=$?
  # An hvprofd left behind by a failed run: its pid is in the session's lock.
  local pid
  pid=$(head -n 1 "$work/sessions/lock" 2>/dev/null || true)
  if [[ $pid =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = hvprofd ]; then kill "$pid" || true; fi
  if [ "$installed" = 1 ]; then
    echo "test-package: removing the hvprof package" >&2
    apt-get purge -y -q hvprof >/dev/null 2>&1 || dpkg --purge hvprof >/dev/null 2>&1 || true
  fi
  if [ "$status" -ne 0 ]; then
    echo "test-package: failed; logs in $work" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP  # through cleanup

# 1. The package, from what is built (cmake --build first, so a build error shows as one).
cmake --build "$build" >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; fail "building $build failed"; }
rm -rf "$build/package"
(cd "$build" && cpack -G DEB) >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log" >&2; fail "cpack failed"; }
debs=("$build"/package/hvprof_*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "cpack wrote no single hvprof_*.deb in $build/package"
deb=$(realpath "${debs[0]}")
echo "test-package: built $(basename "$deb") ($(du -k "$deb" | cut -f1) KB) after $(( $(date +%s) - start ))s"
dpkg-deb --field "$deb" Package Version Architecture Depends | sed 's/^/  /'
dpkg-deb --field "$deb" Depends | grep -q libboost-program-options || fail "Depends lacks the libraries (CPACK_DEBIAN_PACKAGE_SHLIBDEPS)"

# 2. Install it as users do. Everything below runs the installed programs only.
installed=1
apt-get install -y -q "$deb" >"$work/apt-install.log" 2>&1 || { cat "$work/apt-install.log" >&2; fail "apt-get install failed"; }
mapfile -t files < <(dpkg -L hvprof | while read -r f; do [ -d "$f" ] || echo "$f"; done)
programs=(hvprof hvprof-report hvprof-symbolize hvprof-hv hvprofd hvprof-push)
for program in "${programs[@]}"; do
  [ -x "/usr/bin/$program" ] || fail "/usr/bin/$program is not installed"
  file "/usr/bin/$program" | grep -q ', stripped' || fail "/usr/bin/$program is not stripped"
  "/usr/bin/$program" --version | grep -qx "$program (hvprof) [0-9.]*" || fail "$program --version does not say '$program (hvprof) VERSION'"
done
# Stripping keeps the USDT probes (.note.stapsdt, docs/probes.md).
for program in hvprofd hvprof-hv; do
  readelf -n "/usr/bin/$program" | grep -q 'Provider: hvprof' || fail "/usr/bin/$program lost its USDT probes"
done
for unit in hvprofd hvprof-hv hvprof-push; do
  f=/usr/lib/systemd/system/$unit.service
  [ -f "$f" ] || fail "$f is not installed"
  grep -q "^ExecStart=/usr/bin/" "$f" || fail "$f does not run the programs in /usr/bin"
  if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify "$f" >"$work/verify.log" 2>&1 || { cat "$work/verify.log" >&2; fail "systemd-analyze verify $f failed"; }
  fi
done

# 3. Man pages: one per program, hvprof-archive and hvprof-run; groff renders each without a warning, and
# every long option of the program's --help is in its page.
for program in "${programs[@]}" hvprof-archive hvprof-run; do
  help=("/usr/bin/$program" --help)
  [ "$program" = hvprof-archive ] && help=(/usr/bin/hvprof archive --help)
  [ "$program" = hvprof-run ] && help=(/usr/bin/hvprof run --help)
  page=$(ls /usr/share/man/man[18]/"$program".[18].gz 2>/dev/null | head -n 1)
  [ -n "$page" ] || fail "no man page for $program in /usr/share/man"
  # Hyphenation off, wide lines: each option stays whole in the text.
  MANWIDTH=200 MANROFFOPT=-rHY=0 man --warnings=w,all -l "$page" >"$work/$program.man" 2>"$work/$program.man-warnings" ||
    fail "man -l $page failed: $(cat "$work/$program.man-warnings")"
  [ -s "$work/$program.man-warnings" ] && fail "groff warns about $page: $(head -n 5 "$work/$program.man-warnings")"
  grep -q "^NAME" "$work/$program.man" && grep -A1 "^NAME" "$work/$program.man" | grep -q "$program - " ||
    fail "$page has no NAME line"
  missing=()
  while read -r option; do
    grep -qF -- "$option" "$work/$program.man" || missing+=("$option")
  done < <("${help[@]}" | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)
  [ ${#missing[@]} -eq 0 ] || fail "$page lacks these options of ${help[*]}: ${missing[*]}"
  # Laid out, not run together: every usage line is in SYNOPSIS, and every example command
  # (a line indented by two spaces in the blocks that --help heads "Examples:" or names a
  # workflow) is a line of its own in the page.
  trimmed=$(sed -E 's/^ +//; s/ +$//' "$work/$program.man")
  while read -r usage; do
    grep -qxF -- "$usage" <<<"$trimmed" || fail "$page does not lay out the usage line '$usage' on a line of its own"
  done < <("${help[@]}" | sed -nE 's/^(Usage|  or): +//p')
  while read -r example; do
    grep -qxF -- "$example" <<<"$trimmed" || fail "$page runs the example '$example' into other text"
  done < <("${help[@]}" | awk '/^(Examples|The Xenoprof workflow|One workload)/ {on = 1; next}
                                 /^[^ ]/ {on = 0}
                                 on && /^  [^ ]/ {sub(/^  /, ""); print}')
done
echo "test-package: installed; man pages render, list every option and lay out usage and examples"

# 4. The demo (scripts/demo.sh) from the installed programs: `hvprof run --platform=sim` starts the
# installed hvprof-hv on the installed default scenario (found by name beside /usr/bin), profiles
# it through the installed hvprofd and ends it; hvprof-report reports.
scenario=/usr/share/hvprof/scenarios/default.json
[ -f "$scenario" ] || fail "$scenario is not installed"
mkdir -p "$work/sessions"
mapfile -t domains < <(python3 -c 'import json,sys
for d in json.load(open(sys.argv[1]))["domains"]: print(d["id"])' "$scenario")
/usr/bin/hvprof run --platform=sim --session-dir="$work/sessions" --duration=1s --json="$work/summary.json" \
  >"$work/run.log" 2>&1 || { cat "$work/run.log" >&2; fail "the installed hvprof run failed"; }
grep -q "scenarios/default.json" "$work/sessions/hvprof-hv.log" ||
  fail "the installed hvprof-hv did not run the installed default scenario (log in $work/sessions)"
session=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["session"])' "$work/summary.json")
/usr/bin/hvprof-report --session-dir="$work/sessions" "$session" --by-domain -t 2 --no-header >"$work/report.txt" ||
  fail "the installed hvprof-report failed"
/usr/bin/hvprof-report --session-dir="$work/sessions" "$session" --format=json -o "$work/report.json" ||
  fail "the installed hvprof-report --format=json failed"
python3 - "$work/report.json" "${domains[@]}" <<'EOF' || fail "the report lacks samples of the scenario's domains (report in $work)"
import json, sys
report = json.load(open(sys.argv[1]))
counts = {str(d["id"]): sum(d["samples"].values()) for d in report["domains"]}
empty = [d for d in sys.argv[2:] if counts.get(d, 0) == 0]
if empty:
    sys.exit(f"no samples from domains {empty}: {counts}")
print("test-package: samples by domain:", ", ".join(f"{d} {counts[d]}" for d in sys.argv[2:]))
EOF

# 5. Bash completion, as bash-completion loads it for each program.
complete_line() {  # PROGRAM WORDS... : what completing the last word offers, one a line
  bash -c 'source /usr/share/bash-completion/bash_completion
    _completion_loader "$1"
    COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    spec=$(complete -p "$1") || exit 1
    function=$(sed -E "s/.* -F ([^ ]+) .*/\1/" <<<"$spec")
    "$function" "$1" "${!#}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf "%s\n" "${COMPREPLY[@]}"' complete "$@" 2>>"$work/completion.log"  # compopt: not in a real completion
}
for program in "${programs[@]}"; do
  bash -n "/usr/share/bash-completion/completions/$program" || fail "the completion file of $program does not parse"
done
# offers WANTED PROGRAM WORDS...: completing the line offers WANTED. What was offered is taken
# whole before it is searched (a `grep -q` that stops reading early would make the completion's
# writer fail with SIGPIPE under pipefail), and said when WANTED is not among it.
offers() {
  local wanted=$1 offered
  shift
  offered=$(complete_line "$@") || fail "completing '$*' failed (status $?; $work/completion.log)"
  grep -qxF -- "$wanted" <<<"$offered" ||
    fail "completing '$*' does not offer $wanted; it offers: $(tr '\n' ' ' <<<"$offered")"
}
offers --start-daemon hvprof --start-d
offers record hvprof rec
offers --baseline= hvprof record --base
offers xen hvprof --platform ''
offers --by-domain hvprof-report --by
offers "$(basename "$session")" hvprof-report --session-dir="$work/sessions" ''
offers --scenario= hvprof-hv --scen
echo "test-package: the demo ran from the installed programs; completion works"

# 6. Removal leaves none of the package's files.
apt-get remove -y -q hvprof >"$work/apt-remove.log" 2>&1 || { cat "$work/apt-remove.log" >&2; fail "apt-get remove failed"; }
installed=0
state=$(dpkg-query -W -f='${db:Status-Status}' hvprof 2>/dev/null || true)
[ "$state" = not-installed ] || [ -z "$state" ] || fail "after apt-get remove, dpkg says hvprof is '$state'"
left=()
for f in "${files[@]}"; do [ -e "$f" ] && left+=("$f"); done
[ ${#left[@]} -eq 0 ] || fail "apt-get remove left ${left[*]}"
echo "test-package: passed in $(( $(date +%s) - start ))s (${#files[@]} files installed and removed)"
