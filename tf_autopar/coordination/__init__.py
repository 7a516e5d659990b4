"""Cooperative planning for several TensorFlow processes on one host, without the launcher.

Gunicorn/uvicorn workers, multiprocessing pools, Horovod or tf.distribute ranks each call
``enable()``; each must size its pools for its share of the host, not for the whole host.
``claim_share(topology)`` decides that share; it has no side effect except holding a lease
slot when it needs one. ``apply_affinity(share)`` binds the process (the runtime calls it);
``share.topology(topology)`` is what the planner then plans for.

How the share is decided, first match wins:

1. placed: the process's affinity mask is already narrower than its cgroup allows (numactl,
   taskset, mpirun binding, ``tf-autopar run``): that placement is kept, nothing is split,
   nothing is pinned.
2. ranks from the environment (see ranks.py: LOCAL_RANK/LOCAL_WORLD_SIZE, Open MPI, MPICH,
   Slurm, TF_CONFIG): worker ``rank`` of ``size`` gets slice ``rank`` (slices.py). No files.
3. a worker count but no rank (``count=``, TF_AUTOPAR_INSTANCES, WEB_CONCURRENCY): the lease
   (lease.py) gives the index, the lowest free slot. A slot at or beyond the count (more
   processes than announced, e.g. a restarted worker overlapping its predecessor) reuses
   slice ``slot mod count`` and says so in ``note``.
4. no count at all: the lease still gives the slot, and the workers that start within
   TF_AUTOPAR_RENDEZVOUS_S (default 1 s) of each other meet (rendezvous.py): worker ``rank`` of
   the ``count`` that met (source "rendezvous"); one alone gets the whole host (source
   "single") after waiting out the window. A worker arriving later takes a rank a worker left
   free, else warns once and takes a slice of the slots held now, which overlaps the earlier
   workers; once no worker holding a rank is left, the next one opens a fresh window. With the
   rendezvous off (0 s) the count is the number of slots held at claim time.
   Announce the count (TF_AUTOPAR_INSTANCES=N) for exact, wait-free, disjoint slices.
   A Ray worker (ray_grant.py) that was granted CPUs: the grant is the budget and sets the
   count of slots (``floor(usable cores / grant)``); the lease gives the slot (source "ray").
5. the lease cannot be used (unwritable or corrupt directory): "even-split": no index, no
   pinning, a CPU budget of capacity // count (1 process when the count is unknown), and one
   warning. Never an exception.

More workers than cores: see the sharing rule in slices.py (one core per worker, shared,
1 x 1 threads each). A count or size read from outside is bounded where it is read
(slices.bound_count): above the usable cores one warning, above 8 workers per core a cap for a
count (a rank's size is kept: ranks cannot be renumbered, and a slice costs the same for any size).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tf_autopar import _warn
from tf_autopar.coordination import ray_grant, rendezvous
from tf_autopar.coordination.lease import (
    Lease,
    LeaseError,
    acquire,
    default_root,
    group_key,
    lease_status,
    live_peers,
    pid_alive,
)
from tf_autopar.coordination.ranks import LAUNCHER, PAIRS, Ranks, detect_ranks
from tf_autopar.coordination.slices import Slice, bound_count, capacity_cores, restrict, slice_for, split
from tf_autopar.topology.cpulist import format_cpulist
from tf_autopar.topology import affinity
from tf_autopar.topology.model import Topology

log = logging.getLogger("tf_autopar.coordination")

__all__ = [
    "LeaseError",
    "Ranks",
    "Share",
    "Slice",
    "apply_affinity",
    "claim_share",
    "detect_ranks",
    "lease_status",
    "restrict",
    "split",
]


def _warn_once(key: str, message: str) -> None:
    _warn.warn_once(key, message, log.name)


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


def _local_names() -> tuple[str, ...]:
    try:
        import socket

        name = socket.gethostname()
    except OSError:
        return ()
    return (name, name.split(".")[0])


def placed(topology: Topology) -> bool:
    """True when someone already narrowed this process's mask below what its cgroup allows."""
    allowed = len(topology.cpuset) if topology.cpuset else topology.host_cpus
    return bool(topology.affinity) and 0 < len(topology.affinity) < allowed


