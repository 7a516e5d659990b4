"""Cut this host's usable cores into one slice per worker, and the topology a worker plans for.

Pure: Topology in, CPU ids out. The rules (documented in docs/design.md, "Production"):

- Capacity. The cores cut are the first ``min(physical cores, cpu_budget)`` cores in the
  planner's fill order (biggest socket, biggest NUMA node first). Under a cgroup quota the
  workers therefore share as many whole cores as the quota pays for, instead of spreading
  over every core and being throttled together. A fractional quota shared by two or more
  workers is rounded up instead (1.5 CPUs: 2 cores): independent workers have no barrier
  between them, so the fraction is throughput (benchmarks/bench_http.py measured both); one
  process keeps floor(quota), where an extra thread measured no better
  (benchmarks/bench_fractional_quota.py).
- N <= capacity. Slice sizes differ by at most one core (the first ``capacity % N`` slices
  get the extra core: an idle core is lost throughput for independent servers, and an extra
  core never slows a data-parallel rank). Slices are cut inside one NUMA node where the node
  has room, and inside one cache domain (and one core type on hybrid hosts) where one has
  room, like the planner's throughput streams; only leftovers cross. A slice holds
  whole physical cores: every logical CPU (SMT sibling) of its cores that is in the mask.
- N > capacity (the sharing rule). Worker i's home is core ``i mod capacity``; it plans one
  inter-op x one intra-op thread, so the host runs N threads, not N x cores, and it is not pinned
  to that core but to every capacity core of the home's placement group (kind, socket, NUMA node,
  cache domain): the scheduler puts whichever workers are busy on the group's cores. Pinned to
  one core each, two busy workers whose homes were the same core shared it while another core
  idled (a load balancer does not see homes): at 4 workers on 2 cores under gunicorn, 58 req/s
  pinned against 110 unpinned in the same round (benchmarks/bench_http.py, docs/serving.md).
  ``shared_with`` counts the workers whose homes are in the group.
- Bounds. ``slice_for`` costs the same for any N (no list of N slices is built); a count read
  from outside is checked with ``bound_count``: above the capacity it is warned about (the
  sharing rule), above MAX_WORKERS_PER_CORE workers per core it is taken for a typo and capped.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, NamedTuple, Sequence

from tf_autopar.topology.model import Core, Topology, cut_nested, ordered_cores, place_of


MAX_WORKERS_PER_CORE = 8  # more workers per usable core than this is a typo (10**12), not a deployment


class Slice(NamedTuple):
    index: int
    cpus: tuple[int, ...]  # every logical CPU of the slice's cores inside the affinity mask, sorted
    cores: int  # physical cores in the slice (the worker's CPU budget)
    shared_with: int  # workers on these cores, this one included (1 = the cores are its own)


def capacity_cores(topology: Topology, count: int = 1) -> list[Core]:
    """The cores ``count`` workers may share out, in the planner's fill order, limited to the CPU
    budget; under a fractional quota shared by several workers, to the quota rounded up."""
    ordered = ordered_cores(topology.planning_cores())
    cores = int(topology.cpu_budget)
    quota = topology.quota
    if count > 1 and quota is not None and quota.cpus > cores:
        # Independent workers have no barrier between them: on ceil(quota) cores they use the whole
        # quota (1.5 CPUs of 1.5), where floor(quota) cores leave the fraction idle.
        cores = math.ceil(quota.cpus - 1e-9)
    return ordered[: max(1, min(len(ordered), cores))]


def _sizes(total: int, n: int) -> list[int]:
    base, extra = divmod(total, n)
    return [base + 1] * extra + [base] * (n - extra)


def _cut(cores: list[Core], sizes: list[int]) -> list[list[Core]]:
    """Slices of the given sizes, each inside one core type, NUMA node and cache domain where
    one has room; the rest across the fewest (the sizes sum to len(cores): every slice is cut)."""
    return cut_nested(cores, sizes, place_of)


def _cpus(cores: Iterable[Core], mask: set[int]) -> tuple[int, ...]:
    return tuple(sorted(cpu for c in cores for cpu in c.cpus if cpu in mask))


def split(topology: Topology, count: int) -> list[Slice]:
    """One slice per worker 0..count-1 (see the module docstring for the rules)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"worker count must be a positive integer, got {count!r}")
    cores = capacity_cores(topology, count)
    mask = set(topology.affinity) or {cpu for c in cores for cpu in c.cpus}
    if count <= len(cores):
        return [Slice(i, _cpus(s, mask), len(s), 1) for i, s in enumerate(_cut(cores, _sizes(len(cores), count)))]
    return [_shared(cores, mask, i, count) for i in range(count)]


