"""File access under a root directory, shared by all topology readers.

Every reader takes a root so tests can point it at a recorded /sys + /proc tree
(tests/fixtures/hosts/<name>). Reads go through HostFS.read so that
tests/fixtures/make_hosts.py can record exactly which files a real detection read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from tf_autopar import _warn
from tf_autopar._files import read_regular

log = logging.getLogger("tf_autopar.topology")

# Set by the fixture recorder (make_hosts.py --record): called with each absolute host
# path that was read successfully. None in normal use.
read_hook: Callable[[str], None] | None = None
MAX_READ = 64 << 20  # /proc/cpuinfo of a 1024-CPU host is about 1.5 MB


class Notes:
    """Collects warnings for Topology.warnings and logs each once."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        """Kept in this detection's warnings; logged once per process (a host is detected often)."""
        if message not in self.warnings:
            self.warnings.append(message)
            _warn.warn_once("topology:" + message, message, log.name)


class HostFS:
    """A root ("/" = the running system) and, optionally, the pid whose /proc entries to read.

    A plain class, not a dataclass: enable() builds one on every start, and each dataclass
    costs about 0.7 ms to define.
    """

    __slots__ = ("root", "pid", "live")

    def __init__(self, root: str = "/", pid: int | None = None) -> None:
        self.root = root
        self.pid = pid
        self.live = os.path.realpath(root) == "/"  # reading the running system: syscalls may be used too

    def __repr__(self) -> str:
        return f"HostFS(root={self.root!r}, pid={self.pid!r})"

    @property
    def proc_self(self) -> str:
        """The host path of this process's /proc directory ("/proc/self" or "/proc/<pid>")."""
        return "/proc/self" if self.pid is None else f"/proc/{self.pid}"

    def path(self, host_path: str) -> str:
        """Map an absolute host path (e.g. "/sys/fs/cgroup/cpu.max") under the root."""
        if self.live:
            return host_path
        return os.path.join(self.root, host_path.lstrip("/"))

    def read(self, host_path: str, limit: int = -1, *, notes: Notes | None = None, consequence: str = "") -> str | None:
        """Text of a host file (at most `limit` bytes if >= 0), or None when it is missing or unreadable.

        Through read_regular: a FIFO or device planted in a recorded tree (or at a cgroup
        path) is refused instead of blocking, and no file is read past MAX_READ bytes.
        ``notes``: a file that exists but cannot be read (permission denied, not a regular
        file) is a warning naming it and ``consequence``, not a silent absence.
        """
        path = self.path(host_path)
        try:
            raw = read_regular(path, limit if limit >= 0 else MAX_READ, truncate=True)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # permission denied, not a regular file, EIO on some virtual files
            log.debug("cannot read %s: %s", path, exc)
            if notes is not None:
                notes.warn(f"cannot read {path} ({exc.strerror or exc}); {consequence}")
            return None
        if read_hook is not None:
            read_hook(host_path)
        return raw.decode("utf-8", "replace")

    def exists(self, host_path: str) -> bool:
        return os.path.exists(self.path(host_path))

    def listdir(self, host_path: str) -> list[str]:
        try:
            return os.listdir(self.path(host_path))
        except OSError:
            return []
