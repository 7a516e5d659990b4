"""Which share of the host a worker takes: small readers tried in order, first match wins.

Gunicorn/uvicorn workers, multiprocessing pools, Horovod or tf.distribute ranks each call
``enable()``; each must size its pools for its share of the host, not for the whole host.
``claim_share(topology)`` decides that share; it has no side effect except holding a lease
slot when it needs one. Each reader takes the ``Request`` (the topology, the environment, the
ranks read from it and what the caller said) and returns a ``Share`` (its ``source`` and
``note`` say why) or None when its rule does not apply (``READERS``, in this order):

1. ``placed_share``: the process's affinity mask is already narrower than its cgroup allows
   (numactl, taskset, mpirun binding), or ``tf-autopar run`` started it: that placement is
   kept, nothing is split, nothing is pinned.
2. ``ranks_share``: ranks from the environment (ranks.py: LOCAL_RANK/LOCAL_WORLD_SIZE, Open
   MPI, MPICH, Slurm, TF_CONFIG), unless the caller's count says otherwise: worker ``rank`` of
   ``size`` gets slice ``rank`` (slices.py). No files.
3. ``ray_share``: a Ray worker (ray_grant.py) that was granted CPUs, when no count or rank
   decides: the grant is the budget and sets the count of slots (``floor(usable cores /
   grant)``); the lease gives the slot (source "ray").
4. ``count_share``: a worker count but no rank (``count=``, TF_AUTOPAR_INSTANCES,
   WEB_CONCURRENCY): the lease (lease.py) gives the index, the lowest free slot. A slot at or
   beyond the count (more processes than announced, e.g. a restarted worker overlapping its
   predecessor) reuses slice ``slot mod count`` and says so in ``note`` (also for ray_share).
5. ``rendezvous_share``: no count at all: the lease still gives the slot, and the workers that
   start within TF_AUTOPAR_RENDEZVOUS_S (default 1 s) of each other meet (rendezvous.py):
   worker ``rank`` of the ``count`` that met (source "rendezvous"); one alone gets the whole
   host (source "single") after waiting out the window. A worker arriving later takes a rank a
   worker left free, else warns once and takes a slice of the slots held now, which overlaps
   the earlier workers; once no worker holding a rank is left, the next one opens a fresh
   window. With the rendezvous off (0 s) the count is the number of slots held at claim time.
   Announce the count (TF_AUTOPAR_INSTANCES=N) for exact, wait-free, disjoint slices.

When the lease cannot be used (unwritable or corrupt directory), readers 3 to 5 fall back to
"even-split": no index, no pinning, a CPU budget of capacity // count (1 process when the
count is unknown), and one warning. Never an exception.

More workers than cores: see the sharing rule in slices.py (one core per worker, shared,
1 x 1 threads each). A count or size read from outside is bounded where it is read
(slices.bound_count): above the usable cores one warning, above 8 workers per core a cap for a
count (a rank's size is kept: ranks cannot be renumbered, and a slice costs the same for any size).
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple, Sequence

from tf_autopar import _warn
from tf_autopar.coordination import rendezvous
from tf_autopar.coordination.lease import Lease, LeaseError, acquire, default_root, group_key, live_peers, pid_alive
from tf_autopar.coordination.ranks import LAUNCHER, PAIRS, Ranks, detect_ranks
from tf_autopar.coordination.ray_grant import SOURCE as RAY_SOURCE, RayGrant, grant_layout, read_grant
from tf_autopar.coordination.share import Share, from_slice, whole
from tf_autopar.coordination.slices import bound_count, capacity_cores, doubled_up, slice_for
from tf_autopar.topology.model import Topology

log = logging.getLogger("tf_autopar.coordination")


@dataclass(frozen=True)
class Request:
    """What the readers read: this worker's host, its environment and what its caller said."""

    topology: Topology
    env: Mapping[str, str]
    ranks: Ranks  # detect_ranks(env)
    count: int | None = None  # the number of workers, when the caller knows it (wins over the environment's)
    lease_dir: str | None = None  # the lease root (default TF_AUTOPAR_LEASE_DIR, else /dev/shm/tf_autopar-<uid>)
    argv: Sequence[str] | None = None  # the program, for the lease group (default sys.argv)
    grant: RayGrant | None = None  # Ray's CPU grant, when the caller has it (default: asked of Ray, ``granted``)

    @classmethod
    def of(
        cls,
        topology: Topology,
        env: Mapping[str, str] | None = None,
        *,
        lease_dir: str | None = None,
        count: int | None = None,
        argv: Sequence[str] | None = None,
        local_names: Sequence[str] | None = None,
        grant: RayGrant | None = None,
    ) -> "Request":
        """The request for ``claim_share``'s arguments, with the ranks read from ``env`` (default
        os.environ; their warnings said once). ValueError on a bad ``count``."""
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"count must be a positive integer, got {count!r}")
        env = os.environ if env is None else env
        if local_names is None:  # the host's names only matter for TF_CONFIG's addresses
            local_names = _local_names() if "TF_CONFIG" in env else ()
        ranks = detect_ranks(env, local_names)
        for w in ranks.warnings:
            _warn_once("ranks:" + w, f"tf_autopar: {w}")
        return cls(topology, env, ranks, count, lease_dir, argv, grant)

    @functools.cached_property
    def granted(self) -> RayGrant | None:
        """Ray's CPU grant when no count or rank decides (ray_grant.py), else None. Asked of Ray
        at most once per request, and only by a reader that gets that far."""
        if self.count is not None or self.ranks.rank is not None:
            return None
        return self.grant if self.grant is not None else read_grant(self.env)


