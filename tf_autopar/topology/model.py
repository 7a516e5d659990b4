"""Plain, frozen records of the host's CPU topology.

Readers fill these; the planner consumes them. Nothing here reads the system, so
tests and the planner can build topologies by hand.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Core:
    """One physical core, with the logical CPUs (SMT siblings) this process may use on it."""

    socket: int
    core_id: int
    cpus: tuple[int, ...]  # sorted; cpus[0] is the one a physical-cores-only plan uses
    numa_node: int = 0


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
class CpuInfo:
    vendor: str = "unknown"
    model: str = "unknown"
    isa: tuple[str, ...] = ()  # notable vector/matrix extensions: avx2, avx512f, avx512_vnni, amx_tile, ...


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

    def cores_on_socket(self, socket: int) -> tuple[Core, ...]:
        return tuple(c for c in self.cores if c.socket == socket)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(
            sockets=list(self.sockets),
            logical_cpus=self.logical_cpus,
            physical_cores=self.physical_cores,
            threads_per_core=self.threads_per_core,
        )
        return d


def ordered_cores(cores: tuple[Core, ...]) -> list[Core]:
    """Cores in the order plans and worker slices fill them: biggest socket first, its biggest NUMA
    node first (ties: lowest id)."""
    per_socket: dict[int, int] = {}
    per_node: dict[tuple[int, int], int] = {}
    for c in cores:
        per_socket[c.socket] = per_socket.get(c.socket, 0) + 1
        per_node[(c.socket, c.numa_node)] = per_node.get((c.socket, c.numa_node), 0) + 1
    return sorted(
        cores,
        key=lambda c: (-per_socket[c.socket], c.socket, -per_node[(c.socket, c.numa_node)], c.numa_node, c.cpus[0]),
    )
