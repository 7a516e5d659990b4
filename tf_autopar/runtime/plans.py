"""This process's plans: the pure rule (planning/graph_plan.py) fed with STATE's topology and
batch, the user's environment and what the plan cache holds for the graph and the host; plans
stored there for the next start; a graph's analysis, timed. Used by enable(), the session patch,
the tf.function hook, model loads and optimize().
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Mapping

from tf_autopar.planning.graph_plan import effective_mode, graph_plan, host_calibration, profile_summary
from tf_autopar.runtime import cache, controller
from tf_autopar.runtime.safety import fail_open, maybe_fail
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.planning.plan import ThreadPlan
    from tf_autopar.topology.model import Topology

log = logging.getLogger("tf_autopar.runtime")


def plan_for(
    profile: GraphProfile | None,
    mode: str,
    *,
    width: int | None = None,
    streams: int | None = None,
    tuned_fingerprint: str | None = None,
    batch: int | None = None,
) -> ThreadPlan:
    """This process's plan for ``profile``: measured_plan() on STATE's topology (its share of the
    host, else the host), under the user's environment (never our own variables), reading the
    plan cache as enable() said. ``tuned_fingerprint``: look up what `tune` measured under this
    fingerprint (the model file a frozen graph came from) rather than the profile's own;
    ``batch``: the batch it is for (else enable()'s)."""
    maybe_fail("plan")
    return measured_plan(
        STATE.topology(),
        profile,
        mode,
        env=controller.user_env(),
        batch=batch if batch is not None else STATE.batch,
        use_cache=STATE.reads_cache(),
        width=width,
        streams=streams,
        tuned_fingerprint=tuned_fingerprint,
    )


def measured_plan(
    topology: Topology,
    profile: GraphProfile | None,
    mode: str,
    *,
    env: Mapping[str, str] | None,
    batch: int | None,
    use_cache: bool,
    width: int | None = None,
    streams: int | None = None,
    tuned_fingerprint: str | None = None,
) -> ThreadPlan:
    """The rule's plan (graph_plan()) with what `tune` measured for the graph at ``batch`` and this
    host's small-op threshold, both read from the plan cache when ``use_cache``. Reads no STATE."""
    mode = effective_mode(mode, profile)
    fingerprint = tuned_fingerprint or getattr(profile, "fingerprint", "")
    return graph_plan(
        topology,
        profile,
        mode,
        env=env,
        width=width,
        streams=streams,
        tuned=tuned_for(fingerprint, mode, topology, batch, use_cache=use_cache),
        calibration=calibration_for(topology, use_cache=use_cache) if profile is not None else None,
    )


def calibration_for(topo: Topology, *, use_cache: bool = True) -> Any:
    """This host's small-op threshold: measured here by ``tf-autopar calibrate`` (plan cache, read
    when ``use_cache``), else measured on the same processor model (planning/calibrations.py), else None."""
    measured = None
    if use_cache:
        try:
            measured = cache.lookup_calibration(cache.host_key(topo))
        except Exception as exc:
            log.debug("calibration lookup failed: %s", exc)
    return host_calibration(topo, measured)


def tuned_for(fingerprint: str, mode: str, topo: Topology, batch: int | None, *, use_cache: bool = True) -> Any:
    """The setting ``tf-autopar tune`` measured for the graph ``fingerprint``, mode and batch on
    ``topo``, if any (None too when not ``use_cache``)."""
    if not fingerprint or not use_cache:
        return None
    try:
        return cache.lookup_tuned(fingerprint, cache.host_key(topo), mode, batch)
    except Exception as exc:  # an unreadable cache is reported by cache.load; never fatal here
        log.debug("tuned setting lookup failed: %s", exc)
        return None


def store_plan(profile: GraphProfile, plan: Any, name: str) -> bool:
    """``plan`` into the plan cache for this process's topology and mode, so that the next start
    applies it before TensorFlow starts; False when the write failed (fail_open says so once)."""
    try:
        maybe_fail("cache")
        cache.store(
            profile.fingerprint,
            cache.topology_key(STATE.topology()),
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
    # deferred: the graph package is imported at the first graph, not by enable() under the kill switch
    from tf_autopar.graph import analyze_graph_def

    t0 = time.perf_counter()
    maybe_fail("analysis")
    profile = analyze_graph_def(graph_def, source=source)
    return profile, (time.perf_counter() - t0) * 1e3
