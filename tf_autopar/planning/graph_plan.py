"""A graph's plan, decided from what is given: the mode the graph gets, the rule's plan with what
was measured for it and for the host, and the profile summary a plan is kept with. Pure: no I/O.

The runtime (runtime/plans.py) reads the topology, the batch and the user's environment from the
process, looks up in the plan cache what ``tune`` measured for the graph and what ``calibrate``
measured on the host, and passes them here.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

from tf_autopar.planning.calibrations import for_processor
from tf_autopar.planning.planner import plan

if TYPE_CHECKING:  # the planner stays pure: no graph package (and its loaders) at import
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.planning.plan import ThreadPlan
    from tf_autopar.topology.model import Topology


def effective_mode(mode: str, profile: GraphProfile | None) -> str:
    """Training graphs get the training plan when the user asked for latency (the default)."""
    if mode == "latency" and profile is not None and getattr(profile, "training", False):
        return "training"
    return mode


def host_calibration(topology: Topology, measured: Mapping[str, Any] | None = None) -> Mapping[str, Any] | None:
    """The host's small-op threshold: ``measured`` on this host (``tf-autopar calibrate``), else the
    one measured on the same processor model (planning/calibrations.py), else None."""
    if measured:
        return measured
    return for_processor(getattr(getattr(topology, "cpu", None), "model", None))


def graph_plan(
    topology: Topology,
    profile: GraphProfile | None,
    mode: str,
    *,
    env: Mapping[str, str] | None,
    width: int | None = None,
    streams: int | None = None,
    tuned: Mapping[str, Any] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> ThreadPlan:
    """The plan for ``profile`` (None: the host alone) on ``topology`` under the user's ``env``:
    a training graph asked for latency is planned for training; ``streams`` counts in throughput
    mode only; ``tuned``: what ``tune`` measured for this graph, mode and batch; ``calibration``:
    the host's (host_calibration()), used for a profile only (the host alone has no op sizes)."""
    mode = effective_mode(mode, profile)
    return plan(
        topology,
        profile,
        mode,
        width=width,
        env=env,
        streams=streams if mode == "throughput" else None,
        tuned=tuned,
        calibration=calibration if profile is not None else None,
    )


#: The profile fields worth caching (small: no op histograms), all that the planner reads.
CACHED_PROFILE_FIELDS = (
    "heavy_ops",
    "depth",
    "avg_width",
    "max_width",
    "nodes",
    "functions",
    "training",
    "uses_tf_data",
    "loops",
    "sizes_known",
    "source",
    "fingerprint",
    "typical_op_work",
    "assumptions",
    "lookups",
    "lookup_work",
    "contraction_work",
)


def profile_summary(profile: GraphProfile) -> dict[str, Any]:
    """What the plan cache keeps of ``profile``: the fields the planner reads."""
    return {k: getattr(profile, k) for k in CACHED_PROFILE_FIELDS}


def profile_from_dict(d: Mapping[str, Any]) -> GraphProfile:
    """A profile from its dict (a summary, or a child's analysis); fields it does not know are dropped."""
    # deferred: planning/ never imports the graph package (its loaders) at import, so neither
    # `import tf_autopar.planning` nor enable() under the kill switch pays for it
    from tf_autopar.graph.profile import GraphProfile

    names = {f.name for f in dataclasses.fields(GraphProfile)}
    data = {k: v for k, v in d.items() if k in names}
    for key in ("level_widths", "assumptions"):
        if key in data:
            data[key] = tuple(data[key])
    return GraphProfile(**data)


def cached_profile(d: Any) -> GraphProfile | None:
    """A cached summary as a profile; None (a miss) when an older tf_autopar wrote it without a
    field the planner now reads, which would otherwise plan as if the field were empty."""
    if not isinstance(d, dict) or any(k not in d for k in CACHED_PROFILE_FIELDS):
        return None
    return profile_from_dict(d)
