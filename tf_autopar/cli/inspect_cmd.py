"""`tf-autopar inspect`: show the host topology the planner will see (no TensorFlow import)."""
from __future__ import annotations

import argparse
import json
from typing import Any

BUDGET_RULE = "budget = max(1, min(affinity CPUs, floor(quota / period)))"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="show CPUs, cores, NUMA nodes, cgroup limits and the CPU budget of this process",
        description="Show the host topology as tf_autopar reads it: sockets, NUMA nodes, physical "
        "cores, SMT, affinity, cgroup cpuset and quota, the resulting CPU budget, CPU model/ISA and "
        "the threading runtime of the installed TensorFlow. Never imports TensorFlow.",
    )
    p.add_argument("--root", default="/", metavar="DIR",
                   help="read a recorded /sys + /proc tree under DIR instead of this machine (default: /)")
    p.add_argument("--pid", type=int, default=None, help="describe another process (its affinity and cgroups)")
    p.add_argument("--json", action="store_true", help="print JSON: Topology.to_dict() plus derived fields")
    p.set_defaults(func=run)


def report(root: str = "/", pid: int | None = None) -> dict[str, Any]:
    """Topology.to_dict() plus the fields a reader wants spelled out."""
    from tf_autopar.topology import detect_topology, detect_tf_runtime
    from tf_autopar.topology.cpulist import format_cpulist

    topo = detect_topology(root, pid=pid)
    runtime = detect_tf_runtime()
    d = topo.to_dict()
    d.update(
        root=root,
        smt=topo.threads_per_core > 1,
        affinity_list=format_cpulist(topo.affinity),
        cpuset_list=format_cpulist(topo.cpuset) if topo.cpuset is not None else None,
        budget_rule=BUDGET_RULE,
        tf_runtime={"runtime": runtime.runtime, "evidence": runtime.evidence,
                    "package_dir": runtime.package_dir, "distribution": runtime.distribution},
    )
    return d


def format_report(d: dict[str, Any]) -> str:
    from tf_autopar.topology.cpulist import format_cpulist

    lines = [f"Host topology (root {d['root']})"]

    def row(label: str, text: str) -> None:
        lines.append(f"  {label:<12}{text}")

    cpu = d["cpu"]
    row("CPU", f"{cpu['model']} ({cpu['vendor']})")
    row("ISA", " ".join(cpu["isa"]) or "none of note")
    sockets = d["sockets"]
    per_socket = ", ".join(
        f"socket {s}: {sum(1 for c in d['cores'] if c['socket'] == s)} cores" for s in sockets
    )
    row("Sockets", f"{len(sockets)} ({per_socket})")
    nodes = "; ".join(f"node {n['id']}: CPUs {format_cpulist(n['cpus'])}" for n in d["numa_nodes"])
    row("NUMA nodes", f"{len(d['numa_nodes'])} ({nodes})")
    smt = f"SMT {d['threads_per_core']}" if d["smt"] else "no SMT"
    row("Cores", f"{d['physical_cores']} physical, {d['threads_per_core']} thread(s)/core ({smt})")
    row("Logical", f"{d['logical_cpus']} usable of {d['host_cpus']} online on the host")
    row("Affinity", d["affinity_list"])
    row("Cpuset", d["cpuset_list"] if d["cpuset_list"] is not None else "none restricting the host")
    q = d["quota"]
    if q:
        row("Quota", f"{q['cpus']:g} CPUs ({q['quota_us']}/{q['period_us']} us, cgroup v{q['cgroup_version']}) "
                     f"from {q['path']}")
    else:
        row("Quota", "none (no CFS bandwidth limit on this process's cgroups or their ancestors)")
    quota_part = f"floor({q['cpus']:g})" if q else "no quota"
    row("Budget", f"{d['cpu_budget']} CPU(s) = max(1, min({d['logical_cpus']} affinity, {quota_part}))  [rounds down]")
    rt = d["tf_runtime"]
    dist = f" [{rt['distribution']}]" if rt.get("distribution") else ""
    row("TensorFlow", f"{rt['runtime']}{dist}: {rt['evidence']}")
    if d["warnings"]:
        row("Warnings", d["warnings"][0])
        for w in d["warnings"][1:]:
            row("", w)
    else:
        row("Warnings", "none")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    d = report(args.root, args.pid)
    if args.json:
        print(json.dumps(d, indent=2, sort_keys=True))
    else:
        print(format_report(d))
    return 0
