"""Memory limit and use of this process's cgroups: the container's memory, as cgroup.py reads its CPUs.

Why: a build sized from the host's free memory (psutil's ``available``) in a container limited to
1.5 GB on a 24 GB host is sized against memory the container can never have, and the kernel's
out-of-memory killer ends the server (exit 137). The room a build may take is the limit of the
process's cgroups less what they use.

Files read, per group from the process's own up to the mount's top (cgroup.GroupDir.chain, the
same discovery of groups and mounts as the CPU quota: v1, v2, hybrid, container mounts):

- v2: ``memory.max`` (hard limit, "max" = none), ``memory.high`` (throttling limit),
  ``memory.current`` (usage), ``memory.peak`` (kernel 5.19+), and ``memory.pressure`` (PSI) of
  the process's own group where present (hybrid hosts have it without the memory controller);
- v1: ``memory.limit_in_bytes`` (hard limit; "unlimited" reads 9223372036854771712),
  ``memory.soft_limit_in_bytes``, ``memory.usage_in_bytes``, ``memory.max_usage_in_bytes``, and
  the process's own group's ``memory.stat`` ``hierarchical_memory_limit``: what the ancestors
  impose, those above the mount's top too (a container that sees only its own group; read as
  the JVM does when every visible limit is "unlimited"; its usage is then the own group's);
- both: the binding group's ``memory.stat`` inactive file pages (``total_inactive_file`` v1,
  ``inactive_file`` v2): page cache the kernel reclaims before it kills, counted in the usage.

A limit at or above the host's RAM (host_memory_bytes; 2**62 when unknown) is no limit. A
parent's limit caps the sum of its children, so every level is read and the binding one is the
level with the least room left (limit - usage): the tightest limit when the process is alone in
its groups, a looser ancestor's when siblings (other containers of a pod) use the rest. A garbled
file is a warning naming it and the level is treated as unlimited (or its usage as unknown), as
cgroup.py does with a garbled CPU quota.

``MemoryReader`` finds the groups once and reads again cheaply (a pod resized in place):
``read_memory(fs, notes, groups)`` is the re-read given the discovered paths.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from tf_autopar._text import is_uint

from . import cgroup
from ._fs import HostFS, Notes
from .model import MemoryLimit

#: Without the host's RAM, a limit at or above this is "unlimited" (v1 writes 2**63 - 4096).
UNLIMITED_FLOOR = 1 << 62
UNREAD = "this group's memory limit is unknown: a build may be sized beyond it"
UNREAD_GROUPS = "no cgroup memory limit is known: builds are sized against the host's memory"

V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.soft_limit_in_bytes", "memory.max_usage_in_bytes")
V2_FILES = ("memory.max", "memory.current", "memory.high", "memory.peak")


class _Level(NamedTuple):
    version: int
    level: int
    directory: str
    limit: int | None  # below the host's RAM, else None
    usage: int | None  # read only where a limit is, and at the process's own group
    limit_file: str = ""  # where the limit came from, when not the limit file (memory.stat)


def parse_bytes(text: str) -> int | None:
    """A limit or usage file: bytes, or None for v2's "max". ValueError if garbled."""
    t = text.strip()
    if t == "max":
        return None
    if not is_uint(t):
        raise ValueError(f"{t!r} is neither a number of bytes nor 'max'")
    return int(t)


def parse_psi_some_avg10(text: str) -> float:
    """``memory.pressure``'s "some avg10=..." (percent of the last 10 s some task stalled). ValueError if garbled."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for f in fields[1:]:
                key, _, value = f.partition("=")
                if key == "avg10":
                    try:
                        avg = float(value)
                    except ValueError:
                        break
                    if 0.0 <= avg <= 100.0:
                        return avg
                    break
            raise ValueError(f"no valid avg10 in {line.strip()!r}")
    raise ValueError(f"no 'some' line in {text.strip()[:80]!r}")


def parse_memory_stat(text: str) -> dict[str, int]:
    """``memory.stat``: key -> value (lines that are not "key number" are skipped)."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if is_uint(value.strip()):
            out[key] = int(value)
    return out


def parse_meminfo_total(text: str) -> int | None:
    """/proc/meminfo MemTotal in bytes (None if absent or garbled)."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and is_uint(fields[1]):
                unit = fields[2].lower() if len(fields) > 2 else "kb"
                return int(fields[1]) * (1024 if unit == "kb" else 1)
    return None


def host_memory_bytes(fs: HostFS) -> int | None:
    """The host's RAM. Live: the kernel's (sysinfo, through sysconf), since LXCFS-style containers
    show their own limit as /proc/meminfo's MemTotal, which would make that limit look like "no
    limit"; a recorded tree (or a live sysconf failure): /proc/meminfo MemTotal under the root."""
    if fs.live:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            if total > 0:
                return total
        except (OSError, ValueError):
            pass
    text = fs.read("/proc/meminfo", 4096)
    return (parse_meminfo_total(text) if text is not None else None) or None


def _value(fs: HostFS, notes: Notes, path: str, what: str) -> tuple[bool, int | None]:
    """(the file was there, its bytes or None for "max"/garbled). Garbled: a warning naming the file."""
    text = fs.read(path, 256, notes=notes, consequence=UNREAD)
    if text is None:
        return False, None
    try:
        return True, parse_bytes(text)
    except ValueError as exc:
        notes.warn(f"{fs.path(path)}: {exc}; {what}")
        return True, None


def _names(version: int) -> tuple[str, str, str, str]:
    return V1_FILES if version == 1 else V2_FILES  # type: ignore[return-value]


