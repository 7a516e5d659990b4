"""A host-wide lease that hands each cooperating worker a slot number, for workers without ranks.

Layout: ``<root>/<group>/slot-<i>.lock`` where

- ``root`` is ``$TF_AUTOPAR_LEASE_DIR`` if set, else ``/dev/shm/tf_autopar-<uid>`` (memory
  backed, cleared at boot), else ``<tempdir>/tf_autopar-<uid>`` when /dev/shm is absent.
  The root, given or default, is created mode 0700 when missing and must be a real directory
  (not a symlink) owned by this user or root, writable by others only with the sticky bit (a
  shared /tmp-like directory).
- ``group`` is a hash of ``$TF_AUTOPAR_GROUP`` if set, else of the program (the interpreter
  and ``sys.argv[0]`` resolved to a path: the same for gunicorn/uvicorn workers and
  multiprocessing children, different for unrelated programs), plus the usable CPU set
  (processes already placed on different CPUs by someone else never share slots), plus the
  user id: the group directory is created 0700 and must be a real directory owned by this
  user that nobody else can write, so another user's symlink or files planted there are
  refused (LeaseError), never followed or believed.

A slot is held by an exclusive, non-blocking ``flock`` on its file for the life of the
process. The lock, not the file's content, is the lease: the kernel drops it when the
process exits or is killed, so a dead worker's slot is free again at once and without
races (no pid files to clean, no timeouts). The small JSON inside (pid, fd, argv, time, slot,
count) names the holder: counting the active slots and ``lease_status()`` check that this pid
still holds the lock through that descriptor (``/proc/<pid>/fdinfo/<fd>``); where that cannot
tell (no descriptor recorded, another user's /proc, empty or garbled content) the slot's flock
itself is tried without blocking: a file nobody has locked is no peer, whatever pid and time
it names. Only slots 0..MAX_SLOTS-1 are ever scanned. Garbled content in a free slot is
overwritten. Workers without a count add their rendezvous outcome (rank and
cohort, rendezvous.py) with ``Lease.update``.

A worker takes the lowest free slot. A forked child does not inherit its parent's slot
(``os.register_at_fork`` closes the inherited descriptor without unlocking it).

Failures (unwritable root, a root or group path that is not a directory, is a symlink,
belongs to another user or is writable by others, a slot path that is not a regular file,
more than MAX_SLOTS slots)
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
import tempfile
import threading
import time
from typing import Any, Iterable, Iterator, Mapping, Sequence

from tf_autopar._files import NotRegularFile, Untrusted, check_owned, check_regular, parse_json, read_regular
from tf_autopar._keys import stable_key
from tf_autopar._text import uint_or_none

MAX_SLOTS = 1024  # slots a group may have, and the most ever scanned (planted files beyond are ignored)
LOCK_WAIT_S = 0.2  # the longest a start waits for the group's decision lock (held for milliseconds)
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
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
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
    return f"{stable_key(text)}-{os.getuid()}"


def _ensure_dir(path: str, *, group: bool) -> None:
    """Create ``path`` (0700) if missing; LeaseError unless it is a directory this process can
    trust: the root (given or default) owned by this user or root and writable by others only
    with the sticky bit; a group directory owned by this user and writable by nobody else."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LeaseError(
            exc.errno or errno.EIO, f"cannot create lease directory {path}: {exc.strerror or exc}"
        ) from None
    try:
        st = os.lstat(path)
        check_owned(st, f"lease directory {path}", directory=True, sticky_ok=not group)
    except Untrusted as exc:
        raise LeaseError(exc.errno or errno.EPERM, exc.strerror) from None
    except OSError as exc:
        raise LeaseError(
            exc.errno or errno.EIO, f"cannot check lease directory {path}: {exc.strerror or exc}"
        ) from None
    if group and st.st_uid != os.getuid():
        raise LeaseError(errno.EPERM, f"lease directory {path} belongs to uid {st.st_uid}, not {os.getuid()}")
    if not os.access(path, os.W_OK | os.X_OK):
        raise LeaseError(errno.EACCES, f"lease directory {path} is not writable")


def _holds_slot(data: Any, st: os.stat_result, path: str) -> bool:
    """Whether some process holds the slot's flock: never a pid and a clock alone.

    First from the named process's /proc/<pid>/fdinfo/<fd>, which lists the locks held through
    that descriptor (race-free; not /proc/locks: its first read in a process costs 8-20 ms
    here, as much as the rest of enable()). Where that cannot tell (no descriptor recorded,
    another user's fdinfo, empty or garbled content, which a peer between locking and writing
    leaves too), the slot's own flock is tried (``_flocked``)."""
    if isinstance(data, dict) and data and "pid" in data:
        if not pid_alive(data.get("pid")):
            return _flocked(path, st) if not isinstance(data.get("fd"), int) else False
        held = _fdinfo_holds(data, st)
        if held is not None:
            return held
    return _flocked(path, st)