def _shared(cores: list[Core], mask: set[int], index: int, count: int) -> Slice:
    """Worker ``index``'s slice under the sharing rule (count > len(cores)): the capacity cores of
    its home core's placement group, and the workers whose homes are there."""
    home = place_of(cores[index % len(cores)])
    group = [j for j, c in enumerate(cores) if place_of(c) == home]
    per_core = _sizes(count, len(cores))  # homes on core j: O(cores) for any count
    return Slice(index, _cpus([cores[j] for j in group], mask), 1, sum(per_core[j] for j in group))


def slice_for(topology: Topology, index: int, count: int) -> Slice:
    """Worker ``index``'s slice of ``count``, as ``split`` would cut it, without building the others:
    a count of 10**12 costs what a count of 2 does."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"worker count must be a positive integer, got {count!r}")
    if not 0 <= index < count:
        raise ValueError(f"worker index {index} is outside 0..{count - 1}")
    cores = capacity_cores(topology, count)
    if count <= len(cores):
        return split(topology, count)[index]
    mask = set(topology.affinity) or {cpu for c in cores for cpu in c.cpus}
    return _shared(cores, mask, index, count)


def doubled_up(topology: Topology, index: int, count: int) -> Slice:
    """Worker ``index``'s slice when ``index`` is at or beyond ``count`` (more processes than announced, e.g.
    a restarted worker overlapping its predecessor): slice ``index mod count``, shared with its holder,
    half its cores to plan for (1 under the sharing rule)."""
    base = slice_for(topology, index % count, count)
    return Slice(index, base.cpus, max(1, base.cores // 2) if base.shared_with == 1 else 1, base.shared_with + 1)


def bound_count(count: int, topology: Topology, what: str, *, cap: bool = True) -> tuple[int, str]:
    """(the count to plan for, a warning or ""), for a worker count read from outside (``what``:
    where, e.g. "WEB_CONCURRENCY=12"). Above the usable cores: the sharing rule, said once; above
    MAX_WORKERS_PER_CORE per usable core: capped there, since no deployment runs that many.
    ``cap=False`` for a size that comes with ranks (a rank is an identity: it cannot be renumbered;
    slice_for costs the same for any size)."""
    usable = len(capacity_cores(topology, count))
    limit = usable * MAX_WORKERS_PER_CORE
    cpus = f"{usable} usable core{'s' if usable != 1 else ''}"
    if count > limit and cap:
        return limit, (
            f"{what}: more than {MAX_WORKERS_PER_CORE} workers per core for the {cpus}; capped at {limit} "
            "workers sharing the cores, 1 x 1 threads each"
        )
    if count > usable:
        return count, f"{what}: {count} workers for the {cpus}: they share cores, 1 x 1 threads each"
    return count, ""


def restrict(topology: Topology, cpus: Sequence[int], budget: int | None = None) -> Topology:
    """``topology`` as seen by a process bound to ``cpus``: mask, cores, nodes and budget shrink.

    ``budget`` (default: the physical cores kept) caps ``cpu_budget`` so that the planner
    sizes the pools for this worker's share, not for the host.
    """
    allowed = set(cpus) & set(topology.affinity or cpus)
    if not allowed:
        raise ValueError(f"none of CPUs {sorted(set(cpus))} is in this process's mask {list(topology.affinity)}")
    new_cores = tuple(
        dataclasses.replace(c, cpus=tuple(x for x in c.cpus if x in allowed))
        for c in topology.cores
        if any(x in allowed for x in c.cpus)
    )
    nodes = tuple(
        dataclasses.replace(nd, cpus=tuple(x for x in nd.cpus if x in allowed))
        for nd in topology.numa_nodes
        if any(x in allowed for x in nd.cpus)
    )
    domains = tuple(
        dataclasses.replace(d, cpus=tuple(x for x in d.cpus if x in allowed))
        for d in topology.cache_domains
        if any(x in allowed for x in d.cpus)
    )
    kinds = {c.kind for c in new_cores}
    physical = len(new_cores) or len(allowed)
    limit = physical if budget is None else max(1, min(int(budget), physical))
    return dataclasses.replace(
        topology,
        affinity=tuple(sorted(allowed)),
        cores=new_cores,
        numa_nodes=nodes,
        cpu_budget=max(1, min(int(topology.cpu_budget), limit)),
        cache_domains=domains,
        core_kinds_from=topology.core_kinds_from if len(kinds) > 1 else "",
    )
