"""`tf-autopar inspect`: show the host topology the planner will see (no TensorFlow import)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

BUDGET_RULE = "budget = max(1, min(affinity CPUs, floor(quota / period)))"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="show CPUs, cores, NUMA nodes, cgroup limits (CPU and memory) and the CPU budget of this process",
        description="Show the host topology as tf_autopar reads it: sockets, NUMA nodes, physical "
        "cores, SMT, hybrid core types, last-level cache domains, affinity, cgroup cpuset and quota, the resulting CPU budget, "
        "the cgroups' memory limit and use, CPU model/ISA and "
        "the threading runtime of the installed TensorFlow and AMD's zentf plugin. Never imports TensorFlow.",
    )
    p.add_argument(
        "--root",
        default="/",
        metavar="DIR",
        help="read a recorded /sys + /proc tree under DIR instead of this machine (default: /)",
    )
    p.add_argument("--pid", type=int, default=None, help="describe another process (its affinity and cgroups)")
    p.add_argument("--json", action="store_true", help="print JSON: Topology.to_dict() plus derived fields")
    p.set_defaults(func=run)


def report(root: str = "/", pid: int | None = None) -> dict[str, Any]:
    """Topology.to_dict() plus the fields a reader wants spelled out."""
    from tf_autopar.planning.zentf import enabled as zentf_enabled
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
        zentf_on=zentf_enabled(os.environ),
        tf_runtime={
            "runtime": runtime.runtime,
            "evidence": runtime.evidence,
            "package_dir": runtime.package_dir,
            "distribution": runtime.distribution,
        },
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
    per_socket = ", ".join(f"socket {s}: {sum(1 for c in d['cores'] if c['socket'] == s)} cores" for s in sockets)
    row("Sockets", f"{len(sockets)} ({per_socket})")
    nodes = "; ".join(f"node {n['id']}: CPUs {format_cpulist(n['cpus'])}" for n in d["numa_nodes"])
    row("NUMA nodes", f"{len(d['numa_nodes'])} ({nodes})")
    smt = f"SMT {d['threads_per_core']}" if d["smt"] else "no SMT"
    row("Cores", f"{d['physical_cores']} physical, {d['threads_per_core']} thread(s)/core ({smt})")
    for label, text in structure_rows(d):
        row(label, text)
    row("Logical", f"{d['logical_cpus']} usable of {d['host_cpus']} online on the host")
    row("Affinity", d["affinity_list"])
    row("Cpuset", d["cpuset_list"] if d["cpuset_list"] is not None else "none restricting the host")
    q = d["quota"]
    if q:
        row(
            "Quota",
            f"{q['cpus']:g} CPUs ({q['quota_us']}/{q['period_us']} us, cgroup v{q['cgroup_version']}) from {q['path']}",
        )
    else:
        row("Quota", "none (no CFS bandwidth limit on this process's cgroups or their ancestors)")
    quota_part = f"floor({q['cpus']:g})" if q else "no quota"
    row("Budget", f"{d['cpu_budget']} CPU(s) = max(1, min({d['logical_cpus']} affinity, {quota_part}))  [rounds down]")
    for label, text in memory_rows(d.get("memory")):
        row(label, text)
    rt = d["tf_runtime"]
    dist = f" [{rt['distribution']}]" if rt.get("distribution") else ""
    row("TensorFlow", f"{rt['runtime']}{dist}: {rt['evidence']}")
    z = d.get("zentf")
    row(
        "zentf", _zentf_line(z, d.get("zentf_on", False)) if z else "not installed (AMD's ZenDNN plugin for TensorFlow)"
    )
    if d["warnings"]:
        row("Warnings", d["warnings"][0])
        for w in d["warnings"][1:]:
            row("", w)
    else:
        row("Warnings", "none")
    return "\n".join(lines)


def _zentf_line(z: dict[str, Any], on: bool) -> str:
    """The zentf row: the plugin TensorFlow will load, and whether its kernels (and so their OpenMP
    teams, which are then planned) will run."""
    from tf_autopar.planning.zentf import ENABLE
    from tf_autopar.topology.model import ZentfPlugin

    state = (
        f"on ({ENABLE}): ZenDNN's OpenMP teams are planned"
        if on
        else f"off: its kernels run only with {ENABLE}=1; nothing zentf-specific is planned"
    )
    return f"{ZentfPlugin(**z).describe()}; {state} (docs/openmp.md)"


def memory_rows(m: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The "Memory" rows: the binding cgroup memory limit, its use and room, soft limit, pressure."""
    from tf_autopar.planning.memory_budget import format_bytes

    if not m:
        return [("Memory", "no memory cgroup visible: builds are sized against the host's memory")]
    level = {0: "the process's own group", 1: "its parent group"}.get(m["level"], f"the group {m['level']} levels up")
    used = format_bytes(m["usage_bytes"]) if m.get("usage_bytes") is not None else "unknown"
    if m.get("usage_bytes") is not None and m.get("reclaimable_bytes"):
        used += f" ({format_bytes(m['reclaimable_bytes'])} of it reclaimable page cache)"
    peak = f", peak {format_bytes(m['peak_bytes'])}" if m.get("peak_bytes") is not None else ""
    host = f"host RAM {format_bytes(m['host_bytes'])}" if m.get("host_bytes") else "host RAM unknown"
    if m.get("limit_bytes") is not None:
        left = format_bytes(max(0, m["limit_bytes"] - m["usage_bytes"])) if m.get("usage_bytes") is not None else "?"
        rows = [
            (
                "Memory",
                f"limit {format_bytes(m['limit_bytes'])} (cgroup v{m['cgroup_version']}, {level}) from {m['path']}",
            ),
            ("", f"{used} used{peak}, {left} left under it; {host}"),
        ]
    else:
        rows = [
            (
                "Memory",
                f"no limit (none below the host's RAM on this process's cgroups or their ancestors); "
                f"cgroup v{m['cgroup_version']} group uses {used}{peak}; {host}",
            )
        ]
    if m.get("high_bytes") is not None:
        rows.append(("", f"soft limit {format_bytes(m['high_bytes'])} from {m['high_path']}"))
    if m.get("psi_some_avg10") is not None:
        rows.append(("", f"pressure: some task stalled {m['psi_some_avg10']:g}% of the last 10 s (memory.pressure)"))
    return rows


