"""detect_topology: assemble a Topology from the readers (cpus, cgroup, memory, cpuinfo, tf_runtime)."""

from __future__ import annotations

import logging
import os

import tf_autopar.topology.caches as caches
import tf_autopar.topology.cgroup as cgroup
import tf_autopar.topology.cpus as cpus
import tf_autopar.topology.memory as memory
from ._fs import HostFS, Notes
from .cpuinfo import read_cpuinfo
from .cpulist import format_cpulist
from .model import Core, Topology
from .tf_runtime import detect_tf_runtime
from .zentf import detect_zentf

log = logging.getLogger("tf_autopar.topology")


def detect_topology(root: str = "/", *, pid: int | None = None, cpu_details: bool = True) -> Topology:
    """What this process (or `pid`) may use of the host's CPUs. Never imports TensorFlow.

    root: "/" for the running system, or a recorded tree (tests/fixtures/hosts/<name>)
    holding the same sys/ and proc/ files. pid: read /proc/<pid> instead of /proc/self.
    Missing or garbled files give warnings (Topology.warnings, and logged) and a safe
    fallback, never an exception; a root that is not a directory raises FileNotFoundError.
    The threading runtime and the zentf plugin always describe the TensorFlow importable here,
    whatever the root.
    cpu_details=False skips py-cpuinfo on a cache miss (about 1 s) and parses /proc/cpuinfo:
    planning needs no ISA details, and enable() must stay cheap on a program's first start.
    """
    if not os.path.isdir(root):
        raise FileNotFoundError(f"topology root {root!r} is not a directory")
    fs = HostFS(root, pid)
    notes = Notes()

    online = cpus.online_cpus(fs, notes)
    mask = cpus.process_affinity(fs, notes)
    cpuset = cgroup.read_cpuset(fs, notes)
    quota = cgroup.read_quota(fs, notes)
    mem = memory.read_memory(fs, notes)

    if online is None:
        fallback = mask or (tuple(range(os.cpu_count() or 1)) if fs.live else (0,))
        notes.warn(f"cannot tell the online CPUs (no {fs.path(cpus.CPU_DIR)}); assuming {format_cpulist(fallback)}")
        online = fallback
    affinity = _effective_affinity(online, mask, cpuset, fs, notes)
    restricting = cpuset if cpuset is not None and set(online) - set(cpuset) else None

    places = cpus.cpu_places(fs, affinity, notes)
    missing = [c for c in affinity if c not in places]
    if missing:
        places.update(cpus.places_from_cpuinfo(fs, missing))
        still = [c for c in missing if c not in places]
        where = fs.path(f"{cpus.CPU_DIR}/cpu{missing[0]}/topology")
        if not still:
            notes.warn(
                f"no sysfs core topology for CPUs {format_cpulist(missing)} ({where} missing); "
                f"used the physical id/core id lines of /proc/cpuinfo"
            )
        else:
            physical = cpus.psutil_physical_cores() if fs.live else None
            guessed = cpus.guess_places(still, len(online), physical)
            places.update(guessed)
            how = (
                f"psutil reports {physical} physical cores for {len(online)} CPUs: guessed siblings i, i+{physical}"
                if guessed
                else "counting each logical CPU as a physical core"
            )
            notes.warn(
                f"no core topology for CPUs {format_cpulist(still)} ({where} missing, nothing in /proc/cpuinfo); {how}"
            )

    node_cpus = cpus.numa_nodes(fs, notes)
    if not node_cpus:
        log.debug("no NUMA information under %s; one node", fs.path(cpus.NODE_DIR))
        node_cpus = {0: tuple(online)}
    else:
        unplaced = set(affinity) - {c for members in node_cpus.values() for c in members}
        if unplaced:
            notes.warn(
                f"CPUs {format_cpulist(unplaced)} are in no NUMA node's cpulist; counted in node {min(node_cpus)}"
            )
            first = min(node_cpus)
            node_cpus[first] = tuple(sorted(set(node_cpus[first]) | unplaced))
    cores = cpus.group_cores(affinity, places, cpus.numa_of(node_cpus))
    domains = caches.last_level_caches(fs, affinity, notes)
    kinds = caches.core_kinds(fs, affinity, {c: core.cpus for core in cores for c in core.cpus}, notes)
    cores = _annotate(cores, {c: d.id for d in domains for c in d.cpus}, kinds)

    runtime = detect_tf_runtime().runtime
    zentf = detect_zentf(tf_installed=runtime != "absent")
    return Topology(
        host_cpus=len(online),
        affinity=affinity,
        cores=cores,
        numa_nodes=cpus.numa_records(node_cpus, affinity),
        cpu_budget=cgroup.cpu_budget(len(affinity), quota),
        quota=quota,
        cpuset=restricting,
        cpu=read_cpuinfo(fs, notes, allow_slow=cpu_details),
        threading_runtime=runtime,
        warnings=tuple(notes.warnings),
        cache_domains=domains,
        core_kinds_from=kinds.source,
        memory=mem,
        zentf=zentf,
    )


def _annotate(cores: tuple[Core, ...], domain_of: dict[int, int], kinds: caches.CoreKinds) -> tuple[Core, ...]:
    """Each core with its cache domain, and its type and capacity on hybrid hosts (by its first CPU)."""
    if not domain_of and not kinds.source:
        return cores
    return tuple(
        Core(
            socket=c.socket,
            core_id=c.core_id,
            cpus=c.cpus,
            numa_node=c.numa_node,
            cache_domain=domain_of.get(c.cpus[0]),
            kind=kinds.kind.get(c.cpus[0], ""),
            capacity=kinds.capacity.get(c.cpus[0]),
        )
        for c in cores
    )


def _effective_affinity(
    online: tuple[int, ...],
    mask: tuple[int, ...] | None,
    cpuset: tuple[int, ...] | None,
    fs: HostFS,
    notes: Notes,
) -> tuple[int, ...]:
    """affinity mask & cpuset & online CPUs; falls back (with a warning) if that is empty.

    Live, the kernel already applies the cpuset to sched_getaffinity; for recorded trees
    the intersection does it.
    """
    if mask is None:
        notes.warn(
            f"cannot read this process's affinity ({fs.path(fs.proc_self + '/status')}); assuming all online CPUs"
        )
        mask = online
    allowed = set(mask) & set(online)
    if cpuset is not None:
        allowed &= set(cpuset)
    if not allowed:
        notes.warn(
            f"affinity {format_cpulist(mask)}, cpuset {format_cpulist(cpuset or ())} and online CPUs "
            f"{format_cpulist(online)} have no CPU in common; using the affinity mask alone"
        )
        allowed = set(mask)
    return tuple(sorted(allowed))
