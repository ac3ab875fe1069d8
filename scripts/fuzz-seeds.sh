#!/usr/bin/env bash
# Makes the fuzzers' seed inputs: small ELF images compiled here (DWARF 4 and 5, inlining, a
# shared object, stripped, and cut short), the committed corpora of fuzz/corpus/, the example
# scenarios, tracefs formats, and records, rings, archives and op sequences written here.
# scripts/run-fuzz.sh starts each fuzzer from them; CTest's "fuzz corpus replay" tests run every
# one through each fuzz target's code once (fuzz/replay_main.cpp), in every build.
#   scripts/fuzz-seeds.sh OUT_DIR      (one directory per fuzz target under OUT_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=$(realpath -m "${1:?usage: scripts/fuzz-seeds.sh OUT_DIR}")
targets=(elf_image_fuzzer kernel_symbols_fuzzer session_files_fuzzer published_profile_fuzzer
         ring_reader_fuzzer scenario_fuzzer engine_ops_fuzzer archive_reader_fuzzer jit_symbols_fuzzer
         perf_records_fuzzer tracepoint_fuzzer xen_trace_fuzzer status_records_fuzzer elf_info_fuzzer redact_urls_fuzzer
         quantities_fuzzer push_state_fuzzer)
cc=$(command -v clang || command -v gcc) || { echo "fuzz-seeds: needs clang or gcc" >&2; exit 1; }

# Seeds: small ELF images made here (DWARF 4 and 5, inlining, a shared object, stripped, and
# cut short), and the committed kernel symbol texts.
rm -rf "$seeds"
for target in "${targets[@]}"; do mkdir -p "$seeds/$target"; done
cat > "$seeds/seed.c" <<'EOF'
static inline __attribute__((always_inline)) int twice(int x) { return 2 * x; }
__attribute__((noinline)) int work(int x) { return twice(x) + 1; }
int main(void) { return work(3) == 7 ? 0 : 1; }
EOF
elf_seeds="$seeds/elf_image_fuzzer"
"$cc" -g -O2 -gdwarf-5 -o "$elf_seeds/dwarf5" "$seeds/seed.c"
"$cc" -g -O2 -gdwarf-4 -o "$elf_seeds/dwarf4" "$seeds/seed.c"
"$cc" -g -O2 -fPIC -shared -o "$elf_seeds/shared.so" "$seeds/seed.c"
objcopy --strip-all "$elf_seeds/dwarf5" "$elf_seeds/stripped"
head -c 2000 "$elf_seeds/dwarf5" > "$elf_seeds/truncated"
# What root's hvprof-hv reads of mapped files: the same images, one without a build-id.
cp "$elf_seeds"/* "$seeds/elf_info_fuzzer/"
"$cc" -O2 -Wl,--build-id=none -o "$seeds/elf_info_fuzzer/no-build-id" "$seeds/seed.c"
# Messages that name servers, with and without credentials.
printf '%s' 'https://alice:s3cret@debuginfod.example/ http://plain:8002' > "$seeds/redact_urls_fuzzer/debuginfod-urls"
printf '%s' 'http://a:b@c@host/p@q?x=y#z ftp://@ x:// user@example.com' > "$seeds/redact_urls_fuzzer/odd"
# Durations and times as users type them.
for typed in 60s 1.5m 7d 250ms 12h 100us 5000ns "2026-11-30 14:25" 2026-11-30T14:25:30 14:25 @1796000000 now -2h; do
  printf '%s' "$typed" > "$seeds/quantities_fuzzer/$(printf '%s' "$typed" | tr -c 'A-Za-z0-9.-' '_')"
done
cp fuzz/corpus/kernel_symbols/* "$seeds/kernel_symbols_fuzzer/"
if [ -r /proc/kallsyms ]; then head -n 300 /proc/kallsyms > "$seeds/kernel_symbols_fuzzer/proc-kallsyms"; fi
# A small session (committed), the example scenarios, and rings and op sequences made here.
cp fuzz/corpus/session_files/* "$seeds/session_files_fuzzer/"
# Scheduler tracepoints: a 6.18 kernel's format files, each followed by a raw record's bytes.
for format in tests/linux/fixtures/tracefs/*/format; do
  event=$(basename "$(dirname "$format")")
  { cat "$format"; printf '\0'; head -c 64 /dev/zero; } > "$seeds/tracepoint_fuzzer/$event"