MAX_DOMAINS_SHOWN = 8


def structure_rows(d: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Core types" and "Caches" rows: which cores are performance or efficiency cores, and the
    last-level cache domains (the first MAX_DOMAINS_SHOWN listed; --json has them all)."""
    from tf_autopar.topology.cpulist import format_cpulist

    rows: list[tuple[str, str]] = []
    if d.get("hybrid"):
        parts = []
        for kind in ("performance", "efficiency"):
            cores = [c for c in d["cores"] if c["kind"] == kind]
            caps = sorted({c["capacity"] for c in cores if c.get("capacity") is not None})
            cap = f", capacity {'/'.join(map(str, caps))}" if caps else ""
            parts.append(f"{len(cores)} {kind} (CPUs {format_cpulist(x for c in cores for x in c['cpus'])}{cap})")
        rows.append(("Core types", "; ".join(parts) + f"  [{d['core_kinds_from']}]"))
        rows.append(
            ("", "latency plans use the performance cores; throughput plans give efficiency cores streams of their own")
        )
    else:
        rows.append(("Core types", "one (no hybrid core lists, no differing cpu_capacity)"))
    domains = d.get("cache_domains") or []
    if not domains:
        rows.append(("Caches", "no last-level cache information (cpuN/cache missing): planned by NUMA node"))
        return rows
    sizes = {dom["id"]: sum(1 for c in d["cores"] if c["cache_domain"] == dom["id"]) for dom in domains}
    counts = sorted(set(sizes.values()))
    size = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    levels = "/".join(f"L{lv}" for lv in sorted({dom["level"] for dom in domains}))
    per_socket = {}
    for c in d["cores"]:
        if c["cache_domain"] is not None:
            per_socket.setdefault(c["socket"], set()).add(c["cache_domain"])
    spread = ", ".join(f"socket {s}: {len(v)}" for s, v in sorted(per_socket.items()))
    noun = "domain" if len(domains) == 1 else "domains"
    rows.append(("Caches", f"{len(domains)} {levels} {noun} of {size} cores ({spread})"))
    for dom in domains[:MAX_DOMAINS_SHOWN]:
        nodes = sorted({c["numa_node"] for c in d["cores"] if c["cache_domain"] == dom["id"]})
        kernel = f", cache id {dom['cache_id']}" if dom.get("cache_id") is not None else ""
        rows.append(
            (
                "",
                f"L{dom['level']} {dom['id']}: CPUs {format_cpulist(dom['cpus'])} "
                f"({sizes[dom['id']]} cores, NUMA node{'s' if len(nodes) > 1 else ''} "
                f"{format_cpulist(nodes)}{kernel})",
            )
        )
    if len(domains) > MAX_DOMAINS_SHOWN:
        rows.append(("", f"... {len(domains) - MAX_DOMAINS_SHOWN} more (--json lists every domain)"))
    return rows


def run(args: argparse.Namespace) -> int:
    d = report(args.root, args.pid)
    if args.json:
        print(json.dumps(d, indent=2, sort_keys=True))
    else:
        print(format_report(d))
    return 0
