"""Planning glue shared by enable(), the session patch, the tf.function hook and optimize().

Pure-ish decisions: topology (detected once per process), the plan for a profile under
the user's environment (never our own variables), and which mode a graph gets.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import controller
from tf_autopar.runtime.safety import maybe_fail

if TYPE_CHECKING:  # imported where used: enable() must stay cheap
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.planning.plan import ThreadPlan
    from tf_autopar.topology.model import Topology

log = logging.getLogger("tf_autopar.runtime")
_lock = threading.Lock()
_host: Topology | None = None  # the host as this process found it, detected once
_share: Topology | None = None  # what this process plans for when it shares the host with other workers


def host_topology() -> Topology:
    global _host
    with _lock:
        if _host is None:
            from tf_autopar.topology import detect_topology

            _host = detect_topology(cpu_details=False)
        return _host


def topology() -> Topology:
    """What every plan of this process is made for: its share of the host, else the host."""
    return _share if _share is not None else host_topology()


def use_share(topology: Topology | None) -> None:
    global _share
    _share = topology


def use_host(topology: Topology) -> None:
    """The host under CPU limits that changed while running (runtime/quota_watch.py): later plans follow it."""
    global _host
    with _lock:
        _host = topology


def effective_mode(mode: str, profile: GraphProfile | None) -> str:
    """Training graphs get the training plan when the user asked for latency (the default)."""
    if mode == "latency" and profile is not None and getattr(profile, "training", False):
        return "training"
    return mode


def plan_for(
    profile: GraphProfile | None,
    mode: str,
    *,
    width: int | None = None,
    streams: int | None = None,
    tuned_fingerprint: str | None = None,
    batch: int | None = None,
) -> ThreadPlan:
    """``tuned_fingerprint``: look up what `tune` measured under this fingerprint (the model file
    a frozen graph came from) rather than the profile's own; ``batch``: the batch it is for (else
    enable()'s)."""
    from tf_autopar.planning import plan

    maybe_fail("plan")
    mode = effective_mode(mode, profile)
    measured = tuned_for(tuned_fingerprint or getattr(profile, "fingerprint", ""), mode, batch=batch)
    return plan(
        topology(),
        profile,
        mode,
        width=width,
        env=controller.user_env(),
        streams=streams if mode == "throughput" else None,
        tuned=measured,
        calibration=calibration_for(topology()) if profile is not None else None,
    )


def calibration_for(topo: Topology) -> Any:
    """This host's small-op threshold: measured here by ``tf-autopar calibrate`` (plan cache),
    else measured on the same processor model (planning/calibrations.py), else None."""
    from tf_autopar.planning.calibrations import for_processor
    from tf_autopar.runtime.state import STATE

    if not (STATE.enabled and not STATE.use_cache):
        from tf_autopar.runtime import cache

        try:
            found = cache.lookup_calibration(cache.host_key(topo))
            if found:
                return found
        except Exception as exc:
            log.debug("calibration lookup failed: %s", exc)
    return for_processor(getattr(getattr(topo, "cpu", None), "model", None))


def tuned_for(fingerprint: str, mode: str, topo: Topology | None = None, batch: int | None = None) -> Any:
    """The setting ``tf-autopar tune`` measured for the graph ``fingerprint``, mode and batch on
    this host, if any."""
    from tf_autopar.runtime.state import STATE

    if not fingerprint or (STATE.enabled and not STATE.use_cache):
        return None
    from tf_autopar.runtime import cache

    try:
        return cache.lookup_tuned(
            fingerprint, cache.host_key(topo or topology()), mode, batch if batch is not None else STATE.batch
        )
    except Exception as exc:  # an unreadable cache is reported by cache.load; never fatal here
        log.debug("tuned setting lookup failed: %s", exc)
        return None


def store_plan(profile: GraphProfile, plan: Any, name: str) -> bool:
    """``plan`` into the plan cache for this host and mode, so that the next start applies it before
    TensorFlow starts; False when the write failed (fail_open says so once)."""
    from tf_autopar.runtime import cache
    from tf_autopar.runtime.safety import fail_open
    from tf_autopar.runtime.state import STATE

    try:
        maybe_fail("cache")
        cache.store(
            profile.fingerprint,
            cache.topology_key(topology()),
            STATE.mode,
            plan.to_dict(),
            profile_summary(profile),
            name,
            program=cache.program_key(),
        )
        return True
    except Exception as exc:
        fail_open("write the plan cache", exc)
        return False


def analyze_graph(graph_def: Any, source: str) -> tuple[GraphProfile, float]:
    """(profile, milliseconds spent)."""
    from tf_autopar.graph import analyze_graph_def

    t0 = time.perf_counter()
    maybe_fail("analysis")
    profile = analyze_graph_def(graph_def, source=source)
    return profile, (time.perf_counter() - t0) * 1e3


def profile_from_dict(d: dict[str, Any]) -> GraphProfile:
    from tf_autopar.graph.profile import GraphProfile

    names = {f.name for f in dataclasses.fields(GraphProfile)}
    data = {k: v for k, v in d.items() if k in names}
    for key in ("level_widths", "assumptions"):
        if key in data:
            data[key] = tuple(data[key])
    return GraphProfile(**data)


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
    return {k: getattr(profile, k) for k in CACHED_PROFILE_FIELDS}


def cached_profile(d: Any) -> GraphProfile | None:
    """A cached summary as a profile; None (a miss) when an older tf_autopar wrote it without a
    field the planner now reads, which would otherwise plan as if the field were empty."""
    if not isinstance(d, dict) or any(k not in d for k in CACHED_PROFILE_FIELDS):
        return None
    return profile_from_dict(d)
