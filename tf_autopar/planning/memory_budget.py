"""How much memory a build may take now, under the container's limit: pure, no I/O.

The fast path's build (the converter, the graph import, grappler's first run) takes a large
transient peak (measured about 27x the variables plus 256 MB, runtime/fastpath_rules.py). Sized
against the host's free memory in a container limited to 1.5 GB, it got the server OOM-killed
(exit 137). The room is the container's:

    room   = limit - usage            (cgroup limit, topology/memory.py's binding level)
           = host available memory    (no cgroup limit: the caller passes psutil's "available")
    budget = max(0, room - margin) // workers

``margin``: what the server itself may still grow by while the build runs (its requests'
tensors, the allocator's slack); default_margin: a tenth of the limit, at least 64 MB, at most
512 MB. ``workers``: processes sharing the limit that may build at the same moment (a gunicorn
master's workers in one container): each gets its share of the room, since their usage is already
in ``usage`` but their builds are not.

``budget_for(topology.memory, host_available)`` takes a reading of topology/memory.py (its
working set as the usage). ``check(budget, need)`` says whether an estimate fits and, when not, why in one line:
"the frozen copy needs about 2.9 GB; 1.0 GB is left under the container's 1.5 GB limit".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MB = 1 << 20
GB = 1 << 30
MARGIN_SHARE = 0.10
MARGIN_MIN = 64 * MB
MARGIN_MAX = 512 * MB


def format_bytes(n: int | float) -> str:
    """Bytes as the project writes them (binary units): "1.5 GB", "496 MB", "12 kB" (1000 MB and up in GB)."""
    if n >= 1000 * MB:
        return f"{n / GB:.1f} GB"
    if n >= MB:
        return f"{n / MB:,.0f} MB"
    return f"{n / 1024:,.0f} kB"


def default_margin(limit_bytes: int | None, available_bytes: int | None = None) -> int:
    """A tenth of the limit (or of the available memory without one), between 64 MB and 512 MB."""
    base = limit_bytes if limit_bytes is not None else available_bytes
    if base is None:
        return MARGIN_MIN
    return int(min(MARGIN_MAX, max(MARGIN_MIN, base * MARGIN_SHARE)))


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes a build may use now, and what they came from (for the reason when an estimate does not fit)."""

    bytes: int  # what one build may take: max(0, room - margin) // workers
    room_bytes: int | None  # limit - usage, or the host's available memory; None: nothing known
    limit_bytes: int | None  # the cgroup limit; None: the host's memory was used (or nothing)
    margin_bytes: int
    workers: int
    scope: str = "the container's"  # whose limit, as the reason says it

    @property
    def known(self) -> bool:
        return self.room_bytes is not None

    def where(self) -> str:
        """ "1.0 GB is left under the container's 1.5 GB limit" / "1.0 GB of the host's memory is available"."""
        if self.room_bytes is None:
            return "the memory left is unknown"
        room = format_bytes(self.room_bytes)
        if self.limit_bytes is not None:
            text = f"{room} is left under {self.scope} {format_bytes(self.limit_bytes)} limit"
        else:
            text = f"{room} of the host's memory is available"
        extras = []
        if self.margin_bytes:
            extras.append(f"less a {format_bytes(self.margin_bytes)} margin")
        if self.workers > 1:
            extras.append(f"shared by {self.workers} workers: {format_bytes(self.bytes)} each")
        return text + (" (" + ", ".join(extras) + ")" if extras and self.room_bytes > 0 else "")


def memory_budget(
    limit_bytes: int | None,
    usage_bytes: int | None,
    margin_bytes: int | None = None,
    workers: int = 1,
    host_available_bytes: int | None = None,
    scope: str = "the container's",
) -> MemoryBudget:
    """The bytes a build may use: under the cgroup limit (limit - usage) when there is one, else
    the host's available memory; less ``margin_bytes`` (default_margin when None), split between
    ``workers`` (at least 1) processes that share the limit and may build at the same moment.

    A limit with an unknown usage counts the whole limit as used (nothing is known to be free).
    Neither a limit nor the host's figure: bytes 0 and ``known`` False (the caller decides).
    """
    workers = max(1, int(workers))
    if limit_bytes is not None:
        room: int | None = max(0, limit_bytes - usage_bytes) if usage_bytes is not None else 0
    elif host_available_bytes is not None:
        room = max(0, host_available_bytes)
    else:
        room = None
    margin = default_margin(limit_bytes, host_available_bytes) if margin_bytes is None else max(0, margin_bytes)
    one = max(0, room - margin) // workers if room is not None else 0
    return MemoryBudget(one, room, limit_bytes, margin, workers, scope)


def budget_for(
    memory: Any,
    host_available_bytes: int | None = None,
    margin_bytes: int | None = None,
    workers: int = 1,
) -> MemoryBudget:
    """memory_budget from a reading (topology.MemoryLimit, or None without a memory cgroup): its
    limit, and its working set as the usage (the usage less inactive page cache, which the kernel
    reclaims before it kills; kubelet's measure), else its usage."""
    if memory is None or memory.limit_bytes is None:
        return memory_budget(None, None, margin_bytes, workers, host_available_bytes)
    used = memory.working_set_bytes if memory.usage_bytes is not None else None
    return memory_budget(memory.limit_bytes, used, margin_bytes, workers, host_available_bytes)


def limit_fact(limit_bytes: int, cgroup_version: int, path: str) -> str:
    """The plan's explanation line for a cgroup memory limit (topology.memory). The usage is left
    out: plans are cached, and the usage at planning time says nothing of a later build."""
    return f"cgroup v{cgroup_version} memory limit {format_bytes(limit_bytes)} ({path})"


def check(budget: MemoryBudget, need_bytes: int, what: str = "the frozen copy") -> tuple[bool, str]:
    """(does ``need_bytes`` fit the budget?, the one-line reason when it does not).

    An unknown budget (no limit, no host figure) fits: the caller's other bounds decide.
    """
    if not budget.known or need_bytes <= budget.bytes:
        return True, ""
    return False, f"{what} needs about {format_bytes(need_bytes)}; {budget.where()}"
