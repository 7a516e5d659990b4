"""Real cgroup-v1 memory groups for tests and benchmarks: a limit, a child inside it, its peak, its OOM kill.

    with MemoryCgroup(256 << 20) as group:             # MemoryCgroupUnavailable if it cannot be made
        result = group.run([sys.executable, "-c", "..."], timeout=60)
    result.oom_killed, result.peak_bytes, result.returncode

The group is made under this process's own memory group (so that whatever limits the caller
also limits the child, and the group lands where the caller may write), named
``tf_autopar_mem_<pid>_<n>``. The limit is set on ``memory.limit_in_bytes`` and, where the kernel
accounts swap, on ``memory.memsw.limit_in_bytes`` too (so that swapping does not hide an OOM).
The child joins the group before it execs (``preexec_fn`` writes its pid to ``cgroup.procs``):
everything it allocates, and everything it spawns, is charged to the group. After the child
exits: its peak (``memory.max_usage_in_bytes``, page cache included, as the kernel's limit
counts it), the kernel's kill count (``memory.oom_control``'s ``oom_kill``, kernel 4.13+) and
``memory.failcnt`` (times the limit was hit, reclaim included). OOM-killed = exit by SIGKILL
(-9, a shell's 137) with the group's oom_kill count up. On leaving, processes still in the group
(the child's own children) are killed by pid and the group is removed.

Tests call ``require()`` for a pytest skip with the reason; benchmarks catch
MemoryCgroupUnavailable. No pytest import unless a test asks for it.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any

GROUP_PREFIX = "tf_autopar_mem_"
_counter = itertools.count()


class MemoryCgroupUnavailable(OSError):
    """No writable cgroup-v1 memory controller here; the message says why."""


def own_memory_group() -> str:
    """The directory of this process's cgroup-v1 memory group (MemoryCgroupUnavailable if none or not writable)."""
    from tf_autopar.topology import cgroup
    from tf_autopar.topology._fs import HostFS, Notes

    if os.geteuid() != 0:
        raise MemoryCgroupUnavailable("not root: cannot create memory cgroups")
    groups = [g for g in cgroup.process_groups(HostFS("/", os.getpid()), Notes(), "memory") if g.version == 1]
    if not groups:
        raise MemoryCgroupUnavailable("no cgroup-v1 memory hierarchy is mounted for this process")
    leaf = groups[0].leaf
    if not os.path.isfile(os.path.join(leaf, "memory.limit_in_bytes")):
        raise MemoryCgroupUnavailable(f"{leaf} has no memory.limit_in_bytes")
    if not os.access(leaf, os.W_OK):
        raise MemoryCgroupUnavailable(f"{leaf} is not writable")
    return leaf


def require() -> str:
    """own_memory_group(), or pytest.skip with the reason."""
    try:
        return own_memory_group()
    except MemoryCgroupUnavailable as exc:
        import pytest

        pytest.skip(f"no writable cgroup-v1 memory controller: {exc}")
        raise  # unreachable


@dataclass(frozen=True)
class MemoryRun:
    """One child's run inside a limited group."""

    returncode: int  # -9: killed by SIGKILL (the OOM killer's signal)
    oom_killed: bool  # SIGKILL and the group's oom_kill count went up
    peak_bytes: int  # memory.max_usage_in_bytes after the run
    limit_bytes: int
    oom_kills: int  # the group's oom_kill count
    failcnt: int  # times the group hit its limit
    seconds: float
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def exit_status(self) -> int:
        """As a shell reports it: 137 for SIGKILL."""
        return 128 - self.returncode if self.returncode < 0 else self.returncode

    def to_dict(self) -> dict[str, Any]:
        return {
            "returncode": self.returncode,
            "exit_status": self.exit_status,
            "oom_killed": self.oom_killed,
            "peak_bytes": self.peak_bytes,
            "limit_bytes": self.limit_bytes,
            "peak_of_limit": round(self.peak_bytes / self.limit_bytes, 3) if self.limit_bytes else None,
            "oom_kills": self.oom_kills,
            "failcnt": self.failcnt,
            "seconds": round(self.seconds, 2),
            "timed_out": self.timed_out,
        }