def _read_level(
    fs: HostFS, notes: Notes, version: int, directory: str, level: int, unlimited: int
) -> tuple[_Level | None, int | None, str]:
    """One group: its level record (None when it has no memory files), its soft limit and that file."""
    limit_name, usage_name, high_name, _ = _names(version)
    seen, limit = _value(fs, notes, f"{directory}/{limit_name}", "treating this group as unlimited")
    if limit is not None and limit >= unlimited:
        limit = None
    _, high = _value(fs, notes, f"{directory}/{high_name}", "ignoring this soft limit")
    if high is not None and high >= unlimited:
        high = None
    usage = None
    if limit is not None or level == 0:
        there, usage = _value(fs, notes, f"{directory}/{usage_name}", "its usage is unknown")
        seen = seen or there
    if not seen:
        return None, None, ""
    return _Level(version, level, directory, limit, usage), high, f"{directory}/{high_name}"


def read_memory(
    fs: HostFS, notes: Notes, groups: list[cgroup.GroupDir] | None = None, host_bytes: int | None = None
) -> MemoryLimit | None:
    """The binding memory limit of this process's groups and their ancestors, their usage, soft limit
    and pressure; None when no memory file of any group is visible.

    ``groups``: the process's group directories (cgroup.process_groups(fs, notes, "memory")), found
    once by the caller that reads again; ``host_bytes``: the host's RAM (host_memory_bytes).
    """
    if groups is None:
        groups = cgroup.process_groups(fs, notes, "memory", consequence=UNREAD_GROUPS)
    if host_bytes is None:
        host_bytes = host_memory_bytes(fs)
    unlimited = host_bytes if host_bytes else UNLIMITED_FLOOR
    levels: list[_Level] = []
    high: tuple[int, str] | None = None
    psi: float | None = None
    psi_read = False
    stats: dict[str, dict[str, int]] = {}
    for group in groups:
        chain = group.chain()
        mine: list[_Level] = []
        for i, directory in enumerate(chain):
            lv, soft, soft_path = _read_level(fs, notes, group.version, directory, i, unlimited)
            if lv is not None:
                mine.append(lv)
            if soft is not None and (high is None or soft < high[0]):
                high = (soft, soft_path)
        if group.version == 1 and mine and mine[0].level == 0:
            # v1 says what every ancestor imposes, the ones above the mount's top too (a container
            # that sees only its own group): memory.stat's hierarchical_memory_limit
            hier = _stat(fs, stats, group.leaf).get("hierarchical_memory_limit")
            visible = [lv.limit for lv in mine if lv.limit is not None]
            if hier is not None and hier < unlimited and all(hier < v for v in visible):
                leaf = mine[0]
                mine.append(_Level(1, len(chain), leaf.directory, hier, leaf.usage, "memory.stat"))
        levels += mine
        if group.version == 2 and not psi_read:
            psi_read = True
            psi = _read_psi(fs, notes, f"{group.leaf}/memory.pressure")
    if not levels:
        return None
    limited = [lv for lv in levels if lv.limit is not None]
    if limited:
        # least room left; ties: the smaller limit, then the nearer group
        bind = min(
            limited,
            key=lambda lv: (lv.limit - (lv.usage or 0), lv.limit, lv.level),  # type: ignore[operator]
        )
        path = f"{bind.directory}/{bind.limit_file or _names(bind.version)[0]}"
    else:
        bind = next((lv for lv in levels if lv.level == 0 and lv.usage is not None), levels[0])
        path = f"{bind.directory}/{_names(bind.version)[1]}"
    peak_path = f"{bind.directory}/{_names(bind.version)[3]}"
    _, peak = _value(fs, notes, peak_path, "its peak usage is unknown")
    inactive = _stat(fs, stats, bind.directory).get("total_inactive_file" if bind.version == 1 else "inactive_file")
    return MemoryLimit(
        limit_bytes=bind.limit,
        usage_bytes=bind.usage,
        cgroup_version=bind.version,
        path=fs.path(path),
        level=bind.level,
        high_bytes=high[0] if high else None,
        high_path=fs.path(high[1]) if high else "",
        peak_bytes=peak,
        reclaimable_bytes=inactive,
        psi_some_avg10=psi,
        host_bytes=host_bytes,
    )


def _stat(fs: HostFS, cache: dict[str, dict[str, int]], directory: str) -> dict[str, int]:
    """A group's memory.stat, read once per reading ({} when absent)."""
    if directory not in cache:
        text = fs.read(f"{directory}/memory.stat", 64 << 10)
        cache[directory] = parse_memory_stat(text) if text is not None else {}
    return cache[directory]


def _read_psi(fs: HostFS, notes: Notes, path: str) -> float | None:
    text = fs.read(path, 4096)
    if text is None:
        return None
    try:
        return parse_psi_some_avg10(text)
    except ValueError as exc:
        notes.warn(f"{fs.path(path)}: {exc}; memory pressure unknown")
        return None


class MemoryReader:
    """Reads the memory limit of this process (or ``fs.pid``) again and again; the groups are found once.

    One read is a few reads of files of a few bytes (two per level, four at a limited one) and
    one or two memory.stat files (about 1 kB each): about 0.15 ms."""

    def __init__(self, fs: HostFS | None = None) -> None:
        self.fs = fs or HostFS("/", os.getpid())  # /proc/<pid>: the process, not the calling thread
        notes = Notes()
        self.groups = cgroup.process_groups(self.fs, notes, "memory", consequence=UNREAD_GROUPS)
        self.host_bytes = host_memory_bytes(self.fs)

    def read(self) -> MemoryLimit | None:
        return read_memory(self.fs, Notes(), self.groups, self.host_bytes)
