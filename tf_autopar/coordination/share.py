"""A worker's share of the host (``Share``), how one is built from a slice or the whole mask, and binding to it.

``claim.py`` decides a share when the worker starts, ``reshare.py`` cuts it again when the
host's CPU limits change; both build it with ``from_slice`` or ``whole``, so a share says the
same things (its note, its budget, whether it is pinned) whichever decided it.
``apply_affinity(share)`` binds the process (the runtime calls it); ``share.topology(topology)``
is what the planner then plans for.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from tf_autopar import _warn
from tf_autopar.coordination.lease import Lease
from tf_autopar.coordination.slices import Slice, capacity_cores, restrict
from tf_autopar.topology import affinity
from tf_autopar.topology.cpulist import format_cpulist
from tf_autopar.topology.model import Topology

log = logging.getLogger("tf_autopar.coordination")

#: The part of a note that ``from_slice`` adds for a slice under the sharing rule (a re-cut drops it, then adds it anew).
SHARING_NOTE = re.compile(r"; \d+ workers for \d+ core\(s\): [^;]*\(sharing rule\)")


@dataclass(frozen=True)
class Share:
    """This process's part of the host: which CPUs, how many to plan for, and why."""

    index: int | None  # worker index; None when unknown (even-split)
    count: int  # workers sharing the host (as known)
    cpus: tuple[int, ...]  # CPUs this worker may use (the whole mask when not pinned)
    source: str  # "env:LOCAL_RANK", "env:TF_CONFIG", ..., "lease", "even-split", "single", "placed"
    shared_with: int = 1  # workers on these CPUs, this one included (sharing rule when > 1)
    note: str = ""
    budget: int = 1  # CPUs to plan for
    pin: bool = False  # apply_affinity() binds to ``cpus``
    _lease: Lease | None = field(default=None, repr=False, compare=False)

    def topology(self, topology: Topology) -> Topology:
        """``topology`` limited to this share: the planner's input for this worker."""
        if set(self.cpus) == set(topology.affinity) and self.budget >= topology.cpu_budget:
            return topology
        return restrict(topology, self.cpus, self.budget)

    @property
    def lease(self) -> Lease | None:
        """The lease slot this share holds (None without one): a re-cut share keeps it."""
        return self._lease

    @property
    def lease_slot(self) -> int | None:
        return self._lease.index if self._lease is not None else None

    @property
    def lease_held(self) -> bool:
        """Whether this process still holds its lease slot (not released, not a forked copy)."""
        return self._lease is not None and self._lease.held

    def release(self) -> None:
        """Give the lease slot back now (process exit does it too)."""
        if self._lease is not None:
            self._lease.release()

    def __enter__(self) -> "Share":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "count": self.count,
            "cpus": list(self.cpus),
            "source": self.source,
            "shared_with": self.shared_with,
            "note": self.note,
            "budget": self.budget,
            "pin": self.pin,
            "lease_slot": self.lease_slot,
        }


def from_slice(
    s: Slice,
    count: int,
    source: str,
    topology: Topology,
    note: str = "",
    lease: Lease | None = None,
    index: int | None = None,
) -> Share:
    """The share of slice ``s`` of ``count``: pinned unless the slice is the whole mask; a slice under the
    sharing rule says so in its note (SHARING_NOTE).

    ``index``: the worker's index when neither the slice's nor the lease slot's (a rendezvous rank)."""
    whole_mask = set(s.cpus) == set(topology.affinity)
    if s.shared_with > 1:
        note = (note + "; " if note else "") + (
            f"{count} workers for {len(capacity_cores(topology, count))} core(s): {s.shared_with} workers share CPUs "
            f"{format_cpulist(s.cpus)}, unpinned among them, 1 x 1 threads each (sharing rule)"
        )
    if index is None:
        index = s.index if lease is None else lease.index
    return Share(index, count, s.cpus, source, s.shared_with, note, budget=s.cores, pin=not whole_mask, _lease=lease)


def whole(
    topology: Topology,
    source: str,
    count: int,
    index: int | None,
    note: str,
    budget: int | None = None,
    lease: Lease | None = None,
) -> Share:
    """The share of the whole mask, unpinned, planning for ``budget`` CPUs (default: the topology's budget)."""
    b = int(topology.cpu_budget) if budget is None else budget
    return Share(index, count, tuple(topology.affinity), source, 1, note, budget=max(1, b), pin=False, _lease=lease)


def apply_affinity(share: Share, pid: int = 0, *, all_threads: bool = False) -> bool:
    """Bind to ``share.cpus`` when the share asks for it (``share.pin``).

    ``pid`` 0 = the calling thread: threads started afterwards (TensorFlow's pools) inherit the
    mask, so call it before TensorFlow starts. ``all_threads=True`` also moves every existing
    thread of this process (for a late call). Returns True when bound; on failure (a cpuset
    forbids it) warns once and returns False.
    """
    if not share.pin or not share.cpus:
        return False
    try:
        affinity.set_affinity(share.cpus, affinity.threads() if all_threads and pid == 0 else (pid,))
    except (OSError, ValueError) as exc:
        _warn.warn_once(
            "affinity", f"tf_autopar: cannot bind to CPUs {list(share.cpus)} ({exc}); left unbound", log.name
        )
        return False
    return True
