"""Logical CPUs, this process's affinity, physical cores and NUMA nodes.

Sources (all under the reader's root):
- /sys/devices/system/cpu/online                       online logical CPUs
- sched_getaffinity (live) or Cpus_allowed_list in /proc/<self>/status (recorded trees)
- /sys/devices/system/cpu/cpuN/topology/{physical_package_id,core_id,thread_siblings_list}
- /sys/devices/system/node/nodeN/cpulist               NUMA nodes
Fallbacks when /sys topology is missing (some containers and ARM VMs): the "physical id" /
"core id" lines of /proc/cpuinfo, then psutil.cpu_count(logical=False) on the live host,
then one core per logical CPU. Every fallback leaves a warning; nothing here raises on a
missing or garbled file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from tf_autopar._text import is_uint

from ._fs import HostFS, Notes
from .cpulist import parse_cpulist
from .model import Core, NumaNode

CPU_DIR = "/sys/devices/system/cpu"
NODE_DIR = "/sys/devices/system/node"


class CpuPlace(NamedTuple):
    """Where one logical CPU sits, as the kernel reports it."""

    package: int
    core_id: int
    siblings: tuple[int, ...] = ()  # thread_siblings_list, () when unknown


def read_cpulist_file(fs: HostFS, host_path: str, notes: Notes) -> tuple[int, ...] | None:
    """A cpulist file's CPUs; None (with a warning if it exists but is garbled) otherwise."""
    text = fs.read(host_path)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        notes.warn(f"{fs.path(host_path)}: {exc}; ignoring this file")
        return None


def online_cpus(fs: HostFS, notes: Notes) -> tuple[int, ...] | None:
    cpus = read_cpulist_file(fs, f"{CPU_DIR}/online", notes)
    if cpus is None:
        # No sysfs: count cpuN directories, then processors in /proc/cpuinfo.
        ids = sorted(int(m.group(1)) for n in fs.listdir(CPU_DIR) if (m := re.fullmatch(r"cpu([0-9]+)", n)))
        if ids:
            notes.warn(f"{fs.path(CPU_DIR + '/online')} missing or unreadable; using the cpuN directories")
            return tuple(ids)
        procs = cpuinfo_processors(fs)
        if procs:
            notes.warn(f"{fs.path(CPU_DIR + '/online')} missing; using the processors listed in /proc/cpuinfo")
            return tuple(sorted(procs))
        return None
    return cpus or None


def threads_affinity(fs: HostFS) -> tuple[int, ...] | None:
    """The union of the masks of the live process's threads (/proc/<pid>/task); None for a
    recorded tree, or when they cannot be listed or read.

    What the limits watch follows (topology/limits.py), not the main thread's mask alone:
    libraries bind the thread that calls them. On an OpenMP build the plan's KMP_AFFINITY=compact
    binds the main thread to one CPU at its first eager op; OpenVINO with CPU pinning (its default
    under the LATENCY hint) binds the calling thread to one CPU for each inference (read from
    another thread during MobileNetV2 calls: one CPU in 187 of 197 looks). The watch, reading the
    main thread, took either for "the affinity mask went from CPUs 0-1 to 0", re-planned every
    served bucket (a routed MobileNetV2 call beside OpenVINO by hand: 9.7 ms against 3.9) and
    asked for a restart, while every other thread kept both CPUs. What an operator changes under
    a running process (a cgroup cpuset, ``taskset -a -p``) moves every thread. Detection at start
    keeps the calling thread's mask (``process_affinity``): there a mask set on the main thread is
    the user's choice, inherited by the threads TensorFlow starts next."""
    if not fs.live:
        return None
    try:
        tids = os.listdir(f"{fs.proc_self}/task")
    except OSError:
        return None
    union: set[int] = set()
    for tid in tids:
        try:
            union.update(os.sched_getaffinity(int(tid)))
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
    return tuple(sorted(union)) or None


def process_affinity(fs: HostFS, notes: Notes) -> tuple[int, ...] | None:
    """CPUs this process may run on: sched_getaffinity live, Cpus_allowed_list otherwise."""
    if fs.live and hasattr(os, "sched_getaffinity"):
        try:
            return tuple(sorted(os.sched_getaffinity(fs.pid or 0)))
        except ProcessLookupError:
            raise ValueError(f"no process with pid {fs.pid}") from None
        except OSError as exc:
            notes.warn(f"sched_getaffinity failed ({exc}); reading Cpus_allowed_list instead")
    status_path = f"{fs.proc_self}/status"
    text = fs.read(status_path)
    if text is None:
        if fs.pid is not None and fs.live:
            raise ValueError(f"no process with pid {fs.pid}")
        return None
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            try:
                return parse_cpulist(line.split(":", 1)[1]) or None
            except ValueError as exc:
                notes.warn(f"{fs.path(status_path)}: Cpus_allowed_list: {exc}; ignoring it")
                return None
    notes.warn(f"{fs.path(status_path)} has no Cpus_allowed_list line")
    return None


