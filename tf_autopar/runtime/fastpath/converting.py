"""Conversions beside the tuning: an engine's conversion runs while the builder tries the
candidates that need none.

Why: the conversion child runs at SCHED_IDLE (engines/conversion.py), so on a host whose
requests keep it busy a conversion takes long, and the builder used to wait for it with
TensorFlow's pool settings queued behind: on Xception b1 (2-core EPYC) tf2onnx was still running
40 s after OpenVINO had won, no candidate tried meanwhile
(benchmarks/results/fastpath_timeline_xception_epyc.json); NASNetMobile b8 ended its 60 s on the
plan's 2x2 sessions (88.6 ms a call) where 2x1 alone serves 72.7. Here the builder starts the
conversion on a thread of its own (the child's lifetime, at the build priority) and goes on with
the candidates that need no conversion; the engine's candidates come back first once it is done.

One conversion at a time per process: each child takes memory, and what CPU the requests leave.
It holds the memory group's build lock (memory.build_lock: other workers wait, this process's
builder shares it) and, under a container's memory limit, its estimated peak is counted as taken
(memory.reserving) by the room checks of the sessions opened beside it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from tf_autopar.runtime.fastpath import builder, engines, memory, pools
from tf_autopar.runtime.fastpath.engines import conversion
from tf_autopar.runtime.lowprio import LowPriority, NICE_VAR, nice_increment

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.engines import Key
    from tf_autopar.runtime.fastpath.function import Function

log = logging.getLogger("tf_autopar.runtime")

#: How often a builder with nothing else to try looks whether the conversion ended.
POLL_S = 0.1


@dataclass
class Conversion:
    """The conversion under way: for which engine and function, since when."""

    engine: str
    function: str
    future: Future
    started: float


_current: Conversion | None = None
_lock = threading.Lock()
_runner: LowPriority | None = None


def needed(fn: Function, key: Key) -> bool:
    """Whether ``key``'s engine needs a conversion of ``fn``'s graph that is not made (nor failed)."""
    name = engines.engine_of(key)
    if name == engines.DEFAULT or fn.frozen is None:
        return False
    engine = engines.registered().get(name)
    if getattr(engine, "convert", None) is None or getattr(engine, "converted", None) is None:
        return False
    return not pools.failed(fn, key) and not engine.converted(fn.frozen)


def begin(fn: Function, key: Key) -> bool:
    """True when ``key`` is to wait for a conversion: one under way (its own or another engine's),
    or this one started now. False when it cannot start (no room under the memory rule): then
    the candidate is built as any other and pools.pool_for says why it was refused."""
    global _current
    engine = engines.get(engines.engine_of(key))
    with _lock:
        if _current is not None and not _current.future.done():
            return True
        if not pools.room(fn, key)[0]:
            return False
        peak = _child_peak(fn, engine)
        ref = weakref.ref(fn)
        future = _the_runner().submit(_convert, ref, engine, fn.frozen, peak)
        _current = Conversion(engine.name, f"{fn.name} of {fn.model}", future, time.monotonic())
    log.info("tf_autopar: %s of %s: converting for %s in the background", fn.name, fn.model, engine.name)
    future.add_done_callback(lambda _: _next(ref))
    return True


def _next(ref: weakref.ref[Function]) -> None:
    """One conversion ended: the next one a candidate waits for starts now, not when the builder
    next looks (after the trial running then): the conversions end sooner, before the steady state."""
    fn = ref()
    if fn is None or fn.stopped or builder.exiting():
        return
    try:
        for b in list(fn.buckets.values()):
            for key in list(b.candidates):
                if needed(fn, key):
                    begin(fn, key)
                    return
    except Exception as exc:  # ours: the builder starts it at its next look instead
        log.debug("tf_autopar: the next conversion did not start", exc_info=exc)


def wait(exiting: Callable[[], bool]) -> bool:
    """Until the conversion under way ends (the builder has nothing else to try); False at exit."""
    with _lock:
        current = _current
    while current is not None and not current.future.done():
        if exiting():
            return False
        time.sleep(POLL_S)
    return True


def under_way() -> str:
    """The conversion running now in a user's words ("" with none): for status()."""
    with _lock:
        current = _current
    if current is None or current.future.done():
        return ""
    paced = conversion.pace_words()
    return (
        f"converting {current.function} for {current.engine} in the background "
        f"({time.monotonic() - current.started:.0f} s so far{'; ' + paced if paced else ''})"
    )


def _child_peak(fn: Function, engine: Any) -> int:
    need = getattr(engine, "need_bytes", None)
    try:
        return int(need(fn.frozen)[1]) if need is not None else 0
    except Exception:  # the estimate is ours: nothing reserved, the cgroup's usage still counts
        return 0


def _convert(ref: weakref.ref[Function], engine: Any, frozen: Any, peak: int) -> None:
    """The conversion thread: the child converts; a failure is recorded as pools.pool_for's would be."""
    fn = ref()
    if fn is None:
        return
    with memory.build_lock(f"{fn.name} of {fn.model}: converting for {engine.name}", builder.exiting) as held:
        if not held:
            return
        with memory.reserving(peak):
            try:
                engine.convert(frozen)
            except Exception as exc:
                if fn.frozen is frozen:  # a conversion of a graph since retired says nothing of the new one
                    pools.engine_failed(fn, engine, exc)
    memory.trim_heap()


def _the_runner() -> LowPriority:
    global _runner
    if _runner is None:  # under _lock
        _runner = LowPriority(nice_increment(os.environ.get(NICE_VAR)), name="tf_autopar-convert")
    return _runner


def _forget_in_child() -> None:
    """A forked child has neither the parent's conversion thread nor its child: none under way."""
    global _current, _lock, _runner
    _current, _lock, _runner = None, threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