def _from_slice(
    s: Slice,
    count: int,
    source: str,
    topology: Topology,
    note: str = "",
    lease: Lease | None = None,
    index: int | None = None,
) -> Share:
    """``index``: the worker's index when neither the slice's nor the lease slot's (a rendezvous rank)."""
    whole = set(s.cpus) == set(topology.affinity)
    if s.shared_with > 1:
        note = (note + "; " if note else "") + (
            f"{count} workers for {len(capacity_cores(topology, count))} core(s): {s.shared_with} workers share CPUs "
            f"{format_cpulist(s.cpus)}, unpinned among them, 1 x 1 threads each (sharing rule)"
        )
    if index is None:
        index = s.index if lease is None else lease.index
    return Share(index, count, s.cpus, source, s.shared_with, note, budget=s.cores, pin=not whole, _lease=lease)


def _whole(
    topology: Topology,
    source: str,
    count: int,
    index: int | None,
    note: str,
    budget: int | None = None,
    lease: Lease | None = None,
) -> Share:
    b = int(topology.cpu_budget) if budget is None else budget
    return Share(index, count, tuple(topology.affinity), source, 1, note, budget=max(1, b), pin=False, _lease=lease)


def claim_share(
    topology: Topology,
    env: Mapping[str, str] | None = None,
    *,
    lease_dir: str | None = None,
    count: int | None = None,
    argv: Sequence[str] | None = None,
    local_names: Sequence[str] | None = None,
    grant: ray_grant.RayGrant | None = None,
) -> Share:
    """Decide this worker's share of the host (rules in the module docstring). Never raises on
    environment or lease trouble (warns once and falls back); ValueError on a bad ``count``.

    ``lease_dir``: the lease root (default TF_AUTOPAR_LEASE_DIR, else /dev/shm/tf_autopar-<uid>).
    ``count``: the number of workers, when the caller knows it (wins over the environment's count).
    ``grant``: Ray's CPU grant (default: read from Ray inside a Ray worker, ray_grant.py).
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"count must be a positive integer, got {count!r}")
    env = os.environ if env is None else env
    if local_names is None:  # the host's names only matter for TF_CONFIG's addresses
        local_names = _local_names() if "TF_CONFIG" in env else ()
    ranks = detect_ranks(env, local_names)
    for w in ranks.warnings:
        _warn_once("ranks:" + w, f"tf_autopar: {w}")

    if ranks.source == LAUNCHER or placed(topology):
        why = (
            "started by `tf-autopar run`, which already bound it"
            if ranks.source == LAUNCHER
            else f"its affinity mask ({len(topology.affinity)} CPUs) was already narrowed by its launcher"
        )
        return _whole(
            topology,
            ranks.source if ranks.source == LAUNCHER else "placed",
            ranks.size or 1,
            ranks.rank,
            f"placement kept: {why}",
        )

    if ranks.rank is not None and ranks.size is not None and count in (None, ranks.size):
        if ranks.size == 1:
            return _whole(topology, ranks.source, 1, 0, "the only local worker")
        _warn_count(bound_count(ranks.size, topology, _size_text(ranks), cap=False)[1])
        s = slice_for(topology, ranks.rank, ranks.size)
        return _from_slice(
            s, ranks.size, ranks.source, topology, f"rank {ranks.rank} of {ranks.size} from {ranks.source}"
        )

    layout, usable = None, len(capacity_cores(topology))
    if count is None and ranks.rank is None:  # a Ray worker's grant, when no rank or count decides
        grant = grant if grant is not None else ray_grant.read_grant(env)
        if grant is not None:
            layout = ray_grant.grant_layout(grant.cpus, usable)
            count = layout.count
    n = count if count is not None else ranks.size
    if n is not None and layout is None:  # read from outside: bounded here, before any slot or slice depends on it
        n, message = bound_count(
            n, topology, f"count={n}" if count is not None else f"{ranks.source.removeprefix('env:')}={n}"
        )
        _warn_count(message)
    if layout is not None and grant is not None:
        count_note = layout.note(grant.cpus, usable)
    else:
        count_note = "count given" if count is not None else (f"count from {ranks.source}" if n else "no count known")
    root = lease_dir if lease_dir is not None else default_root(env)[0]
    directory = os.path.join(root, group_key(env, argv, topology.affinity))
    try:  # the root is checked as strictly when given as when it is the default
        lease = acquire(directory, count=n, strict_root=root, argv=argv)
    except (LeaseError, OSError) as exc:
        return _even_split(topology, n, f"{exc}")

    k = lease.index
    prev = lease.previous
    note = f"lease slot {k} in {directory}; {count_note}"
    if prev is None:
        note += "; the slot's status was garbled and has been rewritten"
        log.info("tf_autopar: lease slot %s had garbled status content; rewritten", lease.path)
    elif prev.get("pid") and prev.get("pid") != os.getpid():
        alive = pid_alive(prev.get("pid"))
        note += f"; {'handed over by' if alive else 'reclaimed from'} pid {prev.get('pid')} ({'released' if alive else 'exited'})"
    if n is None:
        window = rendezvous.window_s(env)
        if window > 0:
            try:
                if rendezvous.alone(lease):
                    return _whole(
                        topology,
                        "single",
                        1,
                        k,
                        f"{note}; no other worker and no sibling process: the whole host, without waiting",
                        lease=lease,
                    )
                met = rendezvous.meet(lease, window)
            except OSError as exc:  # the slot cannot be written: as without a rendezvous
                log.info("tf_autopar: rendezvous in %s failed (%s); counting the slots held now", directory, exc)
                met = None
            if isinstance(met, rendezvous.Met):
                if met.count == 1:
                    return _whole(topology, "single", 1, k, f"{note}; {met.note}", lease=lease)
                return _from_slice(
                    slice_for(topology, met.rank, met.count),
                    met.count,
                    "rendezvous",
                    topology,
                    f"{note}; {met.note}",
                    lease,
                    index=met.rank,
                )
            if isinstance(met, rendezvous.Late):
                _warn_once("no-count-late", met.message)
        n_seen = max(len(live_peers(directory, lease.fd)) + 1, k + 1) if window > 0 else max(lease.active, k + 1)
        if n_seen == 1:
            return _whole(
                topology, "single", 1, k, note + "; no other worker holds a slot: the whole host", lease=lease
            )
        if window <= 0:
            _warn_once(
                "no-count",
                (
                    f"tf_autopar: {n_seen} cooperating processes seen but no worker count is known; slices are sized "
                    f"for {n_seen} and may overlap with workers that started earlier. Set TF_AUTOPAR_INSTANCES=N (or "
                    "WEB_CONCURRENCY) to the number of workers for disjoint slices."
                ),
            )
        s = slice_for(topology, k, n_seen)
        return _from_slice(s, n_seen, "lease", topology, note + f"; {n_seen} slots held at claim time", lease)
    source = ray_grant.SOURCE if layout is not None else "lease"
    if n == 1 and k == 0:
        return _whole(
            topology,
            source,
            1,
            0,
            note + "; the only worker",
            lease=lease,
            budget=layout.budget if layout is not None else None,
        )
    if k >= n:  # more processes than announced: double up on slice k mod n, half its budget
        base = slice_for(topology, k % n, n)
        s = Slice(k, base.cpus, max(1, base.cores // 2) if base.shared_with == 1 else 1, base.shared_with + 1)
        note += f"; more processes than the count {n}: shares slice {k % n} with its holder"
        return _from_slice(s, n, source, topology, note, lease)
    s = slice_for(topology, k, n)
    if layout is not None and s.cores > layout.budget:  # a fractional grant above 1: plan for its floor
        s = s._replace(cores=layout.budget)
    return _from_slice(s, n, source, topology, note, lease)


def _size_text(ranks: Ranks) -> str:
    """Where a rank source's size was read: "LOCAL_WORLD_SIZE=4", "TF_CONFIG's 4 local tasks"."""
    rank_var = ranks.source.removeprefix("env:")
    size_var = next((size for rank, size in PAIRS if rank == rank_var), None)
    return f"{size_var}={ranks.size}" if size_var else f"{rank_var}'s {ranks.size} local tasks"


def _warn_count(message: str) -> None:
    if message:
        _warn_once("count:" + message.split(":")[0], f"tf_autopar: {message}")


def _even_split(topology: Topology, n: int | None, why: str) -> Share:
    cap = len(capacity_cores(topology, n or 1))
    if n is None or n == 1:
        _warn_once("lease:" + why, f"tf_autopar: lease unusable ({why}); planning for the whole host as one process")
        return _whole(topology, "even-split", 1, None, f"lease unusable: {why}")
    budget = max(1, cap // n)
    _warn_once(
        "lease:" + why,
        (
            f"tf_autopar: lease unusable ({why}); falling back to an even split: {budget} of {cap} CPUs for each of "
            f"{n} workers, no pinning"
        ),
    )
    return _whole(topology, "even-split", n, None, f"lease unusable: {why}; budget {cap} // {n} workers", budget=budget)


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
        _warn_once("affinity", f"tf_autopar: cannot bind to CPUs {list(share.cpus)} ({exc}); left unbound")
        return False
    return True
