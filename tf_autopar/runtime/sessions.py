"""Per-session thread pools for TF1-style sessions.

``BaseSession.__init__`` is wrapped: Session, InteractiveSession and everything that builds
them (MonitoredSession, SessionManager, tf.compat.v1.train.* helpers all call
``session.Session(...)``) pass through it. The wrapper analyses the session's graph (memoised
per graph and graph version), plans it, and hands TensorFlow a copy of the user's ConfigProto
with inter/intra-op threads filled in where the user left 0 and ``use_per_session_threads``
on, so two sessions with different graphs get different pools. The intra-op value is only
the session's own when TF_OVERRIDE_GLOBAL_THREADPOOL=1 was set before the runtime started
(enable() does that before start); otherwise it is the process pool, and the record says so.

A graph that is still empty when the session is created (the user builds it afterwards) gets
the process plan: a session's pools are created with the session and cannot change later.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from tf_autopar.graph.live_graphs import structure_graph_def
from tf_autopar.runtime import controller, plans
from tf_autopar.runtime.safety import fail_open, maybe_fail
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.runtime.applied import Applied
    from tf_autopar.runtime.records import SessionRecord

_local = threading.local()  # .bypass: optimize() builds its own config
_memo: "weakref.WeakKeyDictionary[Any, tuple[int, Any, float]]" = weakref.WeakKeyDictionary()
PATCH_NAME = "tf.compat.v1.Session (BaseSession.__init__)"


class bypass:
    """Context manager: sessions created inside are left alone (optimize() plans its own)."""

    def __enter__(self) -> None:
        _local.bypass = getattr(_local, "bypass", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _local.bypass -= 1


def bypassed() -> bool:
    return bool(getattr(_local, "bypass", 0))


def install(record: Applied) -> None:
    """Wrap ``BaseSession.__init__`` through ``record`` (which puts it back at disable())."""
    from tensorflow.python.client import session

    original = session.BaseSession.__init__

    def __init__(self: Any, target: str = "", graph: Any = None, config: Any = None) -> None:
        if STATE.applied is not record:  # left inside another library's wrapper by an earlier enable()
            return original(self, target, graph, config)
        _patched_init(original, self, target, graph, config)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    record.patch(session.BaseSession, "__init__", __init__)


def uninstall() -> None:
    """Nothing of its own to forget: the graph memo is keyed by graph and version, still right."""


def _patched_init(original: Any, self: Any, target: str, graph: Any, config: Any) -> None:
    if getattr(_local, "bypass", 0) or not STATE.enabled:
        return original(self, target, graph, config)
    try:
        planned, record = plan_session(graph, config)
    except Exception as exc:  # fail open: the user's own config
        fail_open("plan a Session's threads", exc)
        return original(self, target, graph, config)
    if planned is None:
        return original(self, target, graph, config)
    try:
        original(self, target, graph, planned)
    except Exception as exc:
        if getattr(self, "_session", None) is not None:
            raise
        fail_open("create a Session with the planned ConfigProto", exc)
        return original(self, target, graph, config)
    with STATE.lock:
        STATE.sessions.append(record)


def graph_profile(graph: Any) -> tuple[GraphProfile, float]:
    """The graph's profile, memoised per (graph, version): sessions often share one graph."""
    version = graph.version
    hit = _memo.get(graph)
    if hit is not None and hit[0] == version:
        return hit[1], 0.0
    t0 = time.perf_counter()
    graph_def = structure_graph_def(graph)  # serialising the graph is part of the cost we add
    export_ms = (time.perf_counter() - t0) * 1e3
    profile, ms = plans.analyze_graph(graph_def, f"Session graph ({version} ops)")
    ms += export_ms
    _memo[graph] = (version, profile, ms)
    return profile, ms


def plan_session(graph: Any, config: Any) -> tuple[Any, SessionRecord | None]:
    """(ConfigProto to create the session with, record); (None, None) to leave it alone."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops

    if graph is not None and not isinstance(graph, ops.Graph):
        return None, None  # TensorFlow reports the user's mistake itself
    if config is not None and not isinstance(config, config_pb2.ConfigProto):
        return None, None
    maybe_fail("session")
    g = graph if graph is not None else ops.get_default_graph()
    base = config if config is not None else context.context().config
    user_fields = []
    if base.inter_op_parallelism_threads:
        user_fields.append(f"inter_op_parallelism_threads={base.inter_op_parallelism_threads}")
    if base.intra_op_parallelism_threads:
        user_fields.append(f"intra_op_parallelism_threads={base.intra_op_parallelism_threads}")
    if len(base.session_inter_op_thread_pool):
        user_fields.append("session_inter_op_thread_pool")

    note = ""
    if g.version == 0:
        profile, ms = STATE.process_profile, 0.0
        note = "graph empty when the session was created: process plan used"
    else:
        profile, ms = graph_profile(g)
    plan = plans.plan_for(profile, STATE.mode, streams=STATE.streams)

    new = config_pb2.ConfigProto()
    new.CopyFrom(base)
    if not base.inter_op_parallelism_threads and plan.inter_op > 0:
        new.inter_op_parallelism_threads = plan.inter_op
    if not base.intra_op_parallelism_threads and plan.intra_op > 0:
        new.intra_op_parallelism_threads = plan.intra_op
    if not len(base.session_inter_op_thread_pool):
        new.use_per_session_threads = True
    intra_own = controller.per_session_intra()
    from tf_autopar.runtime.records import SessionRecord  # deferred: enable() imports this module, not the records

    record = SessionRecord(
        session=STATE.next_session_name(),
        graph_nodes=g.version,
        fingerprint=getattr(profile, "fingerprint", "") if profile is not None else "",
        avg_width=getattr(profile, "avg_width", 1) if profile is not None else 1,
        heavy_ops=getattr(profile, "heavy_ops", 0) if profile is not None else 0,
        inter_op=new.inter_op_parallelism_threads,
        intra_op=new.intra_op_parallelism_threads,
        per_session_threads=new.use_per_session_threads,
        intra_per_session=intra_own,
        user_fields=tuple(user_fields),
        note=note,
        analysis_ms=round(ms, 3),
    )
    return new, record
