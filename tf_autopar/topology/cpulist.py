"""Parse and format the kernel's CPU list syntax ("0-3,8,10-11").

Used for /sys/devices/system/cpu/online, node cpulists, thread_siblings_list,
Cpus_allowed_list and cpuset files. Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from tf_autopar._text import is_uint

# Linux allows at most 8192 CPUs (NR_CPUS); anything far beyond is garbage that must not be
# expanded into a set ("0-4294967295" would allocate until memory runs out).
MAX_CPU_ID = (1 << 16) - 1


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Return the sorted CPU ids of a kernel cpulist such as ``"0-3,8,10-11"``.

    An empty string (an empty cpuset) gives ``()``. Stride syntax ``"0-8:2"`` (allowed by
    the kernel's bitmap parser) is accepted. Anything else, including a CPU id above
    MAX_CPU_ID or a digit that is not ASCII, raises ValueError naming the list and the
    offending piece, so callers can turn it into a warning with the file's name.
    """
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return ()
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        stride = 1
        if ":" in piece:
            piece, _, stride_text = piece.partition(":")
            stride = _nonneg(stride_text.split("/")[0], text)
            if stride == 0:
                raise ValueError(f"bad cpulist {text!r}: zero stride")
        if "-" in piece:
            lo_text, _, hi_text = piece.partition("-")
            lo, hi = _nonneg(lo_text, text), _nonneg(hi_text, text)
            if hi < lo:
                raise ValueError(f"bad cpulist {text!r}: range {piece!r} runs backwards")
            cpus.update(range(lo, hi + 1, stride))
        else:
            cpus.add(_nonneg(piece, text))
    return tuple(sorted(cpus))


def _nonneg(token: str, whole: str) -> int:
    token = token.strip()
    if not is_uint(token):
        raise ValueError(f"bad cpulist {whole!r}: {token!r} is not a CPU number")
    if len(token) > 6 or int(token) > MAX_CPU_ID:
        raise ValueError(f"bad cpulist {whole!r}: CPU {token} is beyond the largest CPU id {MAX_CPU_ID}")
    return int(token)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Inverse of parse_cpulist: ``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
