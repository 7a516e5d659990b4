"""Reading and writing tf_autopar's own small files: caches, lease slots, host files.

Every such file lives where someone else may have put something else: a named pipe makes a
plain ``open()`` block forever, a device or a huge file makes ``read()`` run until memory
runs out, deeply nested JSON ends in RecursionError. So reads open without blocking, accept
only regular files, stop at a size bound, and JSON that is too deep is reported as a corrupt
file (ValueError). Writes go to a temporary file in the same directory that then replaces
the target whole, so a reader never sees half a file and a symlink at the target is
replaced, not followed.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from typing import Any

_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """The path exists but is not a regular file (a FIFO, a device, a directory, a socket)."""


class FileTooLarge(ValueError):
    """The file holds more than the caller's bound."""


class Untrusted(OSError):
    """The path may have been written by someone else: another user's, writable by others, a symlink."""


def kind_of(mode: int) -> str:
    """'a named pipe', 'a directory', ... for a non-regular file's st_mode."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_regular(fd: int, path: str) -> os.stat_result:
    """fstat ``fd``; NotRegularFile (naming ``path`` and what it is) unless it is a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(errno.EINVAL, f"{path} is {kind_of(st.st_mode)}, not a regular file")
    return st


def check_owned(st: os.stat_result, path: str, *, directory: bool = False, sticky_ok: bool = False) -> None:
    """Untrusted unless ``st`` (an lstat or fstat) is a regular file (a directory when
    ``directory``), owned by this user or root and not writable by group or others: a file
    someone else could have written must not steer this process (a library it loads, a plan it
    applies, a directory it creates files in). ``sticky_ok``: a directory writable by others is
    accepted with the sticky bit (/tmp, /dev/shm: nobody can remove or replace what we put there)."""
    if stat.S_ISLNK(st.st_mode):
        raise Untrusted(errno.ELOOP, f"{path} is a symlink")
    want, what = (stat.S_ISDIR, "a directory") if directory else (stat.S_ISREG, "a regular file")
    if not want(st.st_mode):
        raise Untrusted(errno.EINVAL, f"{path} is not {what} ({kind_of(st.st_mode)})")
    if st.st_uid not in (os.getuid(), 0):
        raise Untrusted(errno.EPERM, f"{path} belongs to uid {st.st_uid}, not to this user ({os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        raise Untrusted(errno.EPERM, f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")


def read_regular(
    path: str, max_bytes: int, *, truncate: bool = False, follow_symlinks: bool = True, owned: bool = False
) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``.

    Never blocks (O_NONBLOCK: a FIFO is refused, not waited on). OSError when it cannot be
    opened (FileNotFoundError, PermissionError, ...) or is not a regular file
    (NotRegularFile); FileTooLarge beyond ``max_bytes`` unless ``truncate`` (then the first
    ``max_bytes``: /proc files report size 0, so the bound is counted while reading).
    ``owned``: Untrusted unless check_owned accepts the file opened (checked on its descriptor,
    so the file checked is the file read).
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = check_regular(fd, path)
        if owned:
            check_owned(st, path)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        if not truncate:
            raise FileTooLarge(f"{path} is larger than {max_bytes} bytes")
        data = data[:max_bytes]
    return data


def parse_json(raw: bytes | str, what: str) -> Any:
    """JSON text to Python; ValueError naming ``what`` for garbled or too deeply nested text."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to be tf_autopar's") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not UTF-8 text ({exc.reason})") from None


def read_json(path: str, max_bytes: int, **options: Any) -> Any:
    """The JSON content of a regular file (see read_regular and its options); ValueError when it is not JSON."""
    return parse_json(read_regular(path, max_bytes, **options), path)


def write_json_atomic(path: str, data: Any, **dump_options: Any) -> None:
    """Write ``data`` as JSON to ``path`` (see write_text_atomic)."""
    write_text_atomic(path, json.dumps(data, **dump_options))


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path``: a temporary file in the same directory, then a rename (a
    symlink at ``path`` is replaced, never written through)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` as write_text_atomic does."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
