"""cgroup CPU limits of this process: CFS bandwidth quota and cpuset.

Where the hierarchies are mounted is decided here only (hierarchy_mounts, from mountinfo):
for this module's quota reader and, through cpu_hierarchies, for the quota groups
``tf-autopar validate --cpu-quota`` creates (measure/cgroup.py), so that the groups land
in the hierarchy whose limits planning reads.

Finding the groups: /proc/<self>/cgroup names the process's group in each hierarchy
("4:cpu,cpuacct:/a/b" for v1, "0::/a/b" for the v2 unified one) and
/proc/<self>/mountinfo says where each hierarchy is mounted and which group the mount
shows at its top (the "root" field: "/" on a host, the container's own group in
containers that bind-mount their group). Hybrid hosts (v1 controllers plus a v2 unified
mount) are read on both sides.

Quota: v2 cpu.max ("max 100000" or "250000 100000"), v1 cpu.cfs_quota_us /
cpu.cfs_period_us (-1 = unlimited). A parent's limit caps all its children, so every
group from the process's own up to the mount's top is read and the tightest
quota/period wins (as loky and Go do).

Budget rule (cpu_budget): budget = max(1, min(len(affinity), floor(quota / period))).

We round DOWN, as uber-go/automaxprocs does, and unlike loky, Go 1.25 and .NET, which
round up. CFS enforces the quota per period for the whole group: a compute-bound pool
with more runnable threads than the quota burns the group's runtime early in each
period and every thread of the process (including the one on the critical path) is
throttled for the rest of it. Measured on a 2-core host: under a 1-CPU quota,
TensorFlow's default pools were throttled in ~85% of CFS periods, 1 inter x 1 intra in
almost none, and 1x1 was 6-8% faster at the median and 10-22% at p99. The fractional
remainder (the .5 of a 2.5-CPU quota) is not wasted: TensorFlow's non-pool threads
(the Python thread, tf.data, the allocator, GC) consume it. The peers that round up
size general worker pools (joblib workers, goroutine schedulers, .NET thread pools)
whose work is mostly not a tight compute kernel, where idle capacity costs more than
occasional throttling. The minimum is 1: a process always gets one CPU's worth.
"""

from __future__ import annotations

import logging
import posixpath
import re
from typing import NamedTuple

from tf_autopar._text import is_uint, uint_or_none

from ._fs import HostFS, Notes
from .cpulist import parse_cpulist
from .model import CpuQuota

log = logging.getLogger("tf_autopar.topology")

CGROUP_BASE = "/sys/fs/cgroup"
UNREAD_QUOTA = (
    "this group's CPU quota is unknown and not applied: the CPU budget may exceed the quota "
    "and the process be throttled"
)


class Mount(NamedTuple):
    root: str  # the group shown at the mount's top ("/" unless a sub-tree is bind-mounted)
    mountpoint: str
    fstype: str  # "cgroup" (v1) or "cgroup2"
    options: frozenset[str]  # super options: v1 controller names live here ("cpu", "cpuacct")


class Hierarchy(NamedTuple):
    """A mounted cgroup hierarchy that can hold the cpu controller."""

    version: int  # 1 or 2
    mountpoint: str  # host path
    controllers: frozenset[str] | None  # v1: the mount's; v2: cgroup.controllers (None if unreadable)


class Membership(NamedTuple):
    hierarchy: int
    controllers: tuple[str, ...]  # () for the v2 unified hierarchy
    path: str


