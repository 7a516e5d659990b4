"""The routed functions of this process: routing a loaded model (``route``, ``route_keras``), undoing
it (``unroute_all``), following new CPU limits (``replan_all``), and what status() and `tune` read
of them (``records``, ``summaries``). Never raises into the user's load."""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from typing import Any

from tf_autopar.runtime import quota_watch, state
from tf_autopar.runtime.fastpath import builder, memory, remembered, replan, report, routing, trials
from tf_autopar.runtime.fastpath.bucket import State
from tf_autopar.runtime.fastpath.routing.arrays import synthetic
from tf_autopar.runtime.fastpath.served import ServedFunction
from tf_autopar.runtime.fastpath.switches import wanted
from tf_autopar.runtime.records import ServedRecord
from tf_autopar.runtime.safety import fail_open, maybe_fail

log = logging.getLogger("tf_autopar.runtime")

_served: weakref.WeakSet[ServedFunction] = weakref.WeakSet()
_served_lock = threading.Lock()


def route(loaded: Any, path: str, fingerprint: str | None, source: str = routing.SAVED_MODEL) -> int:
    """Route what the conventions for ``source`` serve on ``loaded`` (by default a SavedModel's
    signatures and single-signature restored functions); how many."""
    if not wanted():
        return 0
    routed = 0
    try:
        maybe_fail("fast path")
        found = [(n, t, c) for c in routing.for_source(source) for n, t in c.find(loaded)]
        if not found:
            return 0
        memory = remembered.lookup(fingerprint)
        # routed before this call (a second load hook, optimize()): not again; a restored function
        # with several concrete functions is several entries of one target, installed in turn
        already = {(id(t), c.kind) for _, t, c in found if routing.routed(t, getattr(c, "attr", routing.ATTR))}
        for name, target, convention in found:
            if (id(target), convention.kind) in already:
                continue
            served = ServedFunction(target, name, convention, path, fingerprint)
            convention.install(target, served)
            with _served_lock:
                _served.add(served)
            routed += 1
            remembered.prebuild(served, memory.get(name, {}))
        if routed:
            quota_watch.start(replan_all, memory_tick)
    except Exception as exc:  # fail open: the model runs the original way
        fail_open(f"route the loaded {_words(source)} to its frozen session", exc)
    return routed


def route_keras(model: Any, path: str, fingerprint: str | None) -> int:
    """Route a ``keras.models.load_model`` model's inference calls: ``model(x)``, ``predict`` of one
    batch of arrays, ``predict_on_batch``; how many."""
    return route(model, path, fingerprint, routing.KERAS_MODEL)


def _words(source: str) -> str:
    return "Keras model" if source == routing.KERAS_MODEL else "model"


def unroute_all() -> None:
    """disable(): every routed object gets its own class back; the sessions close."""
    with _served_lock:
        served = list(_served)
        _served.clear()
    for s in served:
        s.unroute()


def replan_all() -> None:
    """The CPU limits changed (quota_watch.py): each bucket serving from a session, or about to (a
    build queued before the change plans for the old limits), is re-planned on the builder thread
    after its build (replan.py); calls keep being served meanwhile."""
    for s in _all():
        for b in list(s.buckets.values()):
            if b.state in (State.FAST, State.QUEUED, State.BUILDING, State.CHECKING) and b.batch:
                builder.submit(s, b.bucket, replan.replan, [synthetic(spec, b.batch) for _, spec in s.specs])


_trials_paused = False  # memory_tick closed the candidates' sessions, and has not resumed them


def memory_tick() -> None:
    """Each second (quota_watch.py's thread), while a bucket is building or tuning: the memory
    limit read again; under pressure the candidates' sessions close (builds wait by themselves:
    memory.wait_for_room), and when room is back their tuning resumes. Cheap when idle: no read."""
    global _trials_paused
    served = _all()
    if not _trials_paused and not any(_has_work(b) for s in served for b in list(s.buckets.values())):
        return
    why, _ = memory.refresh()
    if bool(why) == _trials_paused:
        return
    _trials_paused = bool(why)
    for s in served:
        if why:
            trials.pause(s, why)
        else:
            trials.resume(s)


def _has_work(b: Any) -> bool:
    return (
        b.state in (State.QUEUED, State.BUILDING, State.CHECKING)
        or b.trial is not None
        or bool(b.candidates and b.tuned != "done")
    )


def records() -> tuple[ServedRecord, ...]:
    with _served_lock:
        served = sorted(_served, key=lambda s: (s.model, s.name))
    return tuple(report.record(s) for s in served)


def summaries() -> dict[tuple[str, str], dict[str, Any]]:
    """(model, function) -> what the plan cache keeps of it (report.summary): per bucket the
    calls, the verdict, the setting and live tuning's evidence. For `tune` (tuning/inprocess.py)."""
    out = {}
    for s in _all():
        with s.lock:
            out[(s.model, s.name)] = report.summary(s)
    return out


def tune_as(function: tuple[str, str], by: str) -> bool:
    """Record the live tuning of ``function`` ((model, function name), as records() names it) as
    done ``by`` (switches.BY_TUNE: `tf-autopar tune`'s process); False when it is not routed."""
    found = [s for s in _all() if (s.model, s.name) == function]
    for s in found:
        s.by = by
    return bool(found)


def _all() -> list[ServedFunction]:
    with _served_lock:
        return list(_served)


def _at_exit() -> None:
    """The running build ends first, then the calls counted since the last write go to the cache."""
    try:
        builder.stop_at_exit()
        for s in _all():
            if s.calls:
                remembered.remember(s)
    except Exception as exc:  # never break the interpreter's exit
        log.debug("tf_autopar: fast-path cache flush at exit failed", exc_info=exc)


atexit.register(_at_exit)
state.provide("served", records)  # status().served: registered once something may be routed
