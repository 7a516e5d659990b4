"""Setting a CPU mask: the one place tf_autopar calls ``os.sched_setaffinity``.

enable() binds its own process (runtime/applied.py, which also puts the mask back), a
cooperating worker binds to its share (coordination), and the launcher and the validation
runner bind a child between fork and exec: all of them go through here, so what "bound" means
(which threads, which errors) is one thing.
"""

from __future__ import annotations

import os
from typing import Callable, Collection, Iterable


def threads() -> list[int]:
    """This process's thread ids ([0], the calling thread, when /proc cannot be listed)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def set_affinity(cpus: Collection[int], tids: Iterable[int] = (0,)) -> None:
    """Put each of ``tids`` (0: the calling thread, whose later threads inherit the mask) on
    ``cpus``. A thread that exited meanwhile is skipped; OSError or ValueError when the kernel
    refuses the mask (a cpuset that forbids those CPUs)."""
    mask = set(cpus)
    for tid in tids:
        try:
            os.sched_setaffinity(tid, mask)
        except ProcessLookupError:
            continue


def binder(cpus: Collection[int]) -> Callable[[], None]:
    """A ``preexec_fn`` that binds the child to ``cpus`` between fork and exec."""
    mask = tuple(cpus)

    def bind() -> None:
        set_affinity(mask)

    return bind