class GroupDir(NamedTuple):
    """One group of this process, mapped to a host directory, with its visible ancestors."""

    version: int
    mountpoint: str  # host path of the mount's top (the highest group we can see)
    leaf: str  # host path of the process's own group

    def chain(self) -> list[str]:
        """The group and its ancestors up to the mount's top, leaf first."""
        dirs = [self.leaf]
        cur = self.leaf
        while cur != self.mountpoint and cur.startswith(self.mountpoint + "/"):
            cur = posixpath.dirname(cur)
            dirs.append(cur)
        return dirs


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """cgroup mounts from /proc/<pid>/mountinfo (other filesystems are skipped)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 1:
            continue
        fstype = tail[0]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(tail[2].split(",")) if len(tail) >= 3 else frozenset()
        mounts.append(Mount(_unescape(fields[3]), _unescape(fields[4]), fstype, options))
    return mounts


def parse_proc_cgroup(text: str) -> list[Membership]:
    out = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not is_uint(parts[0]):
            continue
        controllers = tuple(c for c in parts[1].split(",") if c)
        out.append(Membership(int(parts[0]), controllers, parts[2]))
    return out


def _map(path: str, mount: Mount) -> str | None:
    """Host directory of group `path` under `mount`, or None if the mount does not show it."""
    root = mount.root.rstrip("/")
    if not root:
        rel = path
    elif path == root or path.startswith(root + "/"):
        rel = path[len(root) :]
    else:
        return None
    return posixpath.normpath(mount.mountpoint + "/" + rel.lstrip("/")) if rel.strip("/") else mount.mountpoint


def _best_mount(path: str, mounts: list[Mount]) -> tuple[Mount, str] | None:
    """The mount that shows `path` with the longest root; a mount not showing it as fallback.

    The fallback covers cgroup namespaces whose /proc/self/cgroup paths are relative to a
    namespace root that mountinfo shows differently ("/.." forms): we then read the
    mount's top, which is the container's own group.
    """
    best: tuple[Mount, str] | None = None
    for mount in mounts:
        mapped = _map(path, mount)
        if mapped is not None and (best is None or len(mount.root) > len(best[0].root)):
            best = (mount, mapped)
    if best is None and mounts:
        log.debug("cgroup %s is not under any mount root; using %s", path, mounts[0].mountpoint)
        best = (mounts[0], mounts[0].mountpoint)
    return best


def hierarchy_mounts(mounts: list[Mount], version: int, controller: str) -> list[Mount]:
    """The mounts where `controller`'s groups can live: its v1 hierarchy's, or every v2 (unified) one."""
    if version == 1:
        return [mt for mt in mounts if mt.fstype == "cgroup" and controller in mt.options]
    return [mt for mt in mounts if mt.fstype == "cgroup2"]


def find_groups(memberships: list[Membership], mounts: list[Mount], controller: str) -> list[GroupDir]:
    """This process's group directories relevant to a controller: v1 ones, then the v2 one."""
    groups: list[GroupDir] = []
    for m in memberships:
        if controller in m.controllers:
            version = 1
        elif m.hierarchy == 0 and not m.controllers:
            version = 2
        else:
            continue
        candidates = hierarchy_mounts(mounts, version, controller)
        found = _best_mount(m.path, candidates)
        if found is not None:
            groups.append(GroupDir(version, found[0].mountpoint, found[1]))
    groups.sort(key=lambda g: g.version)
    return groups


def process_groups(fs: HostFS, notes: Notes, controller: str, consequence: str = "") -> list[GroupDir]:
    """This process's groups for `controller`; ``consequence``: what an unreadable /proc file costs
    (default: the CPU limits')."""
    cg_path = f"{fs.proc_self}/cgroup"
    mi_path = f"{fs.proc_self}/mountinfo"
    why = consequence or "no cgroup CPU quota or cpuset is known: the plan may use more CPUs than the container allows"
    cg_text = fs.read(cg_path, notes=notes, consequence=why)
    mi_text = fs.read(mi_path, notes=notes, consequence=why)
    if cg_text is None or mi_text is None:
        missing = cg_path if cg_text is None else mi_path
        log.debug("%s missing: no cgroup limits read", fs.path(missing))
        return []
    return find_groups(parse_proc_cgroup(cg_text), parse_mountinfo(mi_text), controller)


