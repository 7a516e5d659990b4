"""Last-level cache domains and core types (hybrid hosts), read from sysfs.

Cache domains: /sys/devices/system/cpu/cpuN/cache/indexK/{level,type,shared_cpu_list,id}.
Each CPU's last-level cache is its highest-level data or unified cache (instruction caches
never hold a pool's data); the CPUs of its shared_cpu_list form one domain. An AMD EPYC
core complex (CCX) is one such domain (8-12 per socket); an Intel server socket is one, even
under sub-NUMA clustering, where its NUMA nodes split the socket and the L3 spans them (the
planner then cuts inside node and domain both). A CPU whose list is read covers every CPU in
it, so a host reads one list per domain, not one per CPU.

Core types: x86 hybrid parts (Alder Lake and later) register one PMU per core type:
/sys/devices/cpu_core/cpus lists the performance cores, /sys/devices/cpu_atom/cpus (and
cpu_lowpower, the SoC tile's cores) the efficiency ones. Elsewhere (Arm big.LITTLE) the
kernel's relative capacity /sys/devices/system/cpu/cpuN/cpu_capacity (1024 = the fastest)
tells them apart: cores within PERFORMANCE_CAPACITY_SHARE of the fastest count as
performance cores, so a favoured core's turbo bin (1024 against 1000) does not make a
homogeneous host hybrid.

Missing files (containers, VMs, older recordings) mean "nothing known" and no warning;
a garbled file gives one warning naming it and is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from tf_autopar._text import is_uint, shown

from ._fs import HostFS, Notes
from .cpulist import format_cpulist, parse_cpulist
from .model import EFFICIENCY, PERFORMANCE, CacheDomain

CPU_DIR = "/sys/devices/system/cpu"
PMU_PERFORMANCE = ("/sys/devices/cpu_core/cpus",)
PMU_EFFICIENCY = ("/sys/devices/cpu_atom/cpus", "/sys/devices/cpu_lowpower/cpus")
# A core whose cpu_capacity is at least this share of the fastest counts as a performance core.
# Arm's big and LITTLE cores differ by 2-4x (1024 against 250-450); cores of one type differ by
# a few percent at most (turbo bins, favoured cores).
PERFORMANCE_CAPACITY_SHARE = 0.8


class CoreKinds(NamedTuple):
    """The type of each CPU of a hybrid host, and where it was read."""

    kind: dict[int, str]  # CPU -> PERFORMANCE or EFFICIENCY
    capacity: dict[int, int]  # CPU -> cpu_capacity, where the kernel gives it
    source: str  # "" when the host is not hybrid (or nothing tells)


def _read_uint(fs: HostFS, host_path: str, notes: Notes, what: str) -> int | None:
    text = fs.read(host_path)
    if text is None:
        return None
    value = text.strip()
    if not is_uint(value) or len(value) > 9:
        notes.warn(f"{fs.path(host_path)}: {what} {shown(value)} is not a number; ignoring the host's {what}s")
        raise ValueError(value)
    return int(value)


def last_level_caches(fs: HostFS, cpus: Sequence[int], notes: Notes) -> tuple[CacheDomain, ...]:
    """The last-level cache domains of ``cpus`` (each domain's CPUs limited to them).

    () when no CPU has cache information. A garbled file is ignored with one warning (its CPUs
    still join the domain a neighbour's list names); CPUs no list names are in no domain, and
    when only some are, one warning says so.
    """
    wanted = list(cpus)
    mask = set(wanted)
    found: list[tuple[int, int | None, tuple[int, ...]]] = []  # (level, kernel id, CPUs)
    covered: set[int] = set()
    missing: list[int] = []
    garbled: list[str] = []
    for cpu in wanted:
        if cpu in covered:
            continue
        base = f"{CPU_DIR}/cpu{cpu}/cache"
        best: tuple[int, str] | None = None  # (level, index dir)
        for name in fs.listdir(base):
            if not re.fullmatch(r"index\d+", name):
                continue
            kind = (fs.read(f"{base}/{name}/type") or "").strip()
            level_text = (fs.read(f"{base}/{name}/level") or "").strip()
            if not kind and not level_text:
                continue  # an empty directory: nothing said
            if not is_uint(level_text) or len(level_text) > 2:
                garbled.append(fs.path(f"{base}/{name}/level"))
                continue
            if kind == "Instruction":
                continue
            if best is None or int(level_text) > best[0]:
                best = (int(level_text), name)
        if best is None:
            missing.append(cpu)
            continue
        where = f"{base}/{best[1]}"
        text = fs.read(f"{where}/shared_cpu_list")
        try:
            shared = parse_cpulist(text) if text is not None else ()
        except ValueError as exc:
            garbled.append(f"{fs.path(where + '/shared_cpu_list')} ({exc})")
            shared = ()
        if cpu not in shared:
            if text is not None and shared:
                garbled.append(f"{fs.path(where + '/shared_cpu_list')} (does not list CPU {cpu} itself)")
            missing.append(cpu)
            continue
        id_text = (fs.read(f"{where}/id") or "").strip()
        cache_id = int(id_text) if is_uint(id_text) and len(id_text) <= 9 else None
        members = tuple(c for c in shared if c in mask and c not in covered)
        covered.update(members)
        found.append((best[0], cache_id, members))
    uncovered = [c for c in wanted if c not in covered]
    if garbled:
        more = f" (and {len(garbled) - 1} more)" if len(garbled) > 1 else ""
        left = f"; CPUs {format_cpulist(uncovered)} are in no cache domain" if uncovered else ""
        notes.warn(f"{garbled[0]}{more}: unreadable cache description, ignored{left}")
    if not found:
        return ()
    if uncovered and not garbled:
        notes.warn(
            f"no last-level cache information for CPUs {format_cpulist(uncovered)} "
            f"({fs.path(CPU_DIR + '/cpu' + str(uncovered[0]) + '/cache')}); they are in no cache domain"
        )
    found.sort(key=lambda f: f[2][0])
    return tuple(
        CacheDomain(id=i, level=level, cpus=members, cache_id=cache_id)
        for i, (level, cache_id, members) in enumerate(found)
    )


def core_kinds(fs: HostFS, cpus: Sequence[int], core_of: Mapping[int, Sequence[int]], notes: Notes) -> CoreKinds:
    """Performance and efficiency CPUs, from the x86 hybrid PMUs, else from cpu_capacity.

    ``core_of``: CPU -> the CPUs of its physical core (SMT siblings share a type, so one
    capacity file per core is read). A host with one type only gives an empty source.
    """
    wanted = list(cpus)
    kinds = _pmu_kinds(fs, wanted, notes)
    if kinds is not None:
        return kinds
    capacity: dict[int, int] = {}
    try:
        for cpu in wanted:
            if cpu in capacity:
                continue
            value = _read_uint(fs, f"{CPU_DIR}/cpu{cpu}/cpu_capacity", notes, "cpu_capacity")
            if value is None:
                if not capacity:
                    return CoreKinds({}, {}, "")  # the kernel gives every CPU's capacity or none
                continue
            for sibling in core_of.get(cpu, (cpu,)):
                capacity[sibling] = value
    except ValueError:
        return CoreKinds({}, {}, "")
    mask = set(wanted)
    capacity = {c: v for c, v in capacity.items() if c in mask}
    if not capacity or max(capacity.values()) <= 0:
        return CoreKinds({}, {}, "")
    fastest = max(capacity.values())
    kind = {c: PERFORMANCE if v >= PERFORMANCE_CAPACITY_SHARE * fastest else EFFICIENCY for c, v in capacity.items()}
    if len(set(kind.values())) < 2:
        return CoreKinds({}, {}, "")  # one type: the host is planned as before
    unknown = [c for c in wanted if c not in kind]
    if unknown:
        notes.warn(
            f"no cpu_capacity for CPUs {format_cpulist(unknown)} ({fs.path(CPU_DIR)}/cpuN/cpu_capacity); "
            "counted as performance cores"
        )
        kind.update({c: PERFORMANCE for c in unknown})
    return CoreKinds(
        kind,
        capacity,
        f"{CPU_DIR}/cpuN/cpu_capacity (performance: at least "
        f"{PERFORMANCE_CAPACITY_SHARE:.0%} of the fastest, {fastest})",
    )


def _pmu_list(fs: HostFS, paths: Iterable[str], notes: Notes) -> tuple[tuple[int, ...], list[str]] | None:
    cpus: set[int] = set()
    seen: list[str] = []
    for path in paths:
        text = fs.read(path)
        if text is None:
            continue
        try:
            cpus.update(parse_cpulist(text))
        except ValueError as exc:
            notes.warn(f"{fs.path(path)}: {exc}; core types read from cpu_capacity instead")
            return None
        seen.append(path)
    return tuple(sorted(cpus)), seen


def _pmu_kinds(fs: HostFS, cpus: Sequence[int], notes: Notes) -> CoreKinds | None:
    """x86 hybrid: both a performance and an efficiency PMU list; None when absent or garbled."""
    perf = _pmu_list(fs, PMU_PERFORMANCE, notes)
    if perf is None or not perf[1]:
        return None
    eff = _pmu_list(fs, PMU_EFFICIENCY, notes)
    if eff is None or not eff[1]:
        return None
    mask = set(cpus)
    kind = {c: PERFORMANCE for c in perf[0] if c in mask}
    kind.update({c: EFFICIENCY for c in eff[0] if c in mask and c not in kind})
    if len(set(kind.values())) < 2:
        return CoreKinds({}, {}, "")  # one type in this process's mask: nothing to tell apart
    unknown = [c for c in cpus if c not in kind]
    if unknown:
        notes.warn(
            f"CPUs {format_cpulist(unknown)} are in no core-type list ({', '.join(perf[1] + eff[1])}); "
            "counted as performance cores"
        )
        kind.update({c: PERFORMANCE for c in unknown})
    return CoreKinds(kind, {}, " and ".join(perf[1] + eff[1]))