def _read_int(fs: HostFS, host_path: str) -> int | None:
    text = fs.read(host_path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def cpu_places(fs: HostFS, cpus: Iterable[int], notes: Notes) -> dict[int, CpuPlace]:
    """Package/core/siblings of each CPU whose sysfs topology files are readable.

    CPUs whose files are missing or garbled are left out (the caller falls back for them).
    SMT siblings share package and core, so once a CPU is read its siblings are not: this
    halves the files read on SMT hosts (detection time is dominated by these opens).
    A package id of -1 (reported by some ARM firmware) is taken as socket 0.
    """
    wanted = list(cpus)
    places: dict[int, CpuPlace] = {}
    garbled: list[str] = []
    for cpu in wanted:
        if cpu in places:
            continue
        base = f"{CPU_DIR}/cpu{cpu}/topology"
        package = _read_int(fs, f"{base}/physical_package_id")
        core = _read_int(fs, f"{base}/core_id")
        if package is None or core is None:
            if fs.exists(base):
                garbled.append(fs.path(base))
            continue
        siblings: tuple[int, ...] = ()
        text = fs.read(f"{base}/thread_siblings_list")
        if text is not None:
            try:
                siblings = parse_cpulist(text)
            except ValueError as exc:
                notes.warn(f"{fs.path(base + '/thread_siblings_list')}: {exc}")
        place = CpuPlace(max(package, 0), core, siblings)
        places[cpu] = place
        if cpu in siblings:
            for sibling in siblings:
                places.setdefault(sibling, place)
    if garbled:
        more = f" (and {len(garbled) - 1} more)" if len(garbled) > 1 else ""
        notes.warn(f"{garbled[0]}{more}: physical_package_id/core_id missing or not a number")
    return {cpu: places[cpu] for cpu in wanted if cpu in places}


_CPUINFO_KEYS = {"processor", "physical id", "core id"}


def cpuinfo_processors(fs: HostFS) -> dict[int, dict[str, str]]:
    """processor -> {"physical id": .., "core id": ..} from /proc/cpuinfo ({} if absent)."""
    text = fs.read("/proc/cpuinfo")
    if not text:
        return {}
    result: dict[int, dict[str, str]] = {}
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            key = key.strip()
            if sep and key in _CPUINFO_KEYS:
                fields[key] = value.strip()
        proc = fields.get("processor", "")
        if is_uint(proc):
            result[int(proc)] = fields
    return result


def places_from_cpuinfo(fs: HostFS, cpus: Iterable[int]) -> dict[int, CpuPlace]:
    """Fallback for CPUs without sysfs topology: x86 /proc/cpuinfo physical id / core id."""
    info = cpuinfo_processors(fs)
    places: dict[int, CpuPlace] = {}
    for cpu in cpus:
        fields = info.get(cpu, {})
        pkg, core = fields.get("physical id", ""), fields.get("core id", "")
        if is_uint(pkg) and is_uint(core):
            places[cpu] = CpuPlace(int(pkg), int(core))
    return places


def numa_nodes(fs: HostFS, notes: Notes) -> dict[int, tuple[int, ...]]:
    """node id -> its CPUs (all of them, not yet intersected with the affinity)."""
    nodes: dict[int, tuple[int, ...]] = {}
    for name in fs.listdir(NODE_DIR):
        m = re.fullmatch(r"node([0-9]+)", name)
        if not m:
            continue
        cpus = read_cpulist_file(fs, f"{NODE_DIR}/{name}/cpulist", notes)
        if cpus is not None:
            nodes[int(m.group(1))] = cpus
    return nodes


def psutil_physical_cores() -> int | None:
    """Physical cores of the live host per psutil (its own /proc/cpuinfo or sysfs logic)."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        return psutil.cpu_count(logical=False)
    except Exception:  # psutil raises assorted errors on exotic hosts
        return None


def group_cores(
    cpus: Sequence[int],
    places: Mapping[int, CpuPlace],
    node_of: Mapping[int, int],
) -> tuple[Core, ...]:
    """Group logical CPUs into physical cores (pure).

    Key: (package, core_id, thread siblings). core_id alone is not unique: it repeats across
    packages, and on multi-die packages (e.g. Cascade Lake-AP) across dies of one package,
    where the sibling list still tells the cores apart. CPUs without a place become
    single-CPU cores.
    """
    groups: dict[tuple, list[int]] = {}
    for cpu in cpus:
        place = places.get(cpu)
        if place is None:
            key: tuple = ("cpu", cpu)
        else:
            key = (place.package, place.core_id, place.siblings)
        groups.setdefault(key, []).append(cpu)
    cores = []
    for key, members in groups.items():
        members.sort()
        if key[0] == "cpu":
            socket, core_id = 0, members[0]
        else:
            socket, core_id = key[0], key[1]
        cores.append(Core(socket=socket, core_id=core_id, cpus=tuple(members), numa_node=node_of.get(members[0], 0)))
    cores.sort(key=lambda c: (c.socket, c.cpus[0]))
    return tuple(cores)


def guess_places(cpus: Sequence[int], host_cpus: int, physical: int | None) -> dict[int, CpuPlace]:
    """Last resort when nothing names the cores: psutil's physical-core count only.

    With host_cpus/physical = k threads per core, assume Linux's usual x86 enumeration,
    where CPU i and i + host_cpus/k are siblings. A guess: the caller warns.
    """
    if not physical or physical >= host_cpus or host_cpus % physical:
        return {}
    return {cpu: CpuPlace(0, cpu % physical) for cpu in cpus}


def numa_of(nodes: Mapping[int, Sequence[int]]) -> dict[int, int]:
    return {cpu: node for node, cpus in nodes.items() for cpu in cpus}


def numa_records(nodes: Mapping[int, Sequence[int]], affinity: Sequence[int]) -> tuple[NumaNode, ...]:
    """NUMA nodes with at least one CPU in the affinity mask (memory-only nodes dropped)."""
    mask = set(affinity)
    out = []
    for node in sorted(nodes):
        inside = tuple(c for c in nodes[node] if c in mask)
        if inside:
            out.append(NumaNode(id=node, cpus=inside))
    return tuple(out)