def _v2_controllers(fs: HostFS, mountpoint: str) -> frozenset[str] | None:
    text = fs.read(f"{mountpoint}/cgroup.controllers")
    return frozenset(text.split()) if text is not None else None


def cpu_hierarchies(fs: HostFS) -> list[Hierarchy]:
    """Where the cpu controller's hierarchies are mounted: the v2 mounts, then the v1 ones with cpu.

    From the process's mountinfo, the same mounts find_groups maps its groups under; a
    hierarchy mounted twice (bind mounts) comes at its place under /sys/fs/cgroup first.
    No mountinfo, or none of its mounts a cgroup: the conventional places
    (conventional_cpu_hierarchies).
    """
    text = fs.read(f"{fs.proc_self}/mountinfo")
    mounts = parse_mountinfo(text) if text is not None else []
    if not mounts:
        log.debug(
            "no cgroup mount in %s; trying the usual places under %s", fs.path(f"{fs.proc_self}/mountinfo"), CGROUP_BASE
        )
        return conventional_cpu_hierarchies(fs)
    found: list[Hierarchy] = []
    for version in (2, 1):
        seen: set[str] = set()
        usual = sorted(
            hierarchy_mounts(mounts, version, "cpu"),
            key=lambda mt: not (mt.mountpoint + "/").startswith(CGROUP_BASE + "/"),
        )
        for mt in usual:
            if mt.mountpoint in seen:
                continue
            seen.add(mt.mountpoint)
            controllers = (
                _v2_controllers(fs, mt.mountpoint)
                if version == 2
                else frozenset(o for o in mt.options if o in ("cpu", "cpuacct"))
            )
            found.append(Hierarchy(version, mt.mountpoint, controllers))
    return found


def conventional_cpu_hierarchies(fs: HostFS, base: str = CGROUP_BASE) -> list[Hierarchy]:
    """The cpu hierarchies found at their usual names under `base`, for when mountinfo is silent.

    v2: base or base/unified (hybrid hosts) with a cgroup.controllers file; v1: base/cpu,
    base/cpu,cpuacct or base/cpuacct,cpu with a cpu.cfs_quota_us file (often symlinks to one
    another: callers needing one path resolve them).
    """
    found = [
        Hierarchy(2, d, _v2_controllers(fs, d))
        for d in (base, posixpath.join(base, "unified"))
        if fs.exists(f"{d}/cgroup.controllers")
    ]
    found += [
        Hierarchy(1, posixpath.join(base, name), frozenset(name.split(",")))
        for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")
        if fs.exists(f"{posixpath.join(base, name)}/cpu.cfs_quota_us")
    ]
    return found


