"""This process's CPU limits as they stand now, and what a change in them means for its topology.

Why: a container's CPU limit can change under a running server (Kubernetes 1.33 resizes a pod's
``cpu.max`` in place; an operator rewrites ``cpu.cfs_quota_us`` or a cpuset). What was planned at
start was planned for the old limits. ``LimitsReader.read`` takes the limits again through the
readers detection uses (cgroup.read_quota, cgroup.read_cpuset; the mask: cpus.threads_affinity),
with the process's group directories found once, so one check is a few reads of files of a few
bytes, a listing of the process's threads and one sched_getaffinity per thread (84 us with 81
threads on the 2-core EPYC). ``what_changed`` and ``follow`` are pure: they say what changed, in
a user's words, and give the topology under the new limits when only the quota moved (the cores
are the same); when the CPUs themselves changed, the caller detects the host again.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from . import cgroup, cpus
from ._fs import HostFS, Notes
from .cpulist import format_cpulist
from .model import CpuQuota, Topology


@dataclass(frozen=True)
class Limits:
    """The CPU limits of this process at one moment."""

    quota: CpuQuota | None  # the tightest CFS quota over its groups (None: unlimited or unknown)
    cpuset: tuple[int, ...] | None  # the cgroup cpuset (None: no cpuset file visible)
    affinity: tuple[int, ...]  # the process's affinity mask: live, the union of its threads' masks

    @property
    def budget(self) -> int:
        """Whole CPUs the process can keep busy under these limits (cgroup.cpu_budget's rule)."""
        return cgroup.cpu_budget(len(self.affinity), self.quota)

    def quota_words(self) -> str:
        """The quota as a user would say it: "1.5 CPUs", "no quota"."""
        if self.quota is None:
            return "no quota"
        n = self.quota.cpus
        return f"{n:g} CPU" + ("" if n == 1 else "s")


class LimitsReader:
    """Reads the limits of this process (or ``pid``) again and again; the groups are found once."""

    def __init__(self, fs: HostFS | None = None) -> None:
        self.fs = fs or HostFS("/", os.getpid())  # /proc/<pid>: the process, not the calling thread
        notes = Notes()
        self.cpu_groups = cgroup.process_groups(self.fs, notes, "cpu")
        self.cpuset_groups = cgroup.process_groups(self.fs, notes, "cpuset")

    def read(self) -> Limits:
        notes = Notes()  # warnings are logged once per process by Notes; the limits are what matter here
        quota = cgroup.read_quota(self.fs, notes, self.cpu_groups)
        cpuset = cgroup.read_cpuset(self.fs, notes, self.cpuset_groups)
        mask = cpus.threads_affinity(self.fs)  # the threads' union: cpus.py says why
        if not mask:
            try:
                mask = cpus.process_affinity(self.fs, notes)
            except ValueError:  # the process is gone (a reader made for another pid)
                mask = None
        return Limits(quota, cpuset, mask or ())


def _same_quota(a: CpuQuota | None, b: CpuQuota | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.quota_us * b.period_us == b.quota_us * a.period_us


def what_changed(old: Limits, new: Limits) -> str:
    """What changed between two readings, in a user's words ("" when nothing that planning reads did).

    A quota rewritten with another period but the same CPUs is no change."""
    parts = []
    if not _same_quota(old.quota, new.quota):
        parts.append(f"the CPU quota went from {old.quota_words()} to {new.quota_words()}")
    if old.cpuset != new.cpuset and new.cpuset is not None:
        parts.append(f"the cpuset went from {format_cpulist(old.cpuset or ())} to {format_cpulist(new.cpuset)}")
    if old.affinity != new.affinity and new.affinity:
        parts.append(
            f"the affinity mask went from CPUs {format_cpulist(old.affinity)} to {format_cpulist(new.affinity)}"
        )
    return "; ".join(parts)


def follow(topology: Topology, old: Limits, new: Limits) -> Topology | None:
    """``topology`` under the new limits when only the quota changed (same CPUs, new quota and
    budget); None when the CPUs changed, for the caller to detect the host again."""
    if old.cpuset != new.cpuset or old.affinity != new.affinity:
        return None
    return dataclasses.replace(
        topology, quota=new.quota, cpu_budget=cgroup.cpu_budget(len(topology.affinity), new.quota)
    )
