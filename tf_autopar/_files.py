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

_KINDS = ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotRegularFile(OSError):
    """The path exists but is not a regular file (a FIFO, a device, a directory, a socket)."""


class FileTooLarge(ValueError):
    """The file holds more than the caller's bound."""


def kind_of(mode: int) -> str:
    """'a named pipe', 'a directory', ... for a non-regular file's st_mode."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_regular(fd: int, path: str) -> os.stat_result:
    """fstat ``fd``; NotRegularFile (naming ``path`` and what it is) unless it is a regular file."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(errno.EINVAL, f"{path} is {kind_of(st.st_mode)}, not a regular file")
    return st


def read_regular(path: str, max_bytes: int, *, truncate: bool = False, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``.

    Never blocks (O_NONBLOCK: a FIFO is refused, not waited on). OSError when it cannot be
    opened (FileNotFoundError, PermissionError, ...) or is not a regular file
    (NotRegularFile); FileTooLarge beyond ``max_bytes`` unless ``truncate`` (then the first
    ``max_bytes``: /proc files report size 0, so the bound is counted while reading).
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        check_regular(fd, path)
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


def read_json(path: str, max_bytes: int) -> Any:
    """The JSON content of a regular file (see read_regular); ValueError when it is not JSON."""
    return parse_json(read_regular(path, max_bytes), path)


def write_json_atomic(path: str, data: Any, **dump_options: Any) -> None:
    """Write ``data`` as JSON to ``path`` (see write_text_atomic)."""
    write_text_atomic(path, json.dumps(data, **dump_options))


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path``: a temporary file in the same directory, then a rename (a
    symlink at ``path`` is replaced, never written through)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