def parse_cpu_max(text: str) -> tuple[int | None, int]:
    """v2 cpu.max -> (quota_us or None for "max", period_us). ValueError if garbled."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ValueError(f"expected '<quota|max> <period>', got {text.strip()!r}")
    period_text = parts[1] if len(parts) == 2 else "100000"
    if not is_uint(period_text) or int(period_text) == 0:
        raise ValueError(f"period {period_text!r} is not a positive number")
    period = int(period_text)
    if parts[0] == "max":
        return None, period
    if not is_uint(parts[0]) or int(parts[0]) == 0:
        raise ValueError(f"quota {parts[0]!r} is neither 'max' nor a positive number")
    return int(parts[0]), period


def _v1_quota(fs: HostFS, directory: str, notes: Notes) -> CpuQuota | None:
    qfile, pfile = f"{directory}/cpu.cfs_quota_us", f"{directory}/cpu.cfs_period_us"
    qtext = fs.read(qfile, notes=notes, consequence=UNREAD_QUOTA)
    if qtext is None:
        return None
    q = qtext.strip()
    quota = -1 if q[:1] == "-" and is_uint(q[1:]) else uint_or_none(q)  # -1: no limit
    if quota is None:
        notes.warn(f"{fs.path(qfile)}: {qtext.strip()!r} is not a number; treating this group as unlimited")
        return None
    if quota < 0:  # -1: no limit
        return None
    if quota == 0:
        notes.warn(f"{fs.path(qfile)}: quota 0 is invalid; treating this group as unlimited")
        return None
    ptext = fs.read(pfile, notes=notes, consequence=UNREAD_QUOTA)
    period = uint_or_none((ptext or "").strip()) or 0
    if period <= 0:
        notes.warn(
            f"{fs.path(pfile)}: period {ptext.strip() if ptext else None!r} missing or invalid; "
            f"treating this group as unlimited"
        )
        return None
    return CpuQuota(cpus=quota / period, quota_us=quota, period_us=period, cgroup_version=1, path=fs.path(qfile))


def _v2_quota(fs: HostFS, directory: str, notes: Notes) -> CpuQuota | None:
    path = f"{directory}/cpu.max"
    text = fs.read(path, notes=notes, consequence=UNREAD_QUOTA)
    if text is None:
        return None
    try:
        quota, period = parse_cpu_max(text)
    except ValueError as exc:
        notes.warn(f"{fs.path(path)}: {exc}; treating this group as unlimited")
        return None
    if quota is None:
        return None
    return CpuQuota(cpus=quota / period, quota_us=quota, period_us=period, cgroup_version=2, path=fs.path(path))


def tightest(quotas: list[CpuQuota]) -> CpuQuota | None:
    """The limit with the smallest quota/period (exact comparison, no float ties); first wins ties."""
    best: CpuQuota | None = None
    for q in quotas:
        if best is None or q.quota_us * best.period_us < best.quota_us * q.period_us:
            best = q
    return best


def read_quota(fs: HostFS, notes: Notes, groups: list[GroupDir] | None = None) -> CpuQuota | None:
    """The tightest CFS quota over this process's cpu groups and all their visible ancestors."""
    if groups is None:
        groups = process_groups(fs, notes, "cpu")
    found: list[CpuQuota] = []
    for group in groups:
        reader = _v1_quota if group.version == 1 else _v2_quota
        for directory in group.chain():
            q = reader(fs, directory, notes)
            if q is not None:
                found.append(q)
    return tightest(found)


def read_cpuset(fs: HostFS, notes: Notes, groups: list[GroupDir] | None = None) -> tuple[int, ...] | None:
    """CPUs the process's cpuset allows (None when no cpuset file is visible).

    v2: cpuset.cpus.effective of the nearest group that has it (already the intersection
    with the ancestors). v1: the intersection of cpuset.effective_cpus (or cpuset.cpus)
    over the group and its ancestors. Both kinds present: their intersection.
    """
    if groups is None:
        groups = process_groups(fs, notes, "cpuset")
    result: set[int] | None = None
    for group in groups:
        names = ("cpuset.cpus.effective",) if group.version == 2 else ("cpuset.effective_cpus", "cpuset.cpus")
        for directory in group.chain():
            cpus = None
            for name in names:
                text = fs.read(f"{directory}/{name}")
                if text is None:
                    continue
                try:
                    cpus = parse_cpulist(text)
                except ValueError as exc:
                    notes.warn(f"{fs.path(directory + '/' + name)}: {exc}; ignoring this cpuset")
                break
            if not cpus:  # missing, garbled, or empty (v1: not configured)
                continue
            result = set(cpus) if result is None else result & set(cpus)
            if group.version == 2:
                break
    return tuple(sorted(result)) if result is not None else None


def cpu_budget(affinity_cpus: int, quota: CpuQuota | None) -> int:
    """Whole CPUs the process can keep busy: max(1, min(affinity, floor(quota/period))).

    Rounds down; see the module docstring for why.
    """
    limit = affinity_cpus
    if quota is not None:
        limit = min(limit, quota.quota_us // quota.period_us)
    return max(1, limit)
