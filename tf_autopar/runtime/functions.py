"""tf.function and Keras: analyse each function's graph when it is first traced.

Hook: TensorFlow calls every callable in
``tensorflow.python.eager.polymorphic_function.transform.CONCRETE_FUNCTION_CALLBACKS`` with
each new ConcreteFunction right after tracing (tracing_compilation._create_concrete_function).
That covers tf.function, Keras 3's predict/fit/evaluate steps and SavedModel loading, and
needs no wrapping of TensorFlow classes. Skipped: functions traced inside another function
(the outer graph includes them), tf.data's own functions ("Dataset_*"), graphs without heavy
ops, and re-traces of a function already seen (keyed by name and op count, so the analysis
runs once per function).

The process pools are fixed by the time a function runs, so a function whose plan differs
from them cannot be re-pooled in place: one warning points to tf_autopar.optimize(), and the
plan is written to the persistent cache so the next start of the same program applies it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from tf_autopar.planning.plan import plural
from tf_autopar.runtime import controller, plans, sessions
from tf_autopar.runtime.safety import fail_open, maybe_fail, warn_once
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.runtime.applied import Applied

PATCH_NAME = "tf.function first trace (CONCRETE_FUNCTION_CALLBACKS)"
_SKIP_PREFIXES = ("Dataset_", "__inference_Dataset")
_seen: dict[tuple[str, int], tuple[str, str]] = {}  # (name, ops) -> key into STATE.functions


def install(record: Applied) -> None:
    """Add the trace callback through ``record`` (which removes it at disable())."""
    from tensorflow.python.eager.polymorphic_function import transform

    if _callback not in transform.CONCRETE_FUNCTION_CALLBACKS:
        record.add(transform.CONCRETE_FUNCTION_CALLBACKS, _callback, "remove the tf.function trace callback")


def uninstall() -> None:
    """Forget the functions seen, so that a later enable() analyses them afresh."""
    reset_seen()


def _callback(concrete_fn: Any) -> None:
    if not STATE.enabled or sessions.bypassed():
        return
    try:
        on_trace(concrete_fn)
    except Exception as exc:  # fail open: the function runs as traced
        fail_open("analyse a traced tf.function", exc)


def on_trace(concrete_fn: Any) -> None:
    from tensorflow.python.framework import ops

    graph = concrete_fn.graph
    name = graph.name or "tf.function"
    if name.startswith(_SKIP_PREFIXES) or ops.inside_function():
        return
    ops_count = len(graph.get_operations())
    seen_key = (name, ops_count)
    with STATE.lock:
        known = _seen.get(seen_key)
        if known is not None:
            rec = STATE.functions.get(known)
            if rec is not None:
                STATE.functions[known] = dataclasses.replace(rec, traces=rec.traces + 1)
            return
        _seen[seen_key] = ("", "")  # claim it: analyse once even if traced from two threads
    maybe_fail("function")
    # the graph package at first use: enable() under the kill switch never imports it (model_arg.py)
    from tf_autopar.graph.dims import Assumed
    from tf_autopar.graph.live_graphs import structure_graph_def

    # live shapes (a None batch read as enable()'s batch), so that a function and the model it
    # was loaded from get the same plan
    profile, ms = plans.analyze_graph(structure_graph_def(graph, Assumed(STATE.batch or 1)), f"tf.function {name}")
    if profile.heavy_ops == 0:
        return
    plan = plans.plan_for(profile, STATE.mode, streams=STATE.streams)
    running = controller.running_pools()
    matches = (plan.inter_op, plan.intra_op) == running
    cached = not matches and STATE.use_cache and plans.store_plan(profile, plan, name)
    from tf_autopar.runtime.records import FunctionRecord, user_function_name  # defined on first use (state.py)

    record = FunctionRecord(
        name=name,
        fingerprint=profile.fingerprint,
        heavy_ops=profile.heavy_ops,
        avg_width=profile.avg_width,
        planned_inter=plan.inter_op,
        planned_intra=plan.intra_op,
        matches_process=matches,
        cached=cached,
        analysis_ms=round(ms, 3),
    )
    key = (name, profile.fingerprint)
    with STATE.lock:
        _seen[seen_key] = key
        STATE.functions[key] = record
    if not matches:
        warn_once(
            "function-mismatch",
            f"{user_function_name(name)} (width {profile.avg_width}, {plural(profile.heavy_ops, 'heavy op')}) would run best with "
            f"inter_op={plan.inter_op} intra_op={plan.intra_op}, but the process pools are already fixed at "
            f"{running[0]}x{running[1]}. For inference now: fn = tf_autopar.optimize(model_or_function). "
            + (
                "The plan is cached: the next start of this program applies it when enable() runs before TensorFlow starts."
                if cached
                else ""
            ),
        )


def reset_seen() -> None:
    with STATE.lock:
        _seen.clear()