def _flocked(path: str, st: os.stat_result) -> bool:
    """Whether a process holds an flock on the slot file ``path`` (the file ``st`` describes): a
    shared lock is tried without blocking and dropped at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False  # gone, or not ours to open: nothing this process could share with
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # drops the probe's lock
    return False


def _fdinfo_holds(data: dict[str, Any], st: os.stat_result) -> bool | None:
    """Whether the named pid holds the slot's flock through the named descriptor; None when its
    fdinfo cannot be read (no descriptor recorded, another user's process)."""
    fd = data.get("fd")
    if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
        return None
    try:
        lines = (
            read_regular(f"/proc/{data['pid']}/fdinfo/{fd}", MAX_STATUS, truncate=True)
            .decode("ascii", "replace")
            .splitlines()
        )
    except FileNotFoundError:  # the descriptor is closed: the slot was released
        return False
    except OSError:
        return None
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
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 22:  # pid_max is at most 2**22
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _slot_index(name: str) -> int | None:
    """The slot number in a file name, None for other files and for numbers beyond MAX_SLOTS."""
    if not (name.startswith(SLOT_PREFIX) and name.endswith(SLOT_SUFFIX)) or len(name) > 32:
        return None
    index = uint_or_none(name[len(SLOT_PREFIX) : -len(SLOT_SUFFIX)])
    return index if index is not None and index < MAX_SLOTS else None


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

    def __init__(
        self,
        directory: str,
        index: int,
        fd: int,
        pid: int,
        active: int,
        previous: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None,
    ) -> None:
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
        return (
            f"Lease(directory={self.directory!r}, index={self.index}, fd={self.fd}, pid={self.pid}, "
            f"active={self.active}, previous={self.previous!r})"
        )

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


def forget_in_child() -> None:
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
    os.register_at_fork(after_in_child=forget_in_child)


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
def group_lock(directory: str, timeout: float = LOCK_WAIT_S) -> Iterator[bool]:
    """Hold the group's decision lock for a few milliseconds; yields whether it was taken.

    Never blocks for long: the lock is polled without blocking until ``timeout`` (legitimate
    holders keep it for milliseconds; a process that holds it for good must not delay every
    start by more than that), then the caller proceeds unlocked (a holder killed mid-step frees
    it at once: it is a flock)."""
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

    A held slot read as garbled or empty is read once more after a millisecond (its holder may
    be writing it: then it counts with what it says, else as {}); an unlocked one costs no wait."""
    own = os.fstat(own_fd)
    out = []
    for index, st, data in _slots(directory):
        if st is not None and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
            continue
        path = os.path.join(directory, f"{SLOT_PREFIX}{index}{SLOT_SUFFIX}")
        if st is None or not _holds_slot(data, st, path):
            continue
        if not isinstance(data, dict) or not data:
            time.sleep(0.001)
            _, again, data = _read_slot(directory, index)
            data = data if again is not None and isinstance(data, dict) else {}
        out.append((index, data))
    return out


def _count_active(directory: str, own_fd: int) -> int:
    return 1 + len(live_peers(directory, own_fd))


def acquire(
    directory: str, *, count: int | None = None, strict_root: str | None = None, argv: Sequence[str] | None = None
) -> Lease:
    """Hold the lowest free slot in ``directory`` (created if missing). Raises LeaseError.

    ``strict_root``: the lease root above ``directory`` (default: its parent). Both are checked
    (``_ensure_dir``) whether the root is the default or was given.
    """
    _ensure_dir(strict_root or os.path.dirname(os.path.abspath(directory)) or "/", group=False)
    _ensure_dir(directory, group=True)
    for index in range(MAX_SLOTS):
        path = os.path.join(directory, f"{SLOT_PREFIX}{index}{SLOT_SUFFIX}")
        fd = _open_slot(path)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # held, or a peer's liveness probe (_flocked) for a few microseconds
                time.sleep(0.0005)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        except OSError as exc:
            os.close(fd)
            raise LeaseError(exc.errno or errno.EIO, f"cannot lock lease slot {path}: {exc.strerror or exc}") from None
        previous = _read_status(fd)
        status = {
            "pid": os.getpid(),
            "fd": fd,
            "argv": list(sys.argv if argv is None else argv)[:8],
            "time": time.time(),
            "slot": index,
            "count": count,
        }
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

    def held(index: int, st: os.stat_result | None, data: Any) -> bool | None:
        return (
            None if st is None else _holds_slot(data, st, os.path.join(directory, f"{SLOT_PREFIX}{index}{SLOT_SUFFIX}"))
        )

    return [{"slot": index, "held": held(index, st, data), "status": data} for index, st, data in _slots(directory)]
