"""The CPUs Ray granted this process, read from Ray itself, and the share they make.

Ray schedules a task or actor (a Ray Serve replica) on ``num_cpus`` of a node's CPUs, but binds
nothing: every worker process still sees the whole host, so stock TensorFlow sizes its pools
for every CPU and the replicas of one node oversubscribe it (Ray sets ``OMP_NUM_THREADS``, which
TensorFlow's own pools ignore). The grant is read from Ray's runtime context
(``get_assigned_resources()["CPU"]``), never guessed from the host, and only inside a Ray worker
process (Ray already imported, ``RAY_RAYLET_PID`` set): importing Ray here would cost seconds.

The share (``grant_layout``, pure): a budget of ``max(1, floor(grant))`` CPUs, and slots of that
many cores on this host, ``floor(usable cores / grant)`` of them, handed out by the host-wide
lease (lowest free slot), so replicas on one node take disjoint cores, and a replica restarted by
Ray takes the slot its predecessor left. A fractional grant (``num_cpus=0.5``) gives more slots
than cores: the sharing rule of slices.py puts ``1 / grant`` replicas on a core, 1 x 1 threads
each. A grant of 0 CPUs (a plain actor's default) is no grant: the usual rules decide.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping

log = logging.getLogger("tf_autopar.coordination")

SOURCE = "ray"


@dataclass(frozen=True)
class RayGrant:
    """What Ray assigned this worker process."""

    cpus: float  # Ray's CPU resource assigned to this task or actor (fractional allowed)
    node_id: str = ""  # Ray's node id (the node's CPUs are the host's)


@dataclass(frozen=True)
class GrantLayout:
    """How a grant maps onto the host: the budget one replica plans for, and the slots."""

    budget: int  # CPUs to plan for: max(1, floor(grant))
    count: int  # slots of the lease: replicas of this grant that fit the usable cores

    def note(self, grant: float, usable: int) -> str:
        per_core = f"; {1 / grant:g} replicas per core, 1 x 1 threads each" if grant < 1 else ""
        return (
            f"Ray granted {grant:g} CPU{'s' if grant != 1 else ''}: a budget of {self.budget}, "
            f"{self.count} slot{'s' if self.count != 1 else ''} of the {usable} usable core"
            f"{'s' if usable != 1 else ''}{per_core}"
        )


def grant_layout(grant: float, usable_cores: int) -> GrantLayout:
    """The budget and slot count for a replica granted ``grant`` CPUs on ``usable_cores`` cores.

    ValueError for a grant that is not a positive finite number."""
    if isinstance(grant, bool) or not isinstance(grant, (int, float)) or not math.isfinite(grant) or grant <= 0:
        raise ValueError(f"a Ray CPU grant must be a positive number, got {grant!r}")
    usable = max(1, int(usable_cores))
    budget = max(1, min(usable, int(math.floor(grant + 1e-9))))
    count = max(1, int(math.floor(usable / grant + 1e-9)))
    return GrantLayout(budget, count)


def in_ray_worker(env: Mapping[str, str] | None = None, modules: Mapping[str, Any] | None = None) -> bool:
    """Whether this process looks like a Ray worker: Ray imported and started by a raylet."""
    env = os.environ if env is None else env
    modules = sys.modules if modules is None else modules
    return "ray" in modules and bool(env.get("RAY_RAYLET_PID"))


def read_grant(env: Mapping[str, str] | None = None) -> RayGrant | None:
    """Ray's CPU grant for this worker process, or None (not a Ray worker, a driver, no CPUs
    granted, or Ray's API failed: then the usual rules decide, said at debug level)."""
    if not in_ray_worker(env):
        return None
    try:
        ray = sys.modules["ray"]
        context = ray.get_runtime_context()
        if getattr(context.worker, "mode", None) != getattr(ray, "WORKER_MODE", 1):
            return None  # a driver: Ray assigned it nothing
        cpus = float(context.get_assigned_resources().get("CPU", 0.0))
        node = str(context.get_node_id() or "")
    except Exception as exc:  # Ray's internals moved, or the worker is shutting down
        log.debug("tf_autopar: could not read Ray's assigned resources", exc_info=exc)
        return None
    if not (cpus > 0 and math.isfinite(cpus)):
        log.info("tf_autopar: this Ray worker was granted no CPUs (num_cpus=0); the usual rules decide its share")
        return None
    return RayGrant(cpus, node)
