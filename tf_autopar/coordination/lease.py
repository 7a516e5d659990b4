"""A host-wide lease that hands each cooperating worker a slot number, for workers without ranks.

Layout: ``<root>/<group>/slot-<i>.lock`` where

- ``root`` is ``$TF_AUTOPAR_LEASE_DIR`` if set, else ``/dev/shm/tf_autopar-<uid>`` (memory
  backed, cleared at boot), else ``<tempdir>/tf_autopar-<uid>`` when /dev/shm is absent.
  The default root is created mode 0700 and must be a real directory owned by this user.
- ``group`` is a hash of ``$TF_AUTOPAR_GROUP`` if set, else of the program (the interpreter
  and ``sys.argv[0]`` resolved to a path: the same for gunicorn/uvicorn workers and
  multiprocessing children, different for unrelated programs), plus the usable CPU set
  (processes already placed on different CPUs by someone else never share slots).

A slot is held by an exclusive, non-blocking ``flock`` on its file for the life of the
process. The lock, not the file's content, is the lease: the kernel drops it when the
process exits or is killed, so a dead worker's slot is free again at once and without
races (no pid files to clean, no timeouts). The small JSON inside (pid, fd, argv, time, slot,
count) names the holder: counting the active slots and ``lease_status()`` check that this pid
still holds the lock through that descriptor (``/proc/<pid>/fdinfo/<fd>``). Garbled content in
a free slot is overwritten. Workers without a count add their rendezvous outcome (rank and
cohort, rendezvous.py) with ``Lease.update``.

A worker takes the lowest free slot. A forked child does not inherit its parent's slot
(``os.register_at_fork`` closes the inherited descriptor without unlocking it).

Failures (unwritable root, a root or group path that is not a directory or is a symlink or
belongs to another user, a slot path that is not a regular file, more than MAX_SLOTS slots)
raise LeaseError; ``claim_share`` turns it into its even-split fallback and one warning. Slot files are
opened without blocking and read with a size bound (a FIFO planted there is refused, and
ignored when counting peers).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import sys
import threading
import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

from tf_autopar._files import NotRegularFile, check_regular, parse_json, read_regular
from tf_autopar._keys import stable_key
from tf_autopar._text import uint_or_none

MAX_SLOTS = 4096
MAX_STATUS = 65536  # bytes of a slot's JSON (or a holder's fdinfo) read at most
SLOT_PREFIX, SLOT_SUFFIX = "slot-", ".lock"


class LeaseError(OSError):
    """The lease directory cannot be used (unwritable, or not what it should be)."""


def default_root(env: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """(root directory, whether it was given explicitly by TF_AUTOPAR_LEASE_DIR)."""
    env = os.environ if env is None else env
    given = env.get("TF_AUTOPAR_LEASE_DIR", "").strip()
    if given:
        return given, True
    if os.path.isdir("/dev/shm"):
        base = "/dev/shm"
    else:
        import tempfile

        base = tempfile.gettempdir()
    return os.path.join(base, f"tf_autopar-{os.getuid()}"), False


def program_name(argv: Sequence[str] | None = None) -> str:
    argv = sys.argv if argv is None else argv
    first = argv[0] if argv else ""
    if first and first not in ("-c", "-m", "-"):
        first = os.path.realpath(first)
    return f"{sys.executable}|{first}"


def group_key(env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None, cpus: Iterable[int] = ()) -> str:
    """The lease group: TF_AUTOPAR_GROUP or the program, plus the usable CPUs (see module docstring)."""
    env = os.environ if env is None else env
    name = env.get("TF_AUTOPAR_GROUP", "").strip() or program_name(argv)
    text = name + "|" + ",".join(str(c) for c in sorted(cpus))
    return stable_key(text)


def _ensure_dir(path: str, strict: bool) -> None:
    """Create ``path`` (0700) if missing; check it is a usable directory."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LeaseError(exc.errno or errno.EIO, f"cannot create lease directory {path}: {exc.strerror or exc}") from None
    st = os.lstat(path) if strict else os.stat(path)
    if stat.S_ISLNK(st.st_mode):
        raise LeaseError(errno.ELOOP, f"lease directory {path} is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise LeaseError(errno.ENOTDIR, f"lease directory {path} is not a directory")
    if strict and st.st_uid != os.getuid():
        raise LeaseError(errno.EPERM, f"lease directory {path} belongs to uid {st.st_uid}, not {os.getuid()}")
    if not os.access(path, os.W_OK | os.X_OK):
        raise LeaseError(errno.EACCES, f"lease directory {path} is not writable")


def _holds_slot(data: Any, st: os.stat_result) -> bool:
    """Whether the process a slot's JSON names still holds that slot's flock.

    Read from that process's /proc/<pid>/fdinfo/<fd>, which lists the locks held through that
    descriptor. Not /proc/locks: its first read in a process costs 8-20 ms here, as much as the
    rest of enable(). A pid that is alive but whose fdinfo is unreadable (another user) counts.
    """
    if not isinstance(data, dict) or not pid_alive(data.get("pid")):
        return False
    fd = data.get("fd")
    if not isinstance(fd, int):  # status written without its descriptor: trust the pid
        return True
    try:
        lines = read_regular(f"/proc/{data['pid']}/fdinfo/{fd}", MAX_STATUS, truncate=True).decode(
            "ascii", "replace").splitlines()
    except FileNotFoundError:  # the descriptor is closed: the slot was released
        return False
    except OSError:
        return True
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in lines:
        if not line.startswith("lock:") or "FLOCK" not in line:
            continue
        for token in line.split():
            parts = token.split(":")
            if len(parts) == 3:
                try:
                    if (int(parts[0], 16), int(parts[1], 16), int(parts[2])) == want:
                        return True
                except ValueError:
                    continue
    return False


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _slot_index(name: str) -> int | None:
    if not (name.startswith(SLOT_PREFIX) and name.endswith(SLOT_SUFFIX)):
        return None
    digits = name[len(SLOT_PREFIX): -len(SLOT_SUFFIX)]
    return uint_or_none(digits)


def _read_status(fd: int) -> dict[str, Any] | None:
    """The slot's JSON, {} when empty, None when garbled."""
    try:
        raw = os.pread(fd, MAX_STATUS, 0)
    except OSError:
        return None
    if not raw.strip():
        return {}
    try:
        data = parse_json(raw, "lease slot status")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class Lease:
    """One held slot. ``release()`` (or process exit) frees it. Equal only to itself."""

    def __init__(self, directory: str, index: int, fd: int, pid: int, active: int,
                 previous: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> None:
        self.directory = directory
        self.index = index
        self.fd = fd
        self.pid = pid
        self.active = active  # slots of the group held at claim time, this one included
        self.previous = previous  # what the slot's JSON said before (None: garbled)
        self.status: dict[str, Any] = dict(status or {})  # what the slot's JSON says now
        self._released = False

    def update(self, **fields: Any) -> None:
        """Add ``fields`` to the slot's JSON, for the peers to read (rendezvous.py).

        Written in place, padded with spaces to at least the old length and never truncated
        first, so that a peer reading at the same time never finds the slot empty (an empty or
        torn slot would not count as held). Raises OSError."""
        self.status.update(fields)
        data = json.dumps(self.status).encode()
        old = os.fstat(self.fd).st_size
        os.pwrite(self.fd, data.ljust(old), 0)

    def __repr__(self) -> str:
        return (f"Lease(directory={self.directory!r}, index={self.index}, fd={self.fd}, pid={self.pid}, "
                f"active={self.active}, previous={self.previous!r})")

    @property
    def path(self) -> str:
        return os.path.join(self.directory, f"{SLOT_PREFIX}{self.index}{SLOT_SUFFIX}")

    @property
    def held(self) -> bool:
        return not self._released and self.pid == os.getpid()

    def release(self) -> None:
        with _HELD_LOCK:
            if self._released:
                return
            self._released = True
            _HELD.discard(self)
            if self.pid == os.getpid():
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
                except OSError:
                    pass
            try:
                os.close(self.fd)
            except OSError:
                pass


_HELD: set[Lease] = set()
_HELD_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """After fork: close inherited slot descriptors WITHOUT unlocking (the parent still holds them).

    Only leases taken by another process: a slot this child already claimed for itself (the
    runtime's at-fork handler may run first) stays."""
    for lease in [x for x in _HELD if x.pid != os.getpid()]:
        lease._released = True
        try:
            os.close(lease.fd)
        except OSError:
            pass
        _HELD.discard(lease)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _open_slot(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LeaseError(errno.ELOOP, f"lease slot {path} is a symlink") from None
        if exc.errno == errno.EISDIR:
            raise LeaseError(errno.EISDIR, f"lease slot {path} is a directory, not a file") from None
        raise LeaseError(exc.errno or errno.EIO, f"cannot open lease slot {path}: {exc.strerror or exc}") from None
    try:
        check_regular(fd, path)
    except NotRegularFile as exc:
        os.close(fd)
        raise LeaseError(errno.EINVAL, f"lease slot {exc.strerror}") from None
    return fd


def _slots(directory: str) -> Iterator[tuple[int, os.stat_result | None, Any]]:
    """(index, stat, JSON) of each slot file in index order; stat and JSON are None when unreadable."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for index in sorted(i for n in names if (i := _slot_index(n)) is not None):
        yield _read_slot(directory, index)


def _read_slot(directory: str, index: int) -> tuple[int, os.stat_result | None, Any]:
    path = os.path.join(directory, f"{SLOT_PREFIX}{index}{SLOT_SUFFIX}")
    try:
        st = os.stat(path, follow_symlinks=False)
        raw = read_regular(path, MAX_STATUS, truncate=True, follow_symlinks=False)
        return index, st, (parse_json(raw, path) if raw.strip() else {})
    except (OSError, ValueError):
        return index, None, None


GROUP_LOCK = "decide.lock"  # not a slot: serialises short read-decide-write steps (rendezvous.py)


@contextlib.contextmanager
def group_lock(directory: str, timeout: float = 2.0) -> Iterator[bool]:
    """Hold the group's decision lock for a few milliseconds; yields whether it was taken.

    Never blocks for good: the lock is polled without blocking until ``timeout``, then the
    caller proceeds unlocked (a holder killed mid-step frees it at once: it is a flock)."""
    try:
        fd = _open_slot(os.path.join(directory, GROUP_LOCK))
    except LeaseError:
        yield False
        return
    try:
        end = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = True
                break
            except BlockingIOError:
                if time.monotonic() >= end:
                    taken = False
                    break
                time.sleep(0.001)
            except OSError:
                taken = False
                break
        yield taken
    finally:
        os.close(fd)  # drops the lock


def live_peers(directory: str, own_fd: int) -> list[tuple[int, dict[str, Any]]]:
    """(slot, JSON) of every other slot in ``directory`` a live process holds.

    A slot read as garbled is read once more after a millisecond: a peer may be writing it."""
    own = os.fstat(own_fd)
    out = []
    for index, st, data in _slots(directory):
        if st is not None and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
            continue
        if st is None or not isinstance(data, dict) or not data:
            time.sleep(0.001)
            _, st, data = _read_slot(directory, index)
        if st is not None and _holds_slot(data, st):
            out.append((index, data))
    return out


def _count_active(directory: str, own_fd: int) -> int:
    return 1 + len(live_peers(directory, own_fd))


def acquire(directory: str, *, count: int | None = None, strict_root: str | None = None,
            argv: Sequence[str] | None = None) -> Lease:
    """Hold the lowest free slot in ``directory`` (created if missing). Raises LeaseError.

    ``strict_root``: a parent that must be owned by this user and not be a symlink (the default root).
    """
    if strict_root is not None:
        _ensure_dir(strict_root, strict=True)
        _ensure_dir(directory, strict=True)
    else:
        _ensure_dir(os.path.dirname(os.path.abspath(directory)) or "/", strict=False)
        _ensure_dir(directory, strict=False)
    for index in range(MAX_SLOTS):
        path = os.path.join(directory, f"{SLOT_PREFIX}{index}{SLOT_SUFFIX}")
        fd = _open_slot(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except OSError as exc:
            os.close(fd)
            raise LeaseError(exc.errno or errno.EIO, f"cannot lock lease slot {path}: {exc.strerror or exc}") from None
        previous = _read_status(fd)
        status = {"pid": os.getpid(), "fd": fd, "argv": list(sys.argv if argv is None else argv)[:8],
                  "time": time.time(), "slot": index, "count": count}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(status).encode(), 0)
            active = _count_active(directory, fd)
        except OSError as exc:
            os.close(fd)
            raise LeaseError(exc.errno or errno.EIO, f"cannot write lease slot {path}: {exc.strerror or exc}") from None
        lease = Lease(directory, index, fd, os.getpid(), active, previous, status)
        with _HELD_LOCK:
            _HELD.add(lease)
        return lease
    raise LeaseError(errno.ENOSPC, f"all {MAX_SLOTS} lease slots in {directory} are held")


def lease_status(directory: str) -> list[dict[str, Any]]:
    """Every slot file in ``directory``: its JSON and whether a live process holds it (no locking;
    ``held`` is None when the slot cannot be read)."""
    return [{"slot": index, "held": None if st is None else _holds_slot(data, st), "status": data}
            for index, st, data in _slots(directory)]
