"""Plain, frozen records of the host's CPU topology (and the memory limit of the process's cgroups).

Readers fill these; the planner consumes them. Nothing here reads the system, so
tests and the planner can build topologies by hand.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


PERFORMANCE = "performance"
EFFICIENCY = "efficiency"


@dataclass(frozen=True)
class Core:
    """One physical core, with the logical CPUs (SMT siblings) this process may use on it."""

    socket: int
    core_id: int
    cpus: tuple[int, ...]  # sorted; cpus[0] is the one a physical-cores-only plan uses
    numa_node: int = 0
    cache_domain: int | None = None  # CacheDomain.id of its last-level cache; None = unknown
    kind: str = ""  # PERFORMANCE or EFFICIENCY on hybrid hosts; "" = all cores alike (or unknown)
    capacity: int | None = None  # the kernel's relative cpu_capacity (1024 = fastest), where given


@dataclass(frozen=True)
class CacheDomain:
    """CPUs sharing one last-level cache (an AMD core complex, an Intel socket's L3).

    A thread that moves between domains, or a pool that spans two, pays cross-domain traffic
    for data the other domain's cache held: planning keeps pools inside one where they fit.
    """

    id: int  # our numbering: 0, 1, ... in order of the domains' first CPU
    level: int  # cache level (3 on most servers; 2 where the last level is an L2)
    cpus: tuple[int, ...]  # its CPUs inside this process's affinity mask
    cache_id: int | None = None  # the kernel's cache id (index*/id), when it gives one


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: tuple[int, ...]  # logical CPUs of the node inside this process's affinity mask


@dataclass(frozen=True)
class CpuQuota:
    """The tightest CFS bandwidth limit found on this process's cgroup or its ancestors."""

    cpus: float  # quota / period, e.g. 2.5
    quota_us: int
    period_us: int
    cgroup_version: int  # 1 or 2
    path: str  # the file that set the limit (as read, under the reader's root)


@dataclass(frozen=True)
class MemoryLimit:
    """The memory limit of this process's cgroups and their use, at one reading (topology/memory.py).

    The binding level is the group, of the process's own and its visible ancestors, with the least
    room left under its hard limit (limit - usage): the tightest limit when the process is alone in
    its groups, an ancestor's when siblings use the room a looser parent limit leaves. A limit at or
    above the host's RAM (v1's "unlimited" 9223372036854771712, v2's "max") is no limit.
    """

    limit_bytes: int | None  # the binding hard limit (v2 memory.max, v1 memory.limit_in_bytes); None: none
    usage_bytes: int | None  # the binding group's usage (or the process's own group's when no limit)
    cgroup_version: int  # 1 or 2, of the group read
    path: str  # the file that set the limit (or the usage file read when no limit), under the reader's root
    level: int = 0  # 0 = the process's own group, 1 = its parent, ...
    high_bytes: int | None = None  # the tightest soft limit: v2 memory.high, v1 memory.soft_limit_in_bytes
    high_path: str = ""
    peak_bytes: int | None = None  # the binding group's peak usage (v1 memory.max_usage_in_bytes, v2 memory.peak)
    reclaimable_bytes: int | None = None  # of the usage, inactive page cache (memory.stat): reclaimed before an OOM
    psi_some_avg10: float | None = None  # memory.pressure "some avg10" (% of time stalled, 10 s), v2 only
    host_bytes: int | None = None  # the host's RAM (MemTotal), against which "unlimited" was judged

    @property
    def working_set_bytes(self) -> int | None:
        """The usage less its inactive page cache (what kubelet calls the working set)."""
        if self.usage_bytes is None:
            return None
        return max(0, self.usage_bytes - (self.reclaimable_bytes or 0))

    @property
    def left_bytes(self) -> int | None:
        """Room left under the binding limit (never negative); None without a limit or a usage."""
        if self.limit_bytes is None or self.usage_bytes is None:
            return None
        return max(0, self.limit_bytes - self.usage_bytes)


@dataclass(frozen=True)
class CpuInfo:
    vendor: str = "unknown"
    model: str = "unknown"
    isa: tuple[str, ...] = ()  # notable vector/matrix extensions: avx2, avx512f, avx512_vnni, amx_tile, ...


@dataclass(frozen=True)
class ZentfPlugin:
    """The zentf plugin TensorFlow will load, and what it is built from."""

    version: str  # the distribution's version, e.g. "2.21.0.0" ("unknown" without its metadata)
    plugin: str  # path of libamdcpu_plugin.so
    zendnn: str = ""  # ZenDNN version it bundles, e.g. "v5.2.2" ("" when unreadable)
    tf_version: str = ""  # the TensorFlow it was built for, e.g. "2.21.0"
    openmp: str = ""  # the OpenMP runtime the plugin links, e.g. "libiomp5.so" ("" when unreadable)

    @property
    def llvm_openmp(self) -> bool:
        """KMP_* variables apply: the plugin links LLVM's (Intel-compatible) OpenMP runtime."""
        return self.openmp.startswith(("libiomp5", "libomp"))

    def describe(self) -> str:
        """One line for `inspect` and the plan's facts."""
        parts = [
            f"ZenDNN {self.zendnn}" if self.zendnn else "",
            f"built for TensorFlow {self.tf_version}" if self.tf_version else "",
        ]
        built = ", ".join(p for p in parts if p)
        omp = f"; its kernels run on {self.openmp}" if self.openmp else ""
        return f"zentf {self.version}" + (f" ({built})" if built else "") + f"{omp}: {self.plugin}"


@dataclass(frozen=True)
class Topology:
    """What this process may use of the host's CPUs, and why."""

    host_cpus: int  # online logical CPUs on the host
    affinity: tuple[int, ...]  # logical CPUs in this process's affinity mask
    cores: tuple[Core, ...]  # physical cores with at least one CPU in the mask
    numa_nodes: tuple[NumaNode, ...]
    cpu_budget: int  # whole CPUs this process can keep busy: min(affinity, rounded quota); see cgroup docs
    quota: CpuQuota | None = None
    cpuset: tuple[int, ...] | None = None  # the cgroup cpuset, when one restricts the host
    cpu: CpuInfo = field(default_factory=CpuInfo)
    threading_runtime: str = "unknown"  # "eigen" (stock pip TF), "openmp" (Intel builds), "unknown", "absent"
    warnings: tuple[str, ...] = ()
    cache_domains: tuple[CacheDomain, ...] = ()  # () = the host says nothing of its caches
    core_kinds_from: str = ""  # where the core types came from ("" = not a hybrid host)
    memory: MemoryLimit | None = None  # the cgroups' memory limit and use (None: no memory cgroup visible)
    zentf: ZentfPlugin | None = None  # AMD's zentf plugin, when TensorFlow will load it

    @property
    def sockets(self) -> tuple[int, ...]:
        return tuple(sorted({c.socket for c in self.cores}))

    @property
    def logical_cpus(self) -> int:
        return len(self.affinity)

    @property
    def physical_cores(self) -> int:
        return len(self.cores)

    @property
    def threads_per_core(self) -> int:
        return max((len(c.cpus) for c in self.cores), default=1)

    def planning_cores(self) -> tuple[Core, ...]:
        """The physical cores, or, when the readers found no core layout, each CPU as a core."""
        if self.cores:
            return self.cores
        if not self.affinity:
            raise ValueError("topology has no cores and no CPUs in its affinity mask")
        return tuple(Core(socket=0, core_id=cpu, cpus=(cpu,)) for cpu in self.affinity)

    @property
    def hybrid(self) -> bool:
        """Performance and efficiency cores both usable: plans treat them apart."""
        kinds = {c.kind for c in self.cores}
        return PERFORMANCE in kinds and EFFICIENCY in kinds

    def cores_on_socket(self, socket: int) -> tuple[Core, ...]:
        return tuple(c for c in self.cores if c.socket == socket)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(
            sockets=list(self.sockets),
            logical_cpus=self.logical_cpus,
            physical_cores=self.physical_cores,
            threads_per_core=self.threads_per_core,
            hybrid=self.hybrid,
        )
        return d


def ordered_cores(cores: tuple[Core, ...]) -> list[Core]:
    """Cores in the order plans and worker slices fill them: performance cores before efficiency
    cores (a budget smaller than the host gets the fast ones), then biggest socket first, its
    biggest NUMA node first, that node's biggest cache domain first (ties: lowest id), so that a
    budget takes as few sockets, nodes and cache domains as the fill can."""
    per_socket: dict[tuple[bool, int], int] = {}
    per_node: dict[tuple[bool, int, int], int] = {}
    per_domain: dict[tuple[bool, int, int, int], int] = {}
    for c in cores:
        slow = c.kind == EFFICIENCY
        dom = -1 if c.cache_domain is None else c.cache_domain
        per_socket[(slow, c.socket)] = per_socket.get((slow, c.socket), 0) + 1
        per_node[(slow, c.socket, c.numa_node)] = per_node.get((slow, c.socket, c.numa_node), 0) + 1
        per_domain[(slow, c.socket, c.numa_node, dom)] = per_domain.get((slow, c.socket, c.numa_node, dom), 0) + 1

    def key(c: Core) -> tuple[int, ...]:
        slow = c.kind == EFFICIENCY
        dom = -1 if c.cache_domain is None else c.cache_domain
        return (
            slow,
            -per_socket[(slow, c.socket)],
            c.socket,
            -per_node[(slow, c.socket, c.numa_node)],
            c.numa_node,
            -per_domain[(slow, c.socket, c.numa_node, dom)],
            dom,
            c.cpus[0],
        )

    return sorted(cores, key=key)


def place_of(core: Core) -> tuple[bool, int, int, int]:
    """The placement group of a core, coarsest first: its kind (efficiency or not), socket, NUMA
    node and cache domain (-1 = unknown). Slices are cut inside the finest group that holds them."""
    return (
        core.kind == EFFICIENCY,
        core.socket,
        core.numa_node,
        -1 if core.cache_domain is None else core.cache_domain,
    )


def cut_nested(items: Sequence[T], sizes: Sequence[int], place: Callable[[T], tuple[Hashable, ...]]) -> list[list[T]]:
    """Slices of ``sizes`` items each, cut from ``items`` (in fill order), each inside the finest
    placement group that has room for it (pure).

    ``place(item)``: its groups, coarsest first (place_of: kind, socket, NUMA node, cache domain).
    Top down, each group takes as many of its parent's slices as fit in it (then the bigger ones
    where they still fit: 22 + 21 + 21 cores fill a 64-core socket, 22 + 22 first would strand
    20) and hands them on to its subgroups the same way; a slice no subgroup has room for is cut
    from what the subgroups leave (pieces, one per cache domain): from the first run of
    neighbouring pieces that holds it in as few pieces as any choice would, so it spans as few
    domains as the pieces allow. Sizes tried in the order given (big ones first). Returns the
    slices cut (all of them when sum(sizes) <= len(items)), in the order of ``sizes``, each in
    fill order.
    """
    order = {id(item): i for i, item in enumerate(items)}
    out: list[list[T] | None] = [None] * len(sizes)
    depth = len(place(items[0])) if items else 0

    def fewest(pieces: list[list[T]], size: int) -> int:
        lengths = sorted((len(p) for p in pieces), reverse=True)
        total = count = 0
        for n in lengths:
            if total >= size:
                break
            total, count = total + n, count + 1
        return count

    def take(pieces: list[list[T]], size: int) -> list[T]:
        m = fewest(pieces, size)
        for start in range(len(pieces)):  # neighbouring pieces, fill order, if m of them hold it
            run = pieces[start : start + m]
            if sum(len(p) for p in run) >= size:
                idx = list(range(start, start + m))
                break
        else:  # biggest first, finished on the smallest piece that completes the slice
            idx = []
            left = size
            rest = list(range(len(pieces)))
            while left > 0:
                fits = [j for j in rest if len(pieces[j]) >= left]
                j = min(fits, key=lambda k: len(pieces[k])) if fits else max(rest, key=lambda k: len(pieces[k]))
                idx.append(j)
                rest.remove(j)
                left -= len(pieces[j])
        chosen: list[T] = []
        for j in idx:
            need = size - len(chosen)
            chosen += pieces[j][:need]
            pieces[j] = pieces[j][need:]
        return sorted(chosen, key=lambda item: order[id(item)])

    def choose(candidates: list[int], room: int) -> list[int]:
        chosen: list[int] = []
        used = 0
        for i in sorted(candidates, key=lambda k: (sizes[k], k)):
            if used + sizes[i] > room:
                break
            chosen.append(i)
            used += sizes[i]
        for i in sorted((k for k in candidates if k not in chosen), key=lambda k: (-sizes[k], k)):
            if not chosen:
                break
            drop = max(chosen, key=lambda k: (-sizes[k], k))  # the smallest, latest in order
            if sizes[i] > sizes[drop] and used - sizes[drop] + sizes[i] <= room:
                chosen.remove(drop)
                chosen.append(i)
                used += sizes[i] - sizes[drop]
        return sorted(chosen)

    def visit(group: list[T], level: int, assigned: list[int]) -> list[list[T]]:
        """Cut the ``assigned`` slices inside ``group``; return what is left, as pieces."""
        if level == depth:
            pieces = [list(group)]
        else:
            subgroups: dict[Hashable, list[T]] = {}
            for item in group:
                subgroups.setdefault(place(item)[level], []).append(item)
            pieces = []
            todo = list(assigned)
            for sub in subgroups.values():
                mine = choose(todo, len(sub))
                todo = [i for i in todo if i not in mine]
                pieces += visit(sub, level + 1, mine)
            assigned = todo
        for i in assigned:
            out[i] = take(pieces, sizes[i])
            pieces = [p for p in pieces if p]
        return pieces

    visit(list(items), 0, choose(list(range(len(sizes))), len(items)))
    return [s for s in out if s is not None]
