"""Real CFS bandwidth (CPU quota) groups for the container case, cgroup v1 and v2.

Why real groups: a quota is what containers impose, TensorFlow ignores it when sizing
its pools, and the kernel counts every period a group was throttled in (``cpu.stat``
nr_throttled): a noise-free signal of oversubscription that step times alone hide.

One group per child process (fresh counters, no deltas): created before the child
starts, the child joins it before exec (so everything it spawns is inside too), read
after it exits, then emptied and removed. Needs root (or a delegated, writable
controller); otherwise ``CgroupUnavailable`` names what is missing.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass

from tf_autopar.topology import cgroup as topology_cgroup
from tf_autopar.topology._fs import HostFS

log = logging.getLogger("tf_autopar.measure")

PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel's lower bound for cfs_quota_us / cpu.max
GROUP_PREFIX = "tf_autopar_validate_"


class CgroupUnavailable(OSError):
    """No writable CPU controller: the message says which one was looked for and why it failed."""


@dataclass(frozen=True)
class CpuController:
    version: int  # 1 or 2
    path: str  # the hierarchy directory groups are created in


@dataclass(frozen=True)
class CpuStat:
    nr_periods: int
    nr_throttled: int
    throttled_us: float
    raw: dict[str, int]

    @property
    def throttled_fraction(self) -> float | None:
        return self.nr_throttled / self.nr_periods if self.nr_periods else None

    def to_dict(self) -> dict:
        return {
            "nr_periods": self.nr_periods,
            "nr_throttled": self.nr_throttled,
            "throttled_us": self.throttled_us,
            "throttled_fraction": self.throttled_fraction,
            "raw": dict(self.raw),
        }


def parse_cpu_stat(text: str, version: int) -> CpuStat:
    """cpu.stat: v1 has throttled_time in ns, v2 throttled_usec."""
    raw: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isascii() and parts[1].lstrip("-").isdigit():
            raw[parts[0]] = int(parts[1])
    if version == 1:
        throttled_us = raw.get("throttled_time", 0) / 1000.0
    else:
        throttled_us = float(raw.get("throttled_usec", 0))
    return CpuStat(raw.get("nr_periods", 0), raw.get("nr_throttled", 0), throttled_us, raw)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


def find_cpu_controller(root: str | None = None, *, fs: HostFS | None = None) -> CpuController:
    """The hierarchy to create quota groups in: v2 if it has the cpu controller, else v1 ``cpu``.

    Found where the topology reader finds this process's quota (topology.cgroup.cpu_hierarchies:
    mountinfo, else the usual places), so the groups land in the hierarchy whose limits
    planning reads. ``root``: a directory laid out like /sys/fs/cgroup, searched at the usual
    names only. ``fs``: another host tree or process (tests).
    """
    fs = fs or HostFS()
    if root is not None:
        hierarchies = topology_cgroup.conventional_cpu_hierarchies(fs, root)
        where = f"under {root}"
    else:
        hierarchies = topology_cgroup.cpu_hierarchies(fs)
        where = "mounted"
    reasons = []
    for h in hierarchies:
        path = fs.path(h.mountpoint)
        if h.version == 2:
            if h.controllers is not None and "cpu" in h.controllers:
                return CpuController(2, path)
            reasons.append(f"cgroup v2 at {path} has no cpu controller")
        elif fs.exists(f"{h.mountpoint}/cpu.cfs_quota_us"):
            return CpuController(1, os.path.realpath(path))
    reasons.append(f"no cgroup v1 cpu controller (cpu.cfs_quota_us) {where}")
    raise CgroupUnavailable("cannot run under a CPU quota: " + "; ".join(reasons))


def check_writable(controller: CpuController) -> None:
    """Create and remove a probe group; CgroupUnavailable with the precise cause otherwise."""
    probe = os.path.join(controller.path, f"{GROUP_PREFIX}probe_{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError as exc:
        who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root)"
        raise CgroupUnavailable(
            f"cannot run under a CPU quota: creating a group in the cgroup v{controller.version} cpu controller "
            f"at {controller.path} failed as {who}: {exc.strerror or exc}. Run as root with a writable cgroup "
            f"cpu controller (e.g. a container started with --privileged or a delegated cgroup)."
        ) from None
    try:
        if controller.version == 2:
            if not os.path.exists(os.path.join(probe, "cpu.max")):
                raise CgroupUnavailable(
                    f"cannot run under a CPU quota: the cpu controller is not enabled for children of "
                    f"{controller.path} (add +cpu to {os.path.join(controller.path, 'cgroup.subtree_control')})"
                )
    finally:
        os.rmdir(probe)


def _enable_v2_cpu(path: str) -> None:
    control = os.path.join(path, "cgroup.subtree_control")
    try:
        if "cpu" not in _read(control).split():
            _write(control, "+cpu")
    except OSError as exc:
        raise CgroupUnavailable(f"cannot enable the cpu controller in {control}: {exc.strerror or exc}") from None


class QuotaGroup:
    """A cgroup with a CFS quota of ``cpus`` CPUs; use as a context manager (always removed)."""

    _counter = 0

    def __init__(self, controller: CpuController, cpus: float, tag: str = "") -> None:
        if not cpus > 0:
            raise ValueError(f"CPU quota must be a positive number of CPUs, got {cpus}")
        QuotaGroup._counter += 1
        suffix = f"_{tag}" if tag else ""
        self.controller = controller
        self.cpus = float(cpus)
        self.quota_us = max(MIN_QUOTA_US, int(round(self.cpus * PERIOD_US)))
        self.period_us = PERIOD_US
        self.path = os.path.join(controller.path, f"{GROUP_PREFIX}{os.getpid()}_{QuotaGroup._counter}{suffix}")
        self._created = False

    def create(self) -> "QuotaGroup":
        if self.controller.version == 2:
            _enable_v2_cpu(self.controller.path)
        self._created = True  # before mkdir: an interrupt right after it must still remove the group
        try:
            os.mkdir(self.path)
        except OSError as exc:
            self._created = False
            raise CgroupUnavailable(f"cannot create cgroup {self.path}: {exc.strerror or exc}") from None
        try:
            if self.controller.version == 1:
                _write(os.path.join(self.path, "cpu.cfs_period_us"), str(self.period_us))
                _write(os.path.join(self.path, "cpu.cfs_quota_us"), str(self.quota_us))
            else:
                _write(os.path.join(self.path, "cpu.max"), f"{self.quota_us} {self.period_us}")
        except OSError as exc:
            self.remove()
            raise CgroupUnavailable(f"cannot set the CPU quota of {self.path}: {exc.strerror or exc}") from None
        log.debug("created %s with quota %d/%d us", self.path, self.quota_us, self.period_us)
        return self

    def join(self) -> None:
        """Move the calling process into the group (used as the child's preexec step)."""
        _write(os.path.join(self.path, "cgroup.procs"), str(os.getpid()))

    def add(self, pid: int) -> None:
        _write(os.path.join(self.path, "cgroup.procs"), str(pid))

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in _read(os.path.join(self.path, "cgroup.procs")).split()]
        except OSError:
            return []

    def stat(self) -> CpuStat:
        return parse_cpu_stat(_read(os.path.join(self.path, "cpu.stat")), self.controller.version)

    def kill_all(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kill whatever is left inside, then rmdir (retried while the kernel reaps the tasks)."""
        if not self._created:
            return
        deadline = time.monotonic() + timeout_s
        while True:
            self.kill_all()
            try:
                os.rmdir(self.path)
                self._created = False
                return
            except FileNotFoundError:
                self._created = False
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    log.warning("could not remove cgroup %s: %s", self.path, exc)
                    raise
                time.sleep(0.02)

    def __enter__(self) -> "QuotaGroup":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.remove()


def leftover_groups(controller: CpuController, pid: int | None = None) -> list[str]:
    """Groups this module created (for one harness pid, or any) that still exist."""
    prefix = GROUP_PREFIX + (f"{pid}_" if pid is not None else "")
    try:
        return sorted(os.path.join(controller.path, d) for d in os.listdir(controller.path) if d.startswith(prefix))
    except OSError:
        return []