class MemoryCgroup:
    """A cgroup-v1 memory group with a hard limit, removed on exit (a context manager)."""

    def __init__(self, limit_bytes: int, parent: str | None = None, swap: bool = False) -> None:
        self.limit_bytes = int(limit_bytes)
        self.parent = parent or own_memory_group()
        self.path = os.path.join(self.parent, f"{GROUP_PREFIX}{os.getpid()}_{next(_counter)}")
        self.swap = swap  # True: leave memsw alone (swap may then absorb what the limit refuses)
        self._started: list[subprocess.Popen] = []

    # -------------------------------------------------------------- files
    def read(self, name: str) -> str:
        with open(os.path.join(self.path, name), encoding="ascii") as fh:
            return fh.read()

    def write(self, name: str, value: object) -> None:
        with open(os.path.join(self.path, name), "w", encoding="ascii") as fh:
            fh.write(str(value))

    def peak(self) -> int:
        return int(self.read("memory.max_usage_in_bytes"))

    def usage(self) -> int:
        return int(self.read("memory.usage_in_bytes"))

    def oom_kills(self) -> int:
        """memory.oom_control's oom_kill (0 on kernels before 4.13, which do not count)."""
        for line in self.read("memory.oom_control").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def failcnt(self) -> int:
        """Times the group hit its limit: memory.failcnt, or memsw's where higher (some kernels count only there)."""
        counts = [int(self.read("memory.failcnt"))]
        if os.path.exists(os.path.join(self.path, "memory.memsw.failcnt")):
            counts.append(int(self.read("memory.memsw.failcnt")))
        return max(counts)

    def set_limit(self, limit_bytes: int) -> None:
        """A new hard limit (memsw follows; raised first when growing, as the kernel requires memsw >= limit)."""
        memsw = os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")) and not self.swap
        if memsw and limit_bytes > self.limit_bytes:
            self.write("memory.memsw.limit_in_bytes", limit_bytes)
        self.write("memory.limit_in_bytes", limit_bytes)
        if memsw and limit_bytes <= self.limit_bytes:
            self.write("memory.memsw.limit_in_bytes", limit_bytes)
        self.limit_bytes = limit_bytes

    # -------------------------------------------------------------- lifetime
    def __enter__(self) -> MemoryCgroup:
        try:
            os.mkdir(self.path)
        except OSError as exc:
            raise MemoryCgroupUnavailable(f"cannot create {self.path}: {exc.strerror or exc}") from exc
        try:
            self.write("memory.limit_in_bytes", self.limit_bytes)
            if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")) and not self.swap:
                self.write("memory.memsw.limit_in_bytes", self.limit_bytes)
        except OSError as exc:
            self.remove()
            raise MemoryCgroupUnavailable(f"cannot set a limit on {self.path}: {exc.strerror or exc}") from exc
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in self.read("cgroup.procs").split()]
        except OSError:
            return []

    def remove(self) -> None:
        """Kill what is left in the group (the children started here and theirs), then remove it."""
        for proc in self._started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while os.path.isdir(self.path):
            for pid in self.pids():  # only processes started in this group (a child's children)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.path)
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # -------------------------------------------------------------- children
    def _join(self) -> None:  # in the child, between fork and exec: no locks, no allocation to speak of
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")  # "0": the writing process itself
        finally:
            os.close(fd)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        """A child started inside the group (it joins before exec)."""
        proc = subprocess.Popen(argv, preexec_fn=self._join, **kwargs)  # noqa: PLW1509 - the join must precede exec
        self._started.append(proc)
        return proc

    def result(self, proc: subprocess.Popen, out: str, err: str, seconds: float, timed_out: bool = False) -> MemoryRun:
        kills = self.oom_kills()
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return MemoryRun(
            returncode=rc,
            oom_killed=rc == -signal.SIGKILL and kills > 0 and not timed_out,
            peak_bytes=self.peak(),
            limit_bytes=self.limit_bytes,
            oom_kills=kills,
            failcnt=self.failcnt(),
            seconds=seconds,
            stdout=out,
            stderr=err,
            timed_out=timed_out,
        )

    def run(self, argv: list[str], timeout: float, env: dict[str, str] | None = None, **kwargs: Any) -> MemoryRun:
        """Run ``argv`` to its end inside the group (killed after ``timeout`` seconds); what it cost."""
        start = time.monotonic()
        proc = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kwargs)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            out, err = proc.communicate()
        return self.result(proc, out, err, time.monotonic() - start, timed_out)