done
cp fuzz/corpus/published/* "$seeds/published_profile_fuzzer/"
cp fuzz/corpus/status_records/* "$seeds/status_records_fuzzer/"
cp fuzz/corpus/push_state/* "$seeds/push_state_fuzzer/"
cp examples/*.json tests/golden/scenario.json fuzz/corpus/scenario/* "$seeds/scenario_fuzzer/"
python3 - "$seeds" <<'PY'
import struct, sys
seeds = sys.argv[1]
# A perf map as Node writes it, and a jitdump (perf's jitdump.h): debug info, two code loads, a
# move and a close.
open(f"{seeds}/jit_symbols_fuzzer/perf-map", "w").write(
    "3f0c2a40 1c0 JS:*hotA /srv/app.js:2:14\n0x3f0c2c00 0x80 LazyCompile:~main /srv/app.js:9\n"
    "7f00aa001000 3c double Hot.hotA(int)\n")
def record(kind, time, body):
    return struct.pack("<IIQ", kind, 16 + len(body), time) + body
def load(time, address, size, name):
    return record(0, time, struct.pack("<IIQQQQ", 1, 1, address, address, size, 0) + name + b"\0" + b"\x90" * size)
dump = struct.pack("<IIIIIIQQ", 0x4A695444, 1, 40, 62, 0, 4242, 1000, 0)
dump += record(2, 1500, struct.pack("<QQQii", 0x10000, 1, 0x10000, 12, 0) + b"/srv/app.js\0")
dump += load(2000, 0x10000, 32, b"JS:*hotA") + load(2100, 0x20000, 16, b"JS:*hotB")
dump += record(1, 3000, struct.pack("<IIQQQQQ", 1, 1, 0x30000, 0x20000, 0x30000, 16, 0)) + record(3, 4000, b"")
open(f"{seeds}/jit_symbols_fuzzer/jitdump", "wb").write(dump)
# perf ring records (perf_event.h) for every sample field and sample_id_all (layout bits 0x83ff):
# a sample with a callchain, a FORK, a COMM, a THROTTLE and a sample earlier than them.
def trailer(time):  # TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER
    return struct.pack("<IIQQQIIQ", 7, 7, time, 42, 0, 0, 0, 42)
def perf(kind, misc, body):
    return struct.pack("<IHH", kind, misc, 8 + len(body)) + body
def perf_sample(time, ip, chain):
    body = struct.pack("<QQIIQQQQIIQ", 42, ip, 7, 7, time, 0, 42, 0, 0, 0, 40000)
    return perf(9, 2, body + struct.pack("<Q", len(chain)) + b"".join(struct.pack("<Q", a) for a in chain))
records = perf_sample(1000, 0x401000, [0xfffffffffffffe00, 0x401000, 0x401100])
records += perf(7, 0, struct.pack("<IIIIQ", 8, 7, 8, 7, 1100) + trailer(1100))
records += perf(3, 0x2000, struct.pack("<II", 8, 8) + b"prog\0\0\0\0" + trailer(1200))
records += perf(5, 0, struct.pack("<QQQ", 1300, 42, 0) + trailer(1300))
records += perf_sample(900, 0x402000, [])
open(f"{seeds}/perf_records_fuzzer/records", "wb").write(struct.pack("<H", 0x83FF) + records)
# A v2 ring of 64 slots (docs/abi.md) holding three samples, one with a two-frame backtrace.
header = struct.pack("<IHHIIIHHII", 0x52505648, 2, 0, 4096, 64, 64, 1, 0, 32, 0).ljust(64, b"\0")
header += struct.pack("<Q", 4).ljust(64, b"\0") + struct.pack("<Q", 0).ljust(64, b"\0")
ring = bytearray(header.ljust(4096, b"\0") + bytes(64 * 64))
def sample(slot, ip, nframes):
    record = struct.pack("<BBBBHHQQQQIIHHIQ", 1, 1, 0, nframes, 0, 0, ip, 1000 + slot, 100000, 0,
                         7, 7, 1, 0, 0, 0)
    ring[4096 + 64 * slot:4096 + 64 * slot + 64] = record
sample(0, 0xffffffff81000000, 0)
sample(1, 0x401000, 2)
ring[4096 + 64 * 2:4096 + 64 * 3] = struct.pack("<BB6xQQ", 3, 2, 0x401100, 0x401200).ljust(64, b"\0")
sample(3, 0xffff82d040200000, 0)
open(f"{seeds}/ring_reader_fuzzer/v2", "wb").write(bytes(ring))
# A legacy ring of 32 records with head 3, behind a v2-sized first half.
legacy = struct.pack("<IIIIQQQQ", 3, 0, 32, 0, 0, 0, 0, 0)[:48]
for ip, mode in ((0x401000, 0), (0xffffffff81000000, 1), (0xffff82d040200000, 2)):
    legacy += struct.pack("<QBB6x", ip, mode, 0)
open(f"{seeds}/ring_reader_fuzzer/legacy", "wb").write(bytes(len(legacy)) + legacy)
# One CPU's Xen trace buffer (one page: cons, prod, then records as Xen 4.17 writes them): a
# runstate change, a wake-up and its change, a lost-records record; then a window cut short.
def xrec(event, tsc, words):
    return struct.pack("<IQ", event | (len(words) << 28) | (1 << 31), tsc) + b"".join(struct.pack("<I", w) for w in words)
records = xrec(0x00021101, 1000, [0x00010000]) + xrec(0x00028004, 2000, [2, 1]) + xrec(0x00021211, 2000, [0x00020001])
records += xrec(0x0001f001, 3000, [5, 0x00000001, 2500, 0])
tbuf = struct.pack("<II", 0, len(records)) + records
open(f"{seeds}/xen_trace_fuzzer/buffer", "wb").write(tbuf.ljust(4096, b"\0") + records[:-3])
# Profiling ops by dom0 in the usual order: init, set_passive 1, reserve, counter, setup,
# enable_virq, start, a sample, stop.
def op(caller, index, arg=b""):
    return bytes([0, caller, index, len(arg) // 64, len(arg) % 64]) + arg
ops = op(0, 0, bytes(16)) + op(0, 4, struct.pack("<HHiiiQ", 1, 0, 0, 0, 0, 0)) + op(0, 5)
ops += op(0, 6, struct.pack("<QQQQQQQQ", 0, 100000, 1, 0x3c, 1, 1, 0, 0)) + op(0, 7) + op(0, 8) + op(0, 9)
ops += bytes([7, 0, 1, 0, 0, 1, 0, 1]) + struct.pack("<Q", 0xffffffff81000000) + bytes([0, 0]) + op(0, 10)
open(f"{seeds}/engine_ops_fuzzer/session", "wb").write(ops)
# Archives: one as `hvprof archive` lays it out (pax), and hostile ones: a name with "..", an
# absolute name, a symbolic link, a hard link, a huge size.
import io, json, tarfile
def tar(name, members, fmt=tarfile.PAX_FORMAT):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    open(f"{seeds}/archive_reader_fuzzer/{name}", "wb").write(out.getvalue())
def member(path, data=b"", kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(path)
    info.type, info.linkname, info.size = kind, link, len(data)
    return info, data
manifest = json.dumps({"hvprof_archive": 1, "session_directory": "/var/lib/hvprof/samples/x", "files": []}).encode()
good = [member("hvprof-archive.json", manifest), member("session/session.json", b"{}"),
        member(".build-id/ab/cdef", b"\x7fELF"), member(".build-id/ab/cdef.debug", b"\x7fELF"),
        member("by-path/proc/kallsyms", b"ffffffff81000000 T _stext\n")]
tar("good", good)
tar("ustar", good, tarfile.USTAR_FORMAT)
tar("dotdot", good + [member("session/../../escaped", b"x")])
tar("absolute", good + [member("/tmp/escaped", b"x")])
tar("symlink", good + [member("link", kind=tarfile.SYMTYPE, link="/tmp"), member("link/escaped", b"x")])
tar("hardlink", good + [member("hard", kind=tarfile.LNKTYPE, link="/etc/passwd")])
# An archive bomb: a sparse entry of 1 MiB of holes around one byte (pax's GNU sparse 0.1).
bomb, _ = member("session/samples.hvs", b"x")
bomb.pax_headers = {"GNU.sparse.size": str(1 << 20), "GNU.sparse.numblocks": "1",
                    "GNU.sparse.offset": str((1 << 20) - 1), "GNU.sparse.numbytes": "1"}
tar("sparse", good + [(bomb, b"x")])
PY

echo "fuzz-seeds: $(find "$seeds" -type f | wc -l) seeds in $seeds"
