#!/usr/bin/env python3
"""Writes a sim scenario for the scale benchmark: CPUS pCPUs, DOMAINS domains of VCPUS vCPUs each,
every vCPU busy (more vCPUs than pCPUs wait for a CPU, as on a consolidated host).

    make_scenario.py CPUS DOMAINS VCPUS OUT.json [--speed=realtime|max] [--burst-cycles=N] [--load=F]

Domain 0 is dom0; the others are guests named guest-N, half PV and half HVM. Every domain runs
the same kind of work: a process in libc, its kernel (xen-syms' map stands in for one, as in
bench/data/throughput.json) and the hypervisor on its behalf.
"""
import argparse
import json

XEN_SYMS = "/usr/lib/debug/boot/xen-syms-4.17-amd64"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def domain(index, vcpus, load=1.0):
    pid = 1000 + index
    return {
        "id": index,
        "name": "dom0" if index == 0 else f"guest-{index}",
        "type": "pv" if index % 2 == 0 else "hvm",
        "vcpus": vcpus,
        "load": load,
        "kernel": {"system_map": XEN_SYMS + ".map"},
        "processes": [{"pid": pid, "comm": "work", "mappings": [{"path": LIBC, "start": "0x7f0000000000"}]}],
        "workload": {
            "user": {"share": 50, "auto": {"count": 8, "process": pid, "image": LIBC}},
            "kernel": {"share": 35, "auto": {"count": 8}},
            "hypervisor": {"share": 15, "functions": [{"name": "do_mmu_update", "weight": 3},
                                                     {"name": "pv_hypercall", "weight": 2}]},
        },
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cpus", type=int)
    parser.add_argument("domains", type=int)
    parser.add_argument("vcpus", type=int)
    parser.add_argument("out")
    parser.add_argument("--speed", default="realtime", choices=["realtime", "max"])
    parser.add_argument("--burst-cycles", type=int, default=3_000_000)
    parser.add_argument("--load", type=float, default=1.0,
                        help="each vCPU's chance to want a CPU in a slice (below 1: it blocks and is woken)")
    args = parser.parse_args()
    scenario = {
        "hvprof_scenario": 1,
        "name": f"scale-{args.cpus}cpu-{args.domains}dom",
        "description": f"{args.domains} busy domains of {args.vcpus} vCPUs on {args.cpus} CPUs (bench/scale).",
        "seed": 1,
        "machine": {"cpus": args.cpus, "pmu": "intel-arch-v4", "mhz": 3000, "slice_us": 1000,
                    "burst_cycles": args.burst_cycles},
        "run": {"speed": args.speed},
        "hypervisor": {"image": XEN_SYMS, "idle": {"halted": 0.5, "functions": [{"name": "mwait_idle", "weight": 1}]}},
        "domains": [domain(i, args.vcpus, args.load) for i in range(args.domains)],
    }
    with open(args.out, "w") as out:
        json.dump(scenario, out)


if __name__ == "__main__":
    main()