Reader = Callable[[Request], Share | None]


def claim_share(
    topology: Topology,
    env: Mapping[str, str] | None = None,
    *,
    lease_dir: str | None = None,
    count: int | None = None,
    argv: Sequence[str] | None = None,
    local_names: Sequence[str] | None = None,
    grant: RayGrant | None = None,
) -> Share:
    """Decide this worker's share of the host: the first of READERS that has one (module
    docstring). Never raises on environment or lease trouble (warns once and falls back);
    ValueError on a bad ``count``.

    ``lease_dir``: the lease root (default TF_AUTOPAR_LEASE_DIR, else /dev/shm/tf_autopar-<uid>).
    ``count``: the number of workers, when the caller knows it (wins over the environment's count).
    ``grant``: Ray's CPU grant (default: read from Ray inside a Ray worker, ray_grant.py).
    """
    request = Request.of(
        topology, env, local_names=local_names, lease_dir=lease_dir, count=count, argv=argv, grant=grant
    )
    for reader in READERS:
        share = reader(request)
        if share is not None:
            return share
    raise AssertionError("rendezvous_share decides whenever no count is known")  # unreachable


def placed(topology: Topology) -> bool:
    """True when someone already narrowed this process's mask below what its cgroup allows."""
    allowed = len(topology.cpuset) if topology.cpuset else topology.host_cpus
    return bool(topology.affinity) and 0 < len(topology.affinity) < allowed


def placed_share(request: Request) -> Share | None:
    """1. Started by ``tf-autopar run``, or already placed (``placed``): the whole mask, kept as it is."""
    ranks, topology = request.ranks, request.topology
    if ranks.source == LAUNCHER:
        source, why = LAUNCHER, "started by `tf-autopar run`, which already bound it"
    elif placed(topology):
        source, why = (
            "placed",
            f"its affinity mask ({len(topology.affinity)} CPUs) was already narrowed by its launcher",
        )
    else:
        return None
    return whole(topology, source, ranks.size or 1, ranks.rank, f"placement kept: {why}")


def ranks_share(request: Request) -> Share | None:
    """2. A rank and size from the environment, the caller's count (if any) the same size: slice ``rank``."""
    ranks, topology = request.ranks, request.topology
    if ranks.rank is None or ranks.size is None or request.count not in (None, ranks.size):
        return None
    if ranks.size == 1:
        return whole(topology, ranks.source, 1, 0, "the only local worker")
    _warn_count(bound_count(ranks.size, topology, _size_text(ranks), cap=False)[1])
    s = slice_for(topology, ranks.rank, ranks.size)
    return from_slice(s, ranks.size, ranks.source, topology, f"rank {ranks.rank} of {ranks.size} from {ranks.source}")


