"""A served function's frozen graph and its engine runners: freeze, plan, open, drop.

Builder thread only. The frozen graph is made once per generation of the variables (watch.py);
a re-freeze retires every runner (their buckets go STALE, rebuilt at their next call). Runners
are kept by setting (inter-op, intra-op, streams) and shared by the buckets that plan alike;
a new one opens only when memory.room_for_build says it fits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tf_autopar.graph import analyze
from tf_autopar.measure.search import stream_neighbourhood
from tf_autopar.runtime import plans, sessions, watch
from tf_autopar.runtime.fastpath import engines, memory, rules
from tf_autopar.runtime.fastpath.engines import choice
from tf_autopar.runtime.fastpath.bucket import State
from tf_autopar.runtime.frozen import FrozenGraph
from tf_autopar.runtime.lowprio import run_low
from tf_autopar.runtime.state import STATE

log = logging.getLogger("tf_autopar.runtime")

if TYPE_CHECKING:
    from tf_autopar.planning.plan import ThreadPlan
    from tf_autopar.runtime.fastpath.engines import Key, Runner, Setting
    from tf_autopar.runtime.fastpath.function import Function


def freeze(fn: Function, generation: int) -> None:
    """A frozen graph of the current variables (once per generation); the old runners retire."""
    if fn.frozen is not None and fn.frozen_generation == generation:
        return
    handles = watch.resource_handles(fn.concrete)
    fn.variable_bytes = memory.variable_bytes(handles)
    ok, why = memory.room_for_build(fn.variable_bytes, 1)
    if not ok:
        fn.refused = why  # asked again at the bucket's retry (build.py): memory may come back
        return
    fn.watch.add(handles)
    concrete = fn.concrete
    # at the build priority (lowprio.py); the converter's and the import's freed copies go back
    # between the stages (memory.after_stage), before the sessions add their own
    frozen = run_low(_frozen_graph, FrozenGraph, concrete)
    memory.trim_heap()
    memory.track(fn)
    with fn.lock:
        old = list(fn.pools.values())
        fn.pools.clear()
        fn.frozen, fn.frozen_generation = frozen, generation
        for b in fn.buckets.values():
            b.trial = None  # its candidate session goes with the others; tuning restarts after the rebuild
            if b.state is State.FAST:
                b.go_stale()  # re-built at the bucket's next call
    for pool in old:
        pool.close()


def plan(fn: Function, arrays: list[Any], batch: int) -> ThreadPlan:
    """The plan for the observed batch (the call's own shapes fill every unknown dimension)."""
    frozen = fn.frozen
    assert frozen is not None
    shapes = {name.split(":")[0]: tuple(a.shape) for name, a in zip(frozen.inputs, arrays) if a.ndim}
    seen = (batch, tuple(sorted(shapes.items())))
    profile = frozen.profiles.get(seen)
    if profile is None:  # a re-plan for new CPU limits reuses it: the graph and the shapes did not change
        graph_def = frozen.graph_def if frozen.graph_def is not None else frozen.graph.as_graph_def(add_shapes=True)
        profile = analyze(graph_def, batch=batch, input_shapes=shapes)
        frozen.graph_def = None  # a third copy of the constants otherwise: re-read from the graph when needed
        frozen.profiles[seen] = profile
    fn.max_width = profile.max_width
    return plans.plan_for(profile, STATE.mode, streams=STATE.streams, tuned_fingerprint=fn.fingerprint, batch=batch)


def plan_key(plan: ThreadPlan) -> Setting:
    """The setting a plan gives the sessions: (inter-op, intra-op, streams)."""
    fields = plan.config_proto_fields()
    return fields["inter_op_parallelism_threads"], fields["intra_op_parallelism_threads"], max(1, plan.instances)


def candidates(fn: Function, plan: ThreadPlan, key: Key) -> list[Key]:
    """What to try against ``key``, itself left out: the other engines first (installed, allowed,
    of the precision opted in to: engines/choice.py), each at the CPU budget (and ONNX Runtime on
    one thread too where the plan gives TensorFlow's sessions one intra-op thread); then TensorFlow's
    sessions at the neighbours of ``key``'s setting (measure/search.py): per-session pools in
    latency mode, in throughput mode the per-stream pools and the stream count too."""
    setting = engines.setting_of(key)
    budget = max(1, getattr(plan, "usable_cpus", 0) or setting[0] * setting[1] * setting[2] or 1)
    width = max(1, int(fn.max_width or 1))
    others = choice.candidate_engines(
        engines.registered(),
        engines.DEFAULT,
        STATE.precision,
        cpu_isa(),
        fn.engine_failed,
        choice.allowed_names(),
    )
    plan_intra = plan_key(plan)[1] if plan is not None else setting[1]
    out: list[Key] = [
        engines.key_for(name, at)
        for name in others
        for at in choice.engine_settings(name, budget, setting[2], plan_intra)
    ]
    out += list(stream_neighbourhood(*setting, budget, width))
    return [k for k in out if k != key]


def tolerance(key: Key) -> tuple[float, bool]:
    """How closely the runner at ``key`` must agree with the original (rules.tolerance, by its engine's precision)."""
    engine = engines.get(engines.engine_of(key))
    return rules.tolerance(getattr(engine, "precision", "f32"))


def cpu_isa() -> tuple[str, ...]:
    """The processor's flags (bf16 engines need AVX512_BF16 or AMX), read once."""
    global _ISA
    if _ISA is None:
        _ISA = choice.cpu_flags()
    return _ISA


_ISA: tuple[str, ...] | None = None


def pool_for(fn: Function, key: Key, arrays: list[Any] | None = None) -> Runner | None:
    """The runner at ``key``: an open one, or a new one when it fits the memory rule; None otherwise
    (``fn.refused`` says why: the memory rule, or an engine that could not convert the graph).
    ``arrays``: the call the bucket was built for; an engine that can (``static_shapes``) adds a
    copy compiled for its shapes where the memory rule has room for both copies."""
    if fn.stopped or fn.frozen is None:
        return None
    with fn.lock:
        pool = fn.pools.get(key)
    if pool is not None:
        return pool
    setting, name = engines.setting_of(key), engines.engine_of(key)
    engine = engines.get(name)
    why = failure(fn, key)
    if why:  # its conversion failed (in the background: converting.py): not made again
        fn.refused = why
        return None
    shapes = static_shapes(engine, arrays)
    ok, why = room(fn, key, bool(shapes))
    if not ok and shapes:  # the free-shape copy alone may fit
        shapes = []
        ok, why = room(fn, key)
    if not ok:
        fn.refused = why
        return None
    if name == engines.DEFAULT:
        pool = engine.build(fn.frozen, setting)
    else:
        pool = _other_engine(fn, engine, setting, shapes)
        if pool is None:
            return None
    with fn.lock:
        fn.pools[key] = pool
    return pool


def failure(fn: Function, key: Key) -> str:
    """Why ``key``'s engine could not run this function's graph (it, or its family); "" when it can."""
    name = engines.engine_of(key)
    if name == engines.DEFAULT:
        return ""
    return choice.failed_why(name, engines.registered().get(name), fn.engine_failed)


def failed(fn: Function, key: Key) -> bool:
    """Whether ``key``'s engine could not run this function's graph (failure, as a yes or no)."""
    return bool(failure(fn, key))


def static_shapes(engine: Any, arrays: list[Any] | None) -> list[tuple[int, ...]]:
    """The shapes to compile ``engine``'s static copy for: the call's, where the engine takes them
    (OpenVINO: it skips inferring shapes node by node on each call; faster on 25 of 28 rows,
    1.08x in geometric mean: openvino_engine.OpenVINORunner); [] otherwise."""
    if not arrays or not getattr(engine, "static_shapes", False):
        return []
    return [tuple(int(d) for d in getattr(a, "shape", ())) for a in arrays]


def room(fn: Function, key: Key, static: bool = False) -> tuple[bool, str]:
    """memory.room_for_build for TensorFlow's sessions; another engine by its own estimate (an
    ONNX Runtime copy of DLRM adds about 0.2 GB, a TensorFlow session's first run 1 GB), with
    its static copy where ``static``."""
    engine = engines.get(engines.engine_of(key))
    opening = engines.setting_of(key)[2]
    sessions_after = sum(p.streams for p in fn.pools.values()) + opening
    need = getattr(engine, "need_bytes", None)
    if need is None or fn.frozen is None:
        return memory.room_for_build(fn.variable_bytes, sessions_after, opening=opening)
    try:
        estimate = need(fn.frozen, static=True) if static else need(fn.frozen)
    except Exception as exc:  # the estimate is ours: fall back to the sessions' rule
        log.debug("tf_autopar: %s's memory estimate failed", engine.name, exc_info=exc)
        return memory.room_for_build(fn.variable_bytes, sessions_after, opening=opening)
    return memory.room_for_engine(fn.variable_bytes, sessions_after, estimate, engine.name)


def _other_engine(fn: Function, engine: Any, setting: Setting, shapes: list[tuple[int, ...]]) -> Runner | None:
    """Another engine's runner: its conversion at the build priority (lowprio.py), its compilation
    here (an engine's thread pools inherit the creating thread's priority, and serve requests).
    A failure is the engine's, not the request's: it is not tried again for this function."""
    try:
        convert = getattr(engine, "convert", None)
        if convert is not None:
            run_low(convert, fn.frozen)
        memory.trim_heap()
        return engine.build(fn.frozen, setting, shapes=shapes) if shapes else engine.build(fn.frozen, setting)
    except Exception as exc:
        engine_failed(fn, engine, exc)
        return None


def engine_failed(fn: Function, engine: Any, exc: Exception) -> None:
    """``engine`` could not take this function's graph: it is not tried again for the function
    (a conversion failure: no variant of it, they share the conversion)."""
    why = f"{engine.name} could not run the graph: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    converting = isinstance(exc, engines.EngineError) and "conversion" in exc.stage
    fn.engine_failed[getattr(engine, "family", engine.name) if converting else engine.name] = why[:300]
    fn.refused = why[:300]
    log.info("tf_autopar: %s of %s: %s", fn.name, fn.model, why)


def drop_pool(fn: Function, key: Key) -> None:
    """Close the runner at ``key`` unless a bucket serves from it."""
    with fn.lock:
        pool = fn.pools.get(key)
        if pool is None or any(b.pool is pool for b in fn.buckets.values()):
            return
        del fn.pools[key]
    pool.close()


def _frozen_graph(make: Any, concrete: Any) -> Any:
    """``make(concrete)`` with the session hook bypassed (a thread-local switch: set here, on the
    thread that runs it), its garbage collected among its own objects (memory.young_garbage)."""
    with sessions.bypass(), memory.young_garbage():
        return make(concrete, between=memory.after_stage)