def ray_share(request: Request) -> Share | None:
    """3. Ray's CPU grant (``Request.granted``): a budget of the grant's floor, the slots of that size
    on the usable cores, and the lease's slot."""
    grant = request.granted
    if grant is None:
        return None
    usable = len(capacity_cores(request.topology))
    layout = grant_layout(grant.cpus, usable)
    slot = take_slot(request, layout.count, layout.note(grant.cpus, usable))
    if isinstance(slot, Share):  # the lease cannot be used: the even split
        return slot
    return slot_share(request.topology, slot, layout.count, RAY_SOURCE, budget=layout.budget)


def count_share(request: Request) -> Share | None:
    """4. A worker count (the caller's, else the environment's, bounded there) and the lease's slot."""
    n = request.count if request.count is not None else request.ranks.size
    if n is None:
        return None
    what = f"count={n}" if request.count is not None else f"{request.ranks.source.removeprefix('env:')}={n}"
    n, message = bound_count(n, request.topology, what)  # before any slot or slice depends on it
    _warn_count(message)
    slot = take_slot(request, n, "count given" if request.count is not None else f"count from {request.ranks.source}")
    if isinstance(slot, Share):  # the lease cannot be used: the even split
        return slot
    return slot_share(request.topology, slot, n, "lease")


def rendezvous_share(request: Request) -> Share | None:
    """5. No count known: the lease's slot, and the workers starting together meet (rendezvous.py);
    without a meeting, a slice of the slots held now."""
    if request.count is not None or request.ranks.size is not None or request.granted is not None:
        return None
    slot = take_slot(request, None, "no count known")
    if isinstance(slot, Share):  # the lease cannot be used: the even split
        return slot
    topology, lease, k = request.topology, slot.lease, slot.lease.index
    window = rendezvous.window_s(request.env)
    if window > 0:
        met = _meet(topology, slot, window)
        if met is not None:
            return met
    n_seen = max(len(live_peers(slot.directory, lease.fd)) + 1, k + 1) if window > 0 else max(lease.active, k + 1)
    if n_seen == 1:
        return whole(
            topology, "single", 1, k, slot.note + "; no other worker holds a slot: the whole host", lease=lease
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
    return from_slice(s, n_seen, "lease", topology, slot.note + f"; {n_seen} slots held at claim time", lease)


#: The readers claim_share tries, in order; the first share wins.
READERS: tuple[Reader, ...] = (placed_share, ranks_share, ray_share, count_share, rendezvous_share)


class Slot(NamedTuple):
    """A lease slot taken for a claim, and the note's start: where, the count's source, its history."""

    lease: Lease
    directory: str
    note: str


def take_slot(request: Request, n: int | None, count_note: str) -> Slot | Share:
    """The lowest free slot of this program's lease group, for ``n`` workers (None: unknown); when the
    lease cannot be used, the even split instead (one warning)."""
    root = request.lease_dir if request.lease_dir is not None else default_root(request.env)[0]
    directory = os.path.join(root, group_key(request.env, request.argv, request.topology.affinity))
    try:  # the root is checked as strictly when given as when it is the default
        lease = acquire(directory, count=n, strict_root=root, argv=request.argv)
    except (LeaseError, OSError) as exc:
        return _even_split(request.topology, n, f"{exc}")
    note = f"lease slot {lease.index} in {directory}; {count_note}"
    prev = lease.previous
    if prev is None:
        note += "; the slot's status was garbled and has been rewritten"
        log.info("tf_autopar: lease slot %s had garbled status content; rewritten", lease.path)
    elif prev.get("pid") and prev.get("pid") != os.getpid():
        alive = pid_alive(prev.get("pid"))
        note += f"; {'handed over by' if alive else 'reclaimed from'} pid {prev.get('pid')} ({'released' if alive else 'exited'})"
    return Slot(lease, directory, note)


def slot_share(topology: Topology, slot: Slot, n: int, source: str, *, budget: int | None = None) -> Share:
    """Slice ``slot`` of ``n`` (the whole host for the only worker); a slot at or beyond ``n`` doubles up
    on slice ``slot mod n``. ``budget``: at most this many CPUs to plan for (a Ray grant's floor)."""
    lease, k = slot.lease, slot.lease.index
    if n == 1 and k == 0:
        return whole(topology, source, 1, 0, slot.note + "; the only worker", lease=lease, budget=budget)
    if k >= n:  # more processes than announced: double up on slice k mod n, half its budget
        note = slot.note + f"; more processes than the count {n}: shares slice {k % n} with its holder"
        return from_slice(doubled_up(topology, k, n), n, source, topology, note, lease)
    s = slice_for(topology, k, n)
    if budget is not None and s.cores > budget:  # a fractional grant above 1: plan for its floor
        s = s._replace(cores=budget)
    return from_slice(s, n, source, topology, slot.note, lease)


def _meet(topology: Topology, slot: Slot, window: float) -> Share | None:
    """The share the rendezvous decides: alone (the whole host at once), or met; None when it decided
    nothing (a latecomer, warned once, or a slot that cannot be written): count the slots held."""
    lease, k = slot.lease, slot.lease.index
    try:
        if rendezvous.alone(lease):
            note = f"{slot.note}; no other worker and no sibling process: the whole host, without waiting"
            return whole(topology, "single", 1, k, note, lease=lease)
        met = rendezvous.meet(lease, window)
    except OSError as exc:  # the slot cannot be written: as without a rendezvous
        log.info("tf_autopar: rendezvous in %s failed (%s); counting the slots held now", slot.directory, exc)
        return None
    if isinstance(met, rendezvous.Met):
        if met.count == 1:
            return whole(topology, "single", 1, k, f"{slot.note}; {met.note}", lease=lease)
        s = slice_for(topology, met.rank, met.count)
        return from_slice(s, met.count, "rendezvous", topology, f"{slot.note}; {met.note}", lease, index=met.rank)
    if isinstance(met, rendezvous.Late):
        _warn_once("no-count-late", met.message)
    return None


def _even_split(topology: Topology, n: int | None, why: str) -> Share:
    """No index, no pinning: capacity // n CPUs to plan for (the whole host for one or an unknown count)."""
    cap = len(capacity_cores(topology, n or 1))
    if n is None or n == 1:
        _warn_once("lease:" + why, f"tf_autopar: lease unusable ({why}); planning for the whole host as one process")
        return whole(topology, "even-split", 1, None, f"lease unusable: {why}")
    budget = max(1, cap // n)
    _warn_once(
        "lease:" + why,
        (
            f"tf_autopar: lease unusable ({why}); falling back to an even split: {budget} of {cap} CPUs for each of "
            f"{n} workers, no pinning"
        ),
    )
    return whole(topology, "even-split", n, None, f"lease unusable: {why}; budget {cap} // {n} workers", budget=budget)


def _local_names() -> tuple[str, ...]:
    import socket  # deferred: only for a TF_CONFIG, and enable() does not import socket otherwise

    try:
        name = socket.gethostname()
    except OSError:
        return ()
    return (name, name.split(".")[0])


def _size_text(ranks: Ranks) -> str:
    """Where a rank source's size was read: "LOCAL_WORLD_SIZE=4", "TF_CONFIG's 4 local tasks"."""
    rank_var = ranks.source.removeprefix("env:")
    size_var = next((size for rank, size in PAIRS if rank == rank_var), None)
    return f"{size_var}={ranks.size}" if size_var else f"{rank_var}'s {ranks.size} local tasks"


def _warn_count(message: str) -> None:
    if message:
        _warn_once("count:" + message.split(":")[0], f"tf_autopar: {message}")


def _warn_once(key: str, message: str) -> None:
    _warn.warn_once(key, message, log.name)
