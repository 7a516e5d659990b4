"""The fast path: a loaded SavedModel's calls served from its frozen graph in a session of its own.

Measured on this kind of host (docs/serving.md), a signature of a SavedModel loaded with
``tf.saved_model.load`` runs up to 2.6x faster as a frozen graph (variables folded into
constants, so grappler folds batch norms and fuses ops) in a ``tf.compat.v1.Session`` with
pools planned for it than called the usual way, beyond the best process-pool setting. So with
``enable()`` in an inference mode, each signature of a model loaded through the load hook
(``loaded.signatures[name]``) and each restored function with a single input signature
(``loaded.serve``, what ``keras.Model.export`` writes) is routed:

- How: the function object's class is swapped for a subclass whose ``__call__`` routes
  (``_routed_class``). The user's objects stay theirs (identity, attributes, ``isinstance``);
  ``disable()`` swaps the class back. A signature map that routes would return other objects
  than the ones TensorFlow hands out, and a hook inside ``_call_flat`` would also catch calls
  made while a graph is being built, which must stay graph calls.
- Which calls: eager calls whose inputs are numpy arrays or tensors of exactly the signature's
  dtypes and compatible shapes, by keyword (signatures) or positionally (restored functions).
  Anything else (a cast the original would make, a wrong shape, a call inside a tf.function)
  goes to the original, which gives its own result or its own error.
- No request waits: until a bucket's session is ready, calls run the original way; the first
  call of a batch bucket (powers of two: fastpath_rules.bucket_of) queues a build on one
  background thread: freeze, analyse at the observed batch, plan, open the sessions, run the
  call's inputs and compare with the original's outputs (fastpath_rules.RTOL), then time both
  paths: on the live calls when the function has traffic (alternate blocks of calls from the frozen
  session, paired under the same load and decided by measure/live.py's rule, as live tuning
  is), in paired rounds on the builder thread when it has none. The bucket switches only if the
  outputs agree and the frozen path is not slower; otherwise it stays on the original path and
  says why once.
- Stale constants: the variables are watched (watch.py); after a write, calls run the original
  way until the re-frozen session is ready.
- Memory: the frozen copy costs about twice the variables per session; over the bound
  (fastpath_rules.memory_verdict) the model stays on the original path and says so.
- Remembered: each bucket's calls and verdict go into the plan cache; the next start plans the
  process pools for the commonest batch and, where the frozen path won last time, builds it
  while the model loads, so the first call is served by it (verified again on that call's
  inputs, in the background).
- Tuned live: once a bucket serves from its session, the plan's neighbours (measure/search.py)
  are tried one at a time on live calls, in alternate blocks of calls, each candidate call paired
  with the incumbent call at the same place of the block before, under the same load;
  measure/live.py decides from the pairs. A winner replaces the incumbent; the result and its evidence are remembered for the next start. At most
  one candidate session beside the serving one; candidates are built on the builder thread.
  ``enable(tune_live=False)`` or ``TF_AUTOPAR_TUNE_LIVE=0`` turns it off.
- Fail open: any failure of ours runs the original call (one warning) and retires that bucket.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import queue
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tf_autopar.measure.live import PairedTrial, Pairer, turn
from tf_autopar.planning.modes import INFERENCE_MODES
from tf_autopar.runtime import cache, core, fastpath_replan, quota_watch, sessions, watch
from tf_autopar.runtime.lowprio import run_low
from tf_autopar.runtime import fastpath_rules as rules
from tf_autopar.runtime import tf_allocator
from tf_autopar.runtime.safety import fail_open, maybe_fail, warn_once
from tf_autopar.runtime.state import STATE
from tf_autopar.runtime.streams import Retired, StreamPool

if TYPE_CHECKING:
    from tf_autopar.planning.plan import ThreadPlan
    from tf_autopar.runtime.frozen import FrozenGraph
    from tf_autopar.runtime.records import ServedRecord

log = logging.getLogger("tf_autopar.runtime")

SWITCH_VAR = "TF_AUTOPAR_FAST_PATH"
LIVE_VAR = "TF_AUTOPAR_TUNE_LIVE"
PATCH_NAME = "fast path (loaded SavedModel signatures and restored functions)"
_ATTR = "_tf_autopar_served"
SIGNATURE, POSITIONAL, KERAS = "signature", "positional", "keras predict"  # calling conventions
#: predict() arguments a routed call may carry (others, e.g. callbacks or steps, go to Keras itself)
_PREDICT_KWARGS = frozenset({"x", "batch_size", "verbose"})
QUEUED, BUILDING, FAST, STALE, ORIGINAL = "queued", "building", "frozen session", "stale", "original"
CHECKING = "checking"  # the switch check on live calls: the frozen session takes alternate blocks of calls

_routed_classes: dict[type, type] = {}
_served: "weakref.WeakSet[ServedFunction]" = weakref.WeakSet()
_served_lock = threading.Lock()


def switched_off() -> str:
    """``"TF_AUTOPAR_FAST_PATH=0"`` when the environment switch turns the fast path off, else ""."""
    value = os.environ.get(SWITCH_VAR, "").strip()
    return f"{SWITCH_VAR}={value}" if value.lower() in ("0", "false", "no", "off") else ""


def live_wanted() -> bool:
    """Live tuning is on: the fast path is, and neither ``tune_live=False`` nor the variable turned it off."""
    value = os.environ.get(LIVE_VAR, "").strip().lower()
    return wanted() and STATE.tune_live and value not in ("0", "false", "no", "off")


def wanted() -> bool:
    """The fast path is on: enabled, in an inference mode, not switched off by argument or variable."""
    return STATE.enabled and STATE.fast_path and STATE.mode in INFERENCE_MODES and not switched_off()


# ------------------------------------------------------------------------------ routing


def route(loaded: Any, path: str, fingerprint: str | None) -> int:
    """Route the loaded SavedModel's signatures and single-signature restored functions; how many.
    Never raises into the user's load."""
    if not wanted():
        return 0
    routed = 0
    try:
        maybe_fail("fast path")
        remembered = _remembered(fingerprint)
        for name, target, kind in _servable(loaded):
            if target.__dict__.get(_ATTR) is not None:
                continue
            served = ServedFunction(target, name, kind, path, fingerprint)
            target.__dict__[_ATTR] = served
            target.__class__ = _routed_class(type(target))
            with _served_lock:
                _served.add(served)
            routed += 1
            served.prebuild(remembered.get(name, {}))
        if routed:
            quota_watch.start(replan_all)
    except Exception as exc:  # fail open: the model runs the original way
        fail_open("route the loaded model to its frozen session", exc)
    return routed


def route_keras(model: Any, path: str, fingerprint: str | None) -> int:
    """Route a ``keras.models.load_model`` model's ``predict`` (one batch of arrays, no callbacks);
    how many (0 or 1). Never raises into the user's load."""
    if not wanted():
        return 0
    try:
        maybe_fail("fast path")
        if vars(model).get(_ATTR) is not None or _keras_specs(model) is None:
            return 0
        served = ServedFunction(model, "predict", KERAS, path, fingerprint)
        vars(model)[_ATTR] = served

        def predict(*args: Any, **kwargs: Any) -> Any:
            return served.call(model, args, kwargs)

        vars(model)["predict"] = predict  # an instance attribute: the class and its other methods stay Keras's
        with _served_lock:
            _served.add(served)
        served.prebuild(_remembered(fingerprint).get("predict", {}))
        quota_watch.start(replan_all)
        return 1
    except Exception as exc:
        fail_open("route the loaded Keras model to its frozen session", exc)
        return 0


def _keras_specs(model: Any) -> list[tuple[str, Any]] | None:
    """A Keras model's declared inputs as (name, TensorSpec) with a free batch, or None."""
    from tf_autopar.runtime.frozen import _keras_signature

    inputs = getattr(model, "inputs", None)
    specs = _keras_signature(model)
    if not inputs or not specs:
        return None
    return [(str(getattr(t, "name", f"input {i}")), spec) for i, (t, spec) in enumerate(zip(inputs, specs))]


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
    after its build (fastpath_replan.py); calls keep being served meanwhile."""
    with _served_lock:
        served = list(_served)
    for s in served:
        for b in list(s.buckets.values()):
            if b.state in (FAST, QUEUED, BUILDING, CHECKING) and b.batch:
                _builder().submit_call(
                    s, b.bucket, [_synthetic(spec, b.batch) for _, spec in s.specs], fastpath_replan.replan
                )


def records() -> tuple[ServedRecord, ...]:
    with _served_lock:
        served = sorted(_served, key=lambda s: (s.model, s.name))
    return tuple(s.record() for s in served)


def summaries() -> dict[tuple[str, str], dict[str, Any]]:
    """(model, function) -> what the plan cache keeps of it (ServedFunction.summary): per bucket the
    calls, the verdict, the setting and live tuning's evidence. For `tune` (tuning/inprocess.py)."""
    with _served_lock:
        served = list(_served)
    out = {}
    for s in served:
        with s.lock:
            out[(s.model, s.name)] = s.summary()
    return out


def _servable(loaded: Any) -> list[tuple[str, Any, str]]:
    """(name, function object, calling convention) of what a server calls on a loaded SavedModel."""
    out: list[tuple[str, Any, str]] = []
    signatures = getattr(loaded, "signatures", None)
    if signatures is not None and hasattr(signatures, "items"):
        for name, concrete in sorted(signatures.items()):
            if _specs(concrete, SIGNATURE) is not None:
                out.append((f"signatures[{name!r}]", concrete, SIGNATURE))
    for name, value in sorted(vars(loaded).items()):
        if name.startswith("_") or type(value).__name__ != "RestoredFunction":
            continue
        concretes = list(getattr(value, "concrete_functions", ()) or ())
        if len(concretes) == 1 and _specs(concretes[0], POSITIONAL) is not None:
            out.append((name, value, POSITIONAL))
    return out


def _routed_class(cls: type) -> type:
    """The subclass whose ``__call__`` routes through the object's ServedFunction (made once per class)."""
    sub = _routed_classes.get(cls)
    if sub is None:

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            served = self.__dict__.get(_ATTR)
            if served is None:
                return cls.__call__(self, *args, **kwargs)
            return served.call(self, args, kwargs)

        sub = type(cls)(
            cls.__name__,
            (cls,),
            {
                "__call__": __call__,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "_tf_autopar_original": cls,
            },
        )
        _routed_classes[cls] = sub
    return sub


def _specs(concrete: Any, kind: str) -> list[tuple[str, Any]] | None:
    """The inputs (name, TensorSpec) in the frozen graph's placeholder order, or None when the
    function's inputs are not a flat set of tensors (then it is not routed)."""
    import tensorflow as tf

    sig = getattr(concrete, "structured_input_signature", None)
    if not (isinstance(sig, tuple) and len(sig) == 2):
        return None
    args, kwargs = sig
    if kind == SIGNATURE:
        if args or not isinstance(kwargs, dict) or not kwargs:
            return None
        names = tf.nest.flatten({k: k for k in kwargs})  # TF flattens a dict in sorted key order
        specs = [(n, kwargs[n]) for n in names]
    else:
        if kwargs or not args:
            return None
        specs = [(getattr(s, "name", "") or f"input {i}", s) for i, s in enumerate(tf.nest.flatten(args))]
    if not all(isinstance(s, tf.TensorSpec) for _, s in specs):
        return None
    return specs


# ------------------------------------------------------------------------------ one function


@dataclass
class _Bucket:
    bucket: int
    state: str = QUEUED
    batch: int = 0  # the largest batch seen in the bucket: what its plan was made for
    pool: StreamPool | None = None
    plan: ThreadPlan | None = None
    generation: int = 0
    speedup: float = 0.0
    spread: float = 0.0
    evidence: str = ""  # what speedup and spread were measured on
    build_s: float = 0.0
    reason: str = ""
    verify: bool = False  # built from the cache at load: check against the original on the first call
    served: int = 0  # calls the frozen session answered
    since: float = 0.0  # when the bucket switched (monotonic)
    key: tuple[int, int, int] = (0, 0, 0)  # the serving sessions' (inter-op, intra-op, streams)
    warm: list[Any] = field(default_factory=list)  # the build's inputs, to warm candidate sessions up
    expected: list[Any] = field(default_factory=list)  # the original's outputs for them
    candidates: list[tuple[int, int, int]] = field(default_factory=list)  # live tuning: still to try
    trial: "_Trial | None" = None
    tried: list[str] = field(default_factory=list)  # "2x1: lose (not faster ...)" per finished trial
    tuned: str = ""  # "done" when every candidate was tried; the evidence of a win is in ``won``
    won: dict[str, Any] = field(default_factory=dict)
    by: str = ""  # who tuned it (BY_LIVE, BY_TUNE), once ``tuned``
    in_flight: int = 0
    attempts: int = 0  # switch checks that found the frozen session not faster
    checking: tuple[int, int, int] | None = None  # a neighbour's switch check under way (the plan's lost)
    checks: list[tuple[int, int, int]] | None = None  # neighbours still to check; None: not begun
    lost: list[tuple[int, int, int]] = field(default_factory=list)  # settings the original path beat
    retry_at: float = 0.0  # when the next one may run (monotonic; 0: never)
    faults: list[int] = field(default_factory=list)  # minor page faults of its first calls (tf_allocator.py)


EARLIER = " at an earlier start"  # a remembered verdict's evidence, said once however many starts ago


class _Trial:
    """A candidate session taking alternate blocks of a bucket's calls (measure/live.py), and the evidence so far."""

    def __init__(self, key: tuple[int, int, int], pool: StreamPool, switch: bool = False) -> None:
        self.key, self.pool = key, pool
        # the switch check: the frozen session against the original path, taken when not slower
        noise = 1.0 / rules.SWITCH_RATIO - 1.0 if rules.SWITCH_RATIO > 0 else float("inf")  # 0: never taken
        self.test = (
            PairedTrial(noise=noise, max_pairs=rules.SWITCH_MAX_PAIRS, point_at_end=True) if switch else PairedTrial()
        )
        self.pairer = Pairer()
        self.done = threading.Event()  # the switch check's verdict is in (the builder waits for it)
        self.calls = 0
        self.started = time.monotonic()

    def take(self) -> tuple[bool, int]:
        """(the candidate serves this call?, its place in its block: 0, the first after a switch, is not timed)."""
        self.calls += 1
        return turn(self.calls - 1)


class ServedFunction:
    """One routed function: its buckets, their sessions and what status() says of them."""

    def __init__(self, target: Any, name: str, kind: str, model: str, fingerprint: str | None) -> None:
        self.name, self.kind, self.model, self.fingerprint = name, kind, model, fingerprint
        self.original_class = type(target)
        if kind == KERAS:
            self._concrete: Any = None  # traced in the builder: tracing a model is no work for a request
            self.specs = _keras_specs(target) or []
            self.arg_structure: Any = None
            self.keras_form = "single"  # how predict's calls give their inputs: "single", "list" or "dict"
        else:
            self._concrete = target if kind == SIGNATURE else list(target.concrete_functions)[0]
            self.specs = _specs(self._concrete, kind) or []
            self.arg_structure = self._concrete.structured_input_signature[0]
        self.feeds = [_Feed(spec) for _, spec in self.specs]
        self._target = weakref.ref(target)
        self.lock = threading.Lock()
        self.calls: collections.Counter[int] = collections.Counter()
        self.buckets: dict[int, _Bucket] = {}
        self.watch = watch.Watch()
        self.frozen: FrozenGraph | None = None
        self.frozen_generation = -1
        self.pools: dict[tuple[int, int, int], StreamPool] = {}
        self.max_width = 1
        self.variable_bytes = 0
        self.stopped = ""  # why the whole function stays on the original path

    # ------------------------------------------------------------------ request path
    def call(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        def original() -> Any:
            return self._original(target, args, kwargs)

        if self.stopped or not wanted():
            return original()
        try:
            matched = self._match(args, kwargs)
        except Exception as exc:  # ours: fail open
            fail_open("read a call's inputs for the fast path", exc)
            return original()
        if matched is None:
            return original()
        arrays, batch = matched
        bucket_id = rules.bucket_of(batch)
        self.calls[bucket_id] += 1
        b = self.buckets.get(bucket_id)
        if b is not None and b.state == FAST and b.pool is not None:
            if b.generation == self.watch.generation:
                try:
                    out = self._serve(b, arrays)
                    b.served += 1
                    if b.verify:
                        b.verify = False
                        _builder().submit(self, bucket_id, [a.copy() for a in arrays], batch, None, verify_out=out)
                    return out
                except Retired:
                    pass  # re-frozen meanwhile: the original serves this call
                except Exception as exc:
                    self._retire_bucket(b, f"its frozen session failed: {type(exc).__name__}: {exc}")
                    fail_open("serve a call from the frozen session", exc)
        elif b is not None and b.state == CHECKING and b.trial is not None and b.generation == self.watch.generation:
            return self._check_call(b, target, args, kwargs, arrays)
        # a bucket kept on the original path is counted too: malloc's faults can be why it lost its check
        mark = _fault_mark(b) if b is not None and b.state == ORIGINAL else None
        out = original()
        self._count_faults(b, mark)  # type: ignore[arg-type]
        if (
            b is None
            or b.state == STALE
            or (b.state in (FAST, CHECKING) and b.generation != self.watch.generation)
            or (b.state == ORIGINAL and b.retry_at and time.monotonic() > b.retry_at)
        ):
            self._schedule(bucket_id, arrays, batch, out)  # first call of the bucket, its variables written, a retry
        return out

    @property
    def concrete(self) -> Any:
        if self._concrete is None:  # a Keras model: its inference call, traced once (builder thread)
            from tf_autopar.runtime.frozen import _concrete, _keras_signature

            target = self._target()
            if target is None:
                raise RuntimeError("the model was collected")
            with sessions.bypass():
                self._concrete = _concrete(target, tuple(_keras_signature(target) or ()))
        return self._concrete

    def _original(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call as it would have run without us."""
        if self.kind == SIGNATURE:
            return self.original_class.__call__(target, *args, **kwargs)
        with sessions.bypass():  # its trace is the fast path's to plan, not the tf.function hook's to warn about
            if self.kind == KERAS:
                return self.original_class.predict(target, *args, **kwargs)
            return self.original_class.__call__(target, *args, **kwargs)

    def _match(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], int] | None:
        """The call's inputs as numpy arrays in placeholder order and its batch, or None when the
        call is not one the fast path serves exactly as the original would."""
        from tensorflow.python.eager import context

        if not context.executing_eagerly():
            return None
        if self.kind == KERAS:
            return self._match_predict(args, kwargs)
        if self.kind == SIGNATURE:
            if args or len(kwargs) != len(self.specs):
                return None
            values = [kwargs.get(n, _MISSING) for n, _ in self.specs]
        else:
            if kwargs or len(args) != len(self.arg_structure):
                return None
            try:  # nested inputs (a dict for a Keras model with named inputs) flatten as the spec does
                import tensorflow as tf

                tf.nest.assert_same_structure(self.arg_structure, args)
            except (ValueError, TypeError):
                return None
            values = tf.nest.flatten(args)
        import numpy as np
        import tensorflow as tf

        arrays = []
        batch = 0
        for value, feed in zip(values, self.feeds):
            array = _exact_array(value, feed, np, tf)
            if array is None:
                return None
            if feed.batched:
                if batch and array.shape[0] != batch:
                    return None
                batch = array.shape[0]
            arrays.append(array)
        if batch < 1:
            batch = 1 if not any(feed.batched for feed in self.feeds) else 0
        return (arrays, batch) if batch >= 1 else None

    def _serve(self, b: _Bucket, arrays: list[Any]) -> Any:
        """A call from the bucket's session, or while a trial runs, alternate blocks from the
        candidate's; each timed (the session run alone) and paired for the trial."""
        trial, pool = b.trial, b.pool
        candidate, place = trial.take() if trial is not None else (False, 0)
        if candidate:
            pool = trial.pool  # type: ignore[union-attr]
        level = b.in_flight
        b.in_flight += 1
        mark = _fault_mark(b)
        try:
            t0 = time.perf_counter()
            out = self._run(pool, arrays)  # type: ignore[arg-type]
            seconds = time.perf_counter() - t0
        finally:
            b.in_flight -= 1
        self._count_faults(b, mark)
        if trial is not None and self._paired_call(trial, candidate, place, level, seconds):
            self._end_trial(b, trial)
        return out

    def _count_faults(self, b: _Bucket, mark: int | None) -> None:
        """One call's page faults since ``mark`` (None: not counted); after SAMPLE_CALLS of them, the
        allocator advice, said once per process (concurrent callers may each see the count complete:
        warn_once says it once)."""
        if mark is None:
            return
        b.faults.append(tf_allocator.minor_faults() - mark)
        if len(b.faults) < tf_allocator.SAMPLE_CALLS:
            return
        try:
            text = tf_allocator.advice(b.faults, os.environ, tf_allocator.in_use())
        except Exception as exc:  # ours: the call is answered all the same
            fail_open("count the fast path's page faults", exc)
            return
        if text:
            warn_once("cpu-allocator", f"tf_autopar: {self.name}, batch {_bucket_words(b.bucket)}: {text}")
            # the count into the plan cache, off the request path: the next start sets the variable
            _builder().submit_call(self, b.bucket, [], lambda served, _bucket, _arrays: served._remember())

    def _check_call(
        self, b: _Bucket, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], arrays: list[Any]
    ) -> Any:
        """The switch check on live traffic: alternate blocks of calls from the frozen session (its outputs
        were checked at the build), the others the original way, each timed and paired under the
        same load. Measured on the calls the server runs, a check is not skewed by the traffic
        beside it, as paired rounds on the builder thread were (BERT at batch 16: 0.93x there,
        where a quiet sweep had the frozen session 10% ahead)."""
        trial = b.trial
        assert trial is not None
        candidate, place = trial.take()
        level = b.in_flight
        b.in_flight += 1
        try:
            t0 = time.perf_counter()
            if candidate:
                try:
                    out = self._run(trial.pool, arrays)
                except Exception as exc:  # Retired by a re-freeze, or ours failing: the original answers
                    with self.lock:
                        if b.trial is trial:
                            b.trial, b.state = None, STALE if isinstance(exc, Retired) else ORIGINAL
                    if not isinstance(exc, Retired):
                        self._keep_original(b, f"its frozen session failed: {type(exc).__name__}: {exc}")
                        fail_open("serve a call from the frozen session", exc)
                    return self._original(target, args, kwargs)
            else:
                out = self._original(target, args, kwargs)
            seconds = time.perf_counter() - t0
        finally:
            b.in_flight -= 1
        if candidate:
            b.served += 1
        if self._paired_call(trial, candidate, place, level, seconds):
            with self.lock:
                if b.trial is trial:
                    b.trial = None  # the calls go the original way until the builder settles the verdict
                    trial.done.set()
        return out

    @staticmethod
    def _paired_call(trial: _Trial, candidate: bool, place: int, level: int, seconds: float) -> bool:
        """One timed call into the trial's pairs; True when the rule has decided."""
        if place == 0:  # the first call after the switch: not timed
            return False
        if not candidate:
            trial.pairer.incumbent(level, seconds, place)
            return False
        pair = trial.pairer.candidate(level, seconds, place)
        return pair is not None and trial.test.add(*pair) != "undecided"

    def _end_trial(self, b: _Bucket, trial: _Trial) -> None:
        """The verdict is in: a winner becomes the incumbent; the next candidate is built off the request path."""
        with self.lock:
            if b.trial is not trial:
                return
            b.trial = None
            label = rules.label(trial.key)
            test = trial.test
            b.tried.append(f"{label}: {test.verdict} ({test.why})")
            retired = trial.pool
            if test.verdict == "win":
                before = b.won  # an earlier win in this bucket: the evidence chains back to the plan
                earlier = before.get("pairs_total", before.get("pairs", 0))
                b.won = {
                    "from": rules.label(b.key),
                    "to": label,
                    "speedup": round(test.speedup, 4),
                    "pairs": len(test.ratios),
                    "spread": round(test.spread, 4),
                    "pairs_total": len(test.ratios) + (earlier if isinstance(earlier, int) else 0),
                    "seconds": round(time.monotonic() - trial.started, 1),
                    "date": time.strftime("%Y-%m-%d"),
                    "plan": before.get("plan", before.get("from", rules.label(b.key))),
                    "total": round(test.speedup * (_number(before.get("total", before.get("speedup"))) or 1.0), 4),
                    "by": TUNED_BY,
                }
                retired, b.pool, b.key = b.pool, trial.pool, trial.key
                if b.speedup:
                    b.speedup *= test.speedup
            in_use = any(o.pool is retired for o in self.buckets.values() if o is not b) or retired is b.pool
            if not in_use:
                self.pools = {k: p for k, p in self.pools.items() if p is not retired}
        if not in_use and retired is not None:
            retired.retire()
        log.info(
            "tf_autopar: live tuning of %s, batch %s: %s %s (%s)",
            self.name,
            _bucket_words(b.bucket),
            label,
            "won" if test.verdict == "win" else "kept the incumbent",
            test.why,
        )
        _builder().submit_trial(self, b.bucket)

    def next_trial(self, bucket_id: int) -> None:
        """Builder thread: open the next candidate's session (warmed up and checked), or finish."""
        b = self.buckets.get(bucket_id)
        if b is None or b.state != FAST or b.trial is not None or self.frozen is None:
            return
        while b.candidates:
            key = b.candidates.pop(0)
            if key == b.key:
                continue
            pool = self._pool_for(key)
            if pool is None:
                b.tried.append(f"{rules.label(key)}: not tried (memory bound)")
                continue
            values = run_low(pool.run, self.frozen.outputs, dict(zip(self.frozen.inputs, b.warm)))  # grappler, here
            diff = rules.outputs_differ(values, b.expected)
            if diff:
                b.tried.append(f"{rules.label(key)}: not tried (outputs differ: {diff})")
                self._drop_pool(key)
                continue
            with self.lock:
                if b.state == FAST and b.generation == self.watch.generation:
                    b.trial = _Trial(key, pool)
                    return
            self._drop_pool(key)
            return
        b.tuned, b.by = "done", TUNED_BY
        b.warm, b.expected = [], []
        self._remember()

    def _drop_pool(self, key: tuple[int, int, int]) -> None:
        with self.lock:
            pool = self.pools.get(key)
            if pool is None or any(b.pool is pool for b in self.buckets.values()):
                return
            del self.pools[key]
        pool.retire()

    def _match_predict(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], int] | None:
        """predict(x) with x one batch (at most ``batch_size``, default 32) of numpy arrays: an array,
        a list in the model's input order or a dict by input name; anything else is Keras's to handle."""
        import numpy as np

        if len(args) > 1 or set(kwargs) - _PREDICT_KWARGS or (args and "x" in kwargs):
            return None
        x = args[0] if args else kwargs.get("x")
        if isinstance(x, dict):
            if sorted(x) != sorted(n for n, _ in self.specs):
                return None
            values, form = [x[n] for n, _ in self.specs], "dict"
        elif isinstance(x, (list, tuple)):
            values, form = list(x), "list"
        else:
            values, form = [x], "single"
        if len(values) != len(self.specs) or not all(isinstance(v, np.ndarray) for v in values):
            return None
        batch = values[0].shape[0] if values[0].ndim else 0
        limit = kwargs.get("batch_size") or 32
        if not isinstance(limit, int) or batch < 1 or batch > limit or any(v.shape[:1] != (batch,) for v in values):
            return None
        import tensorflow as tf

        arrays = [_exact_array(v, feed, np, tf) for v, feed in zip(values, self.feeds)]
        if any(a is None for a in arrays):
            return None
        self.keras_form = form
        return arrays, batch

    def _run(self, pool: StreamPool, arrays: list[Any]) -> Any:
        import tensorflow as tf

        frozen = self.frozen
        assert frozen is not None
        values = pool.run(frozen.outputs, dict(zip(frozen.inputs, arrays)))
        if self.kind == KERAS:  # predict returns numpy in the model's output structure
            return tf.nest.pack_sequence_as(frozen.structure, list(values))
        # tf.constant, not convert_to_tensor: the same eager tensor of a numpy array, without the
        # conversion registry's dispatch (measured: 22 against 55 us for a 1x256 float output)
        return tf.nest.pack_sequence_as(frozen.structure, [tf.constant(v) for v in values])

    def _schedule(self, bucket_id: int, arrays: list[Any], batch: int, out: Any) -> None:
        with self.lock:
            b = self.buckets.get(bucket_id)
            if b is not None and b.state in (QUEUED, BUILDING):
                return
            if b is None:
                b = self.buckets[bucket_id] = _Bucket(bucket_id)
            if b.state == CHECKING:
                b.trial = None  # the variables changed under the check: it starts again after the rebuild
            b.state, b.batch, b.retry_at = QUEUED, max(b.batch, batch), 0.0
        # copies: the caller may reuse its buffers before the build reads them
        _builder().submit(self, bucket_id, [a.copy() for a in arrays], batch, out)

    def _retire_bucket(self, b: _Bucket, reason: str) -> None:
        with self.lock:
            b.state, b.reason, b.pool = ORIGINAL, reason, None

    # ------------------------------------------------------------------ building (builder thread)
    def build(self, bucket_id: int, arrays: list[Any], batch: int, original_out: Any) -> None:
        import numpy as np
        import tensorflow as tf

        b = self.buckets[bucket_id]
        t0 = time.perf_counter()
        calls_before = sum(self.calls.values())  # more by the check's start: traffic beside the build
        with self.lock:
            b.state = BUILDING
        generation = self.watch.generation  # before the values are read: a write during the build shows next call
        maybe_fail("fast path build")
        self._freeze(generation)
        pool = None
        if not self.stopped:
            plan = run_low(self._plan, arrays, batch)
            # a re-freeze keeps what tuning chose; a neighbour's switch check (below) its setting
            key = b.key if b.tuned == "done" and b.key[0] else (b.checking or self._key(plan))
            pool = self._pool_for(key)
        if pool is None:
            self._keep_original(b, self.stopped or "no session fits the memory bound beside the ones it has")
            return
        if _exiting():
            return
        original_flat = [np.asarray(t) for t in tf.nest.flatten(original_out)]
        # first run: grappler, at the build priority
        frozen_flat = run_low(pool.run, self.frozen.outputs, dict(zip(self.frozen.inputs, arrays)))
        diff = rules.outputs_differ(frozen_flat, original_flat)
        if diff:
            self._keep_original(b, f"the frozen graph's outputs differ from the original's ({diff})")
            return
        target = self._target()
        if target is None or _exiting():
            return
        with self.lock:
            b.plan, b.batch, b.warm, b.expected = plan, max(b.batch, batch), arrays, original_flat
        verdict = None
        if sum(self.calls.values()) != calls_before:  # traffic beside the build: checked on the live calls
            verdict = self._live_check(b, key, pool, generation, target, arrays)
            if verdict is None:  # a re-freeze or a failure took the check away: its own build checks again
                return
        if not verdict:  # no traffic (or it stopped): paired rounds here, alone
            times_o, times_f = self._paired(target, pool, arrays)
            verdict = (*rules.switch_verdict(times_o, times_f), f"{rules.SWITCH_ROUNDS} paired rounds")
        self._settle(b, key, pool, generation, t0, *verdict)

    def _live_check(
        self, b: _Bucket, key: tuple[int, int, int], pool: StreamPool, generation: int, target: Any, arrays: list[Any]
    ) -> tuple[bool, float, float, str] | tuple[()] | None:
        """Builder thread: the switch check on live calls (_check_call answers them and pairs the
        times). It waits for the rule's verdict: (switch, speedup, spread, evidence); () when the
        traffic stopped first (no call for a while: the caller checks alone, in paired rounds);
        None when the check was taken away (a re-freeze, a failure)."""
        feeds = dict(zip(self.frozen.inputs, arrays))
        slowest = 0.0
        for _ in range(rules.SWITCH_WARMUP):
            t = time.perf_counter()
            pool.run(self.frozen.outputs, feeds)
            slowest = max(slowest, time.perf_counter() - t)
        idle_s = max(rules.CHECK_IDLE_S, 5 * slowest)
        trial = _Trial(key, pool, switch=True)
        with self.lock:
            b.trial, b.generation, b.state = trial, generation, CHECKING
        seen = -1
        while not trial.done.wait(idle_s):
            if _exiting() or b.trial is not trial:
                return None
            if trial.calls == seen:
                with self.lock:
                    if b.trial is not trial:
                        return None
                    b.trial, b.state = None, BUILDING
                return ()
            seen = trial.calls
        if b.state != CHECKING:
            return None
        test = trial.test
        return test.verdict == "win", test.speedup, test.spread, f"{len(test.ratios)} paired live calls"

    def _settle(
        self,
        b: _Bucket,
        key: tuple[int, int, int],
        pool: StreamPool,
        generation: int,
        t0: float,
        switch: bool,
        speedup: float,
        spread: float,
        evidence: str,
    ) -> None:
        """The switch check's verdict: serve from the session (and tune live), or check the plan's
        next neighbour, or stay on the original path (checked again later)."""
        plan, arrays, original_flat = b.plan, b.warm, b.expected
        assert plan is not None
        with self.lock:
            b.speedup, b.spread, b.build_s = speedup, spread, time.perf_counter() - t0
            b.evidence = evidence
        if not switch and self._check_neighbour(b, plan, key, speedup):
            _builder().submit(self, b.bucket, arrays, b.batch, original_flat)  # the next neighbour's check, now
            return
        if not switch:
            b.attempts += 1
            delay = rules.retry_delay(b.attempts)
            self._keep_original(
                b,
                f"the frozen session measured {speedup:.2f}x the original path's speed "
                f"({evidence}): not faster, so not taken" + (f"; checked again in {delay:.0f} s" if delay else ""),
                warn=False,
            )
            b.retry_at = time.monotonic() + delay if delay else 0.0
            b.warm, b.expected = [], []
            self._drop_pool(key)
            self._remember()
            return
        with self.lock:
            b.pool, b.generation, b.state, b.reason, b.since = pool, generation, FAST, "", time.monotonic()
            b.key, b.checking = key, None
            if live_wanted() and not b.tuned:
                # A setting that lost its switch check lost to the original path, not to this session,
                # and such checks are noisy (EfficientNet-B0 at batch 8 here: its plan, 1x2, passed in
                # one run and lost at 0.87x in the next). So the losers are tried again, first, frozen
                # against frozen; the stopping rule drops a clearly slower one after a few calls.
                lost = [k for k in b.lost if k != key]
                b.candidates = lost + [c for c in self._candidates(plan, b.key) if c not in lost]
            else:
                b.warm, b.expected = [], []
        if live_wanted() and not b.tuned:
            _builder().submit_trial(self, b.bucket)  # no neighbour (one CPU): it is marked tuned at once
        log.info(
            "tf_autopar: %s of %s serves batch %s from a frozen session (%sx%s): %.2fx the original path's "
            "speed (%s), ready after %.1f s",
            self.name,
            self.model,
            _bucket_words(b.bucket),
            key[0],
            key[1],
            speedup,
            evidence,
            b.build_s,
        )
        self._remember()

    def verify(self, bucket_id: int, arrays: list[Any], frozen_out: Any) -> None:
        """A bucket built at load from the cache served its first call: check it against the original."""
        import numpy as np
        import tensorflow as tf

        target = self._target()
        if target is None:
            return
        args, kwargs = self._call_args(arrays)
        original = self._original(target, args, kwargs)
        diff = rules.outputs_differ(
            [np.asarray(t) for t in tf.nest.flatten(frozen_out)], [np.asarray(t) for t in tf.nest.flatten(original)]
        )
        b = self.buckets[bucket_id]
        if diff:
            self._keep_original(
                b, f"the frozen graph's outputs differ from the original's ({diff}); one call was served from it"
            )
            return
        if live_wanted() and not b.tuned and b.plan is not None:  # resume where it stopped
            b.warm = arrays
            b.expected = [np.asarray(t) for t in tf.nest.flatten(original)]
            b.candidates = self._candidates(b.plan, b.key)
            self.next_trial(bucket_id)

    def _freeze(self, generation: int) -> None:
        """A frozen graph of the current variables (once per generation); the old sessions retire."""
        from tf_autopar.runtime.frozen import FrozenGraph

        if self.frozen is not None and self.frozen_generation == generation:
            return
        handles = watch.resource_handles(self.concrete)
        self.variable_bytes = _handle_bytes(handles)
        ok, why = rules.memory_verdict(self.variable_bytes, 1, _available_bytes(), rules.max_extra_bytes())
        if not ok:
            self.stopped = why
            return
        self.watch.add(handles)
        concrete = self.concrete
        frozen = run_low(_frozen_graph, FrozenGraph, concrete)  # at the build priority (lowprio.py)
        _trim_heap()  # the converter's copies, before the sessions add their own
        with self.lock:
            old = list(self.pools.values())
            self.pools.clear()
            self.frozen, self.frozen_generation = frozen, generation
            for b in self.buckets.values():
                b.trial = None  # its candidate session goes with the others; tuning restarts after the rebuild
                if b.state == FAST:
                    b.state, b.pool = STALE, None  # re-built at the bucket's next call
        for pool in old:
            pool.retire()

    def _plan(self, arrays: list[Any], batch: int) -> ThreadPlan:
        """The plan for the observed batch (the call's own shapes fill every unknown dimension)."""
        from tf_autopar.graph import analyze

        frozen = self.frozen
        assert frozen is not None
        shapes = {name.split(":")[0]: tuple(a.shape) for name, a in zip(frozen.inputs, arrays) if a.ndim}
        seen = (batch, tuple(sorted(shapes.items())))
        profile = frozen.profiles.get(seen)
        if profile is None:  # a re-plan for new CPU limits reuses it: the graph and the shapes did not change
            graph_def = frozen.graph_def if frozen.graph_def is not None else frozen.graph.as_graph_def(add_shapes=True)
            profile = analyze(graph_def, batch=batch, input_shapes=shapes)
            frozen.graph_def = None  # a third copy of the constants otherwise: re-read from the graph when needed
            frozen.profiles[seen] = profile
        self.max_width = profile.max_width
        return core.plan_for(
            profile, STATE.mode, streams=STATE.streams, tuned_fingerprint=self.fingerprint, batch=batch
        )

    @staticmethod
    def _key(plan: ThreadPlan) -> tuple[int, int, int]:
        fields = plan.config_proto_fields()
        return fields["inter_op_parallelism_threads"], fields["intra_op_parallelism_threads"], max(1, plan.instances)

    def _candidates(self, plan: ThreadPlan, key: tuple[int, int, int]) -> list[tuple[int, int, int]]:
        """The neighbours of ``key`` (measure/search.py), itself left out: per-session pools in
        latency mode; in throughput mode the per-stream pools and the stream count too."""
        from tf_autopar.measure.search import stream_neighbourhood

        budget = max(1, getattr(plan, "usable_cpus", 0) or key[0] * key[1] * key[2] or 1)
        width = max(1, int(self.max_width or 1))
        return [k for k in stream_neighbourhood(*key, budget, width) if k != key]

    def _check_neighbour(self, b: _Bucket, plan: ThreadPlan, key: tuple[int, int, int], speedup: float) -> bool:
        """The frozen session at ``key`` lost the switch check: with live tuning on, the plan's
        neighbours are checked against the original path in turn (a model whose plan loses may
        win at another setting: an LSTM at batch 32 here). True when the next one is queued."""
        if not live_wanted() or b.tuned:
            return False
        with self.lock:
            if b.checks is None:
                b.checks = self._candidates(plan, key)
            b.tried.append(f"{rules.label(key)}: {speedup:.2f}x the original path's speed, not taken")
            b.lost.append(key)
            if not b.checks:
                b.checking = None
                return False
            b.checking = b.checks.pop(0)
            b.state = QUEUED
        self._drop_pool(key)
        return True

    def _pool(self, plan: ThreadPlan) -> StreamPool | None:
        """The sessions for ``plan``: shared by the buckets that plan alike, new ones within the memory bound."""
        return self._pool_for(self._key(plan))

    def _pool_for(self, key: tuple[int, int, int]) -> StreamPool | None:
        if self.stopped or self.frozen is None:
            return None
        with self.lock:
            pool = self.pools.get(key)
        if pool is not None:
            return pool
        sessions_after = sum(len(p.sessions) for p in self.pools.values()) + key[2]
        ok, why = rules.memory_verdict(self.variable_bytes, sessions_after, _available_bytes(), rules.max_extra_bytes())
        if not ok:
            if not self.pools:
                self.stopped = why
            return None
        pool = StreamPool(self.frozen.open_sessions(*key))
        with self.lock:
            self.pools[key] = pool
        return pool

    def _call_args(self, arrays: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.kind == SIGNATURE:
            return (), {n: a for (n, _), a in zip(self.specs, arrays)}
        if self.kind == KERAS:  # in the form the user's calls gave it
            if self.keras_form == "dict":
                return ({n: a for (n, _), a in zip(self.specs, arrays)},), {"verbose": 0}
            return (arrays[0] if self.keras_form == "single" else list(arrays),), {"verbose": 0}
        import tensorflow as tf

        return tuple(tf.nest.pack_sequence_as(self.arg_structure, arrays)), {}

    def _paired(self, target: Any, pool: StreamPool, arrays: list[Any]) -> tuple[list[float], list[float]]:
        """Seconds per call of the original and the frozen path, alternating, on the same inputs."""
        args, kwargs = self._call_args(arrays)
        feeds = dict(zip(self.frozen.inputs, arrays))
        times_o, times_f = [], []
        for _ in range(rules.SWITCH_WARMUP):
            self._original(target, args, kwargs)
            pool.run(self.frozen.outputs, feeds)
        for _ in range(rules.SWITCH_ROUNDS):
            t0 = time.perf_counter()
            self._original(target, args, kwargs)
            t1 = time.perf_counter()
            pool.run(self.frozen.outputs, feeds)
            times_o.append(t1 - t0)
            times_f.append(time.perf_counter() - t1)
        return times_o, times_f

    def _keep_original(self, b: _Bucket, reason: str, warn: bool = True) -> None:
        with self.lock:
            b.state, b.reason, b.pool = ORIGINAL, reason, None
        if warn:
            warn_once(
                f"fast-path:{self.model}:{self.name}",
                f"tf_autopar: {self.name} of {self.model} stays on TensorFlow's usual path: {reason}",
            )
        else:
            log.info(
                "tf_autopar: %s of %s stays on the original path for batch %s: %s",
                self.name,
                self.model,
                _bucket_words(b.bucket),
                reason,
            )

    # ------------------------------------------------------------------ memory across starts
    def prebuild(self, remembered: dict[str, Any]) -> None:
        """At load: the buckets that won last time on this host are built now, from synthesised
        inputs of the remembered batch, so the first call is served by them (and checked)."""
        for key, entry in (remembered.get("buckets") or {}).items():
            if not isinstance(entry, dict) or entry.get("path") != FAST:
                continue
            batch = entry.get("batch")
            if not rules.is_batch(batch) or rules.bucket_of(batch) != rules.dominant_bucket({key: 1}):
                continue
            try:
                arrays = [_synthetic(spec, batch) for _, spec in self.specs]
                self._freeze(self.watch.generation)
                if self.stopped:
                    return
                plan = self._plan(arrays, batch)
                tuned_key = _remembered_key(entry, tf_allocator.in_use())
                key = tuned_key or self._key(plan)
                pool = self._pool_for(key)
                if pool is None:
                    return
                pool.run(self.frozen.outputs, dict(zip(self.frozen.inputs, arrays)))  # grappler, now
            except Exception as exc:  # the deferred path still works: build on the first call instead
                log.debug("tf_autopar: building %s at load failed", self.name, exc_info=exc)
                return
            _trim_heap()
            bucket_id = rules.bucket_of(batch)
            tuned = "done" if tuned_key else ""
            stale = entry.get("tuned") == "done" and not tuned_key  # tuned under another allocator: all again
            won = entry.get("won") if isinstance(entry.get("won"), dict) and not stale else {}
            tried = entry.get("tried", []) if isinstance(entry.get("tried"), list) and not stale else []
            tried = [str(t)[:300] for t in tried[:16]]
            self.buckets[bucket_id] = _Bucket(
                bucket_id,
                state=FAST,
                batch=batch,
                pool=pool,
                plan=plan,
                generation=self.frozen_generation,
                verify=True,
                key=key,
                speedup=_number(entry.get("speedup")),
                spread=_number(entry.get("spread")),
                evidence=f"{str(entry.get('evidence') or 'paired rounds').removesuffix(EARLIER)[:80]}{EARLIER}",
                since=time.monotonic(),
                reason="built at load: it won last time",
                tuned=tuned,
                won=won,
                tried=tried,
                by=BY_TUNE if entry.get("by") == BY_TUNE else BY_LIVE,
            )

    def _remember(self) -> None:
        if not (STATE.use_cache and self.fingerprint):
            return
        try:
            cache.store_served(self.fingerprint, cache.host_key(core.topology()), STATE.mode, self.name, self.summary())
        except Exception as exc:
            fail_open("write the plan cache", exc)

    def summary(self) -> dict[str, Any]:
        """What the cache keeps: calls per bucket, the batch planned for, the verdict and its evidence."""
        import tensorflow as tf

        out: dict[str, Any] = {}
        # a fault count says what malloc does; under the BFC pool (set because of it) none is
        # written, and the cache keeps malloc's from the earlier start (cache.store_served)
        allocator = tf_allocator.in_use()
        for bucket_id, n in sorted(dict(self.calls).items()):
            b = self.buckets.get(bucket_id)
            entry: dict[str, Any] = {"calls": n}
            if b is not None and b.state in (FAST, ORIGINAL):
                entry.update(
                    path=b.state,
                    batch=b.batch,
                    speedup=round(b.speedup, 4),
                    spread=round(b.spread, 4),
                    evidence=b.evidence,
                    tf=tf.__version__,
                    date=time.strftime("%Y-%m-%d"),
                )
                if b.key[0]:
                    entry.update(inter_op=b.key[0], intra_op=b.key[1], streams=b.key[2])
                if (
                    allocator == "malloc" and len(b.faults) >= tf_allocator.SAMPLE_CALLS
                ):  # tf_allocator.remembered_env reads it
                    entry.update(faults_per_call=int(statistics.median(b.faults)))
                if b.tuned:
                    entry.update(
                        tuned=b.tuned,
                        tried=list(b.tried),
                        won=dict(b.won),
                        by=b.by or BY_LIVE,
                        allocator=allocator,  # _remembered_key: another allocator tunes again
                    )
                elif b.tried:  # the switch checks of the plan and its neighbours, none faster than the original
                    entry.update(tried=list(b.tried))
            out[str(bucket_id)] = entry
        return {"buckets": out}

    # ------------------------------------------------------------------ status and undo
    def record(self) -> ServedRecord:
        from tf_autopar.runtime.records import BucketRecord, ServedRecord

        with self.lock:
            buckets = tuple(
                BucketRecord(
                    bucket=b.bucket,
                    batch=b.batch,
                    calls=self.calls.get(b.bucket, 0),
                    served=b.served,
                    path=b.state,
                    inter_op=b.key[0],
                    intra_op=b.key[1],
                    streams=len(b.pool.sessions) if b.pool else 0,
                    speedup=round(b.speedup, 3),
                    spread=round(b.spread, 3),
                    evidence=b.evidence,
                    build_s=round(b.build_s, 2),
                    reason=b.reason,
                    plan_source=_plan_source(b),
                    tuning=_tuning_words(b),
                    tuned=b.tuned == "done",
                )
                for b in sorted(self.buckets.values(), key=lambda b: b.bucket)
            )
            calls = dict(self.calls)
        return ServedRecord(
            model=self.model,
            function=self.name,
            calls=sum(calls.values()),
            batches=rules.batch_words(calls),
            buckets=buckets,
            stopped=self.stopped,
        )

    def unroute(self) -> None:
        target = self._target()
        if target is not None:
            vars(target).pop(_ATTR, None)
            if self.kind == KERAS:
                vars(target).pop("predict", None)
            elif type(target) is _routed_classes.get(self.original_class):
                target.__class__ = self.original_class
        with self.lock:
            pools = list(self.pools.values())
            self.pools.clear()
            self.stopped = self.stopped or "disabled"
        for pool in pools:
            pool.retire()
        self.watch.close()


_MISSING = object()


class _Feed:
    """What a call's input must be to feed one placeholder as it is, read off its TensorSpec once:
    the per-call check (27 inputs on DLRM) then compares plain values. Reading the spec's dtype
    and shape on every call took 40% of the fast path's own time per call there."""

    __slots__ = ("tf_dtype", "np_dtype", "string", "dims", "spec", "batched")

    def __init__(self, spec: Any) -> None:
        import tensorflow as tf

        self.spec, self.tf_dtype = spec, spec.dtype
        self.string = spec.dtype == tf.string
        self.np_dtype = None if self.string else spec.dtype.as_numpy_dtype
        # TensorShape keeps its dims as a tuple of ints and None (None: unknown rank); compared
        # directly: is_compatible_with builds a TensorShape of the array's shape on every call.
        dims = getattr(spec.shape, "_dims", _MISSING)
        self.dims = dims if dims is None or isinstance(dims, tuple) else _MISSING
        self.batched = bool(spec.shape.rank) and spec.shape[0] is None  # a free batch dimension first


def _exact_array(value: Any, feed: _Feed, np: Any, tf: Any) -> Any:
    """``value`` as a numpy array when it is one (or an eager tensor) of the input's dtype and a
    compatible shape; None otherwise (the original then converts it or raises its own error).
    ``np`` and ``tf``: the modules, passed in by the caller's loop."""
    if isinstance(value, np.ndarray):
        array = value
        if feed.string:
            if array.dtype.kind not in "SO":
                return None
        elif array.dtype != feed.np_dtype:
            return None
    elif tf.is_tensor(value) and hasattr(value, "numpy"):
        if value.dtype != feed.tf_dtype:
            return None
        array = value.numpy()
    else:
        return None
    dims = feed.dims
    if dims is _MISSING:
        return array if feed.spec.shape.is_compatible_with(array.shape) else None
    if dims is not None:
        if len(dims) != array.ndim:
            return None
        for d, n in zip(dims, array.shape):  # a loop, not any(): no generator per input per call
            if d is not None and d != n:
                return None
    return array


def _frozen_graph(make: Any, concrete: Any) -> Any:
    """``make(concrete)`` with the session hook bypassed (a thread-local switch: set here, on the thread that runs it)."""
    with sessions.bypass():
        return make(concrete)


def _synthetic(spec: Any, batch: int) -> Any:
    import numpy as np
    import tensorflow as tf

    shape = [batch if i == 0 and d is None else (d if d is not None else 1) for i, d in enumerate(spec.shape)]
    if spec.dtype == tf.string:
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=spec.dtype.as_numpy_dtype)


def _handle_bytes(handles: list[Any]) -> int:
    from tensorflow.python.framework import dtypes
    from tensorflow.python.ops import resource_variable_ops

    total = 0
    for h in handles:
        data = resource_variable_ops.get_eager_safe_handle_data(h)
        for st in getattr(data, "shape_and_type", ()):
            n = 1
            for d in st.shape.dim:
                n *= max(int(d.size), 1)
            total += n * dtypes.as_dtype(st.dtype).size
    return total


def _trim_heap() -> None:
    """Give the build's freed temporaries back to the system. Freezing and grappler's first run
    leave 120-250 MB of freed memory in glibc's arenas on the models of docs/serving.md
    (MobileNetV2: 860 MB resident after the build, 744 MB after the trim); a server keeps it for
    its lifetime otherwise. No-op where the C library has no malloc_trim."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _available_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


#: Who measured a bucket's setting (the ``by`` of its evidence): live calls, or `tf-autopar tune`'s
#: synthesised ones in a process of its own (tuning/inprocess.py).
BY_LIVE, BY_TUNE = "live", "tune"
#: What this process's wins are recorded as; tuning/inprocess.py sets BY_TUNE in the process it runs.
TUNED_BY = BY_LIVE


def _tuned_how(b: _Bucket) -> str:
    return "tuned by `tf-autopar tune`" if (b.won.get("by") or b.by) == BY_TUNE else "tuned live"


def _tuning_words(b: _Bucket) -> str:
    """Live tuning in a user's words: what is being tried, what won and by how much, what it cost."""
    won = (
        (
            f"{b.won.get('to')} won over {b.won.get('from')}, {_number(b.won.get('speedup')):.2f}x faster "
            f"({b.won.get('pairs')} paired calls, {b.won.get('seconds')} s)"
        )
        if b.won
        else ""
    )
    if b.tuned == "done":
        how = _tuned_how(b)
        if won:
            return f"{how}: {won}; {len(b.tried)} setting(s) tried"
        return f"{how}: the plan held against {len(b.tried)} neighbour(s)" if b.tried else how
    trial = b.trial
    if b.state == CHECKING:
        return (
            f"switch check: {rules.label(trial.key)} against the original path on live calls "
            f"({len(trial.test.ratios)} pairs so far)"
            if trial is not None
            else "switch check: decided, settling"
        )
    so_far = f"; so far {won}" if won else ""
    if trial is not None:
        return (
            f"live tuning: trying {rules.label(trial.key)} against {rules.label(b.key)} ({len(trial.test.ratios)} pairs so "
            f"far; {len(b.candidates)} more to try){so_far}"
        )
    if b.candidates:
        return f"live tuning: {len(b.candidates)} neighbour(s) to try{so_far}"
    return ""


def _plan_source(b: _Bucket) -> str:
    """Where the bucket's serving numbers came from, in a user's words (status().text()): "tuned
    live on <date>, N samples, x faster than <the setting before>", the rule, or `tune`."""
    if b.won and rules.label(b.key) == b.won.get("to"):
        w = b.won
        return (
            f"{_tuned_how(b)} on {w.get('date', '?')}, {w.get('pairs_total', w.get('pairs'))} samples, "
            f"{_number(w.get('total', w.get('speedup'))):.2f}x faster than {w.get('plan', w.get('from'))}"
        )
    plan = b.plan
    if plan is None:
        return ""
    source = (
        "planned by `tf-autopar tune --process-pools`'s measurement"
        if getattr(plan, "tuned", None)
        else "planned by the rule"
    )
    if b.lost and b.lost[0] != b.key:  # the plan lost its switch check; a neighbour passed it
        source = (
            f"the neighbour that passed its switch check where the setting {source} ({rules.label(b.lost[0])}) lost"
        )
        if b.tuned == "done" and b.tried:
            source += f"; it held against the {len(b.tried)} setting(s) tried {_tuned_how(b)}"
    elif b.tuned == "done" and b.tried:
        source += f", which held against {len(b.tried)} neighbour(s) {_tuned_how(b)}"
    return source


def _number(value: Any) -> float:
    """A positive finite number read from the cache, else 0."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e6
    return float(value) if ok else 0.0


def _remembered_key(entry: dict[str, Any], allocator: str | None = None) -> tuple[int, int, int] | None:
    """The sessions a cached bucket ended on (after live tuning), or None when not usable: also when
    it was tuned under another CPU allocator than ``allocator`` (the one running now). A start that
    switched to TensorFlow's BFC pool because malloc faulted (tf_allocator) tunes again: the faults
    were in every sample the old winner was chosen on."""
    inter, intra = entry.get("inter_op"), entry.get("intra_op")
    if entry.get("tuned") != "done" or not (rules.is_batch(inter) and rules.is_batch(intra)):
        return None
    if allocator and entry.get("allocator") not in (None, allocator):
        return None
    streams = entry.get("streams", 1)
    if inter > 1024 or intra > 1024 or not rules.is_batch(streams) or streams > 1024:
        return None
    return inter, intra, streams


def _fault_mark(b: _Bucket) -> int | None:
    """The process's page faults before a call of ``b``, while its first calls are still being counted."""
    return tf_allocator.minor_faults() if len(b.faults) < tf_allocator.SAMPLE_CALLS else None


def _bucket_words(bucket: int) -> str:
    return "1" if bucket == 1 else f"{bucket // 2 + 1}-{bucket}"


def _remembered(fingerprint: str | None) -> dict[str, Any]:
    """This model's cached fast-path entry on this host and mode, by function name."""
    if not (fingerprint and STATE.use_cache):
        return {}
    try:
        entry = cache.lookup_served(fingerprint, cache.host_key(core.topology()), STATE.mode)
    except Exception as exc:
        log.debug("fast-path cache lookup failed: %s", exc)
        return {}
    functions = entry.get("functions") if isinstance(entry, dict) else None
    return functions if isinstance(functions, dict) else {}


# ------------------------------------------------------------------------------ the builder


class _Builder:
    """One daemon thread that builds, checks and times frozen sessions, one job at a time, so at
    most one build competes with the requests for the CPU."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="tf_autopar-fastpath", daemon=True)
        self.thread.start()

    def submit(
        self, served: ServedFunction, bucket_id: int, arrays: list[Any], batch: int, out: Any, verify_out: Any = None
    ) -> None:
        """A build (the original's outputs ``out``) or, with ``verify_out``, a check of a served call."""
        if not self.stopping:
            kind = "verify" if verify_out is not None else "build"
            self.jobs.put(
                (weakref.ref(served), kind, bucket_id, arrays, batch, verify_out if kind == "verify" else out)
            )

    def submit_trial(self, served: ServedFunction, bucket_id: int) -> None:
        """Live tuning's next candidate for the bucket."""
        if not self.stopping:
            self.jobs.put((weakref.ref(served), "trial", bucket_id, [], 0, None))

    def submit_call(self, served: ServedFunction, bucket_id: int, arrays: list[Any], fn: Any) -> None:
        """``fn(served, bucket_id, arrays)`` on the builder thread (a re-plan for new CPU limits)."""
        if not self.stopping:
            self.jobs.put((weakref.ref(served), "call", bucket_id, arrays, 0, fn))

    def stop(self, timeout: float) -> None:
        """At exit: no new job; the one running finishes (TensorFlow aborts the process when the
        interpreter ends under a thread inside one of its ops)."""
        self.stopping = True
        self.jobs.put(None)
        self.thread.join(timeout)

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None or self.stopping:
                self.jobs.task_done()
                return
            if BUILD_GATE is not None:  # tests hold builds back to show that calls never wait for one
                BUILD_GATE.wait()
            ref, kind, bucket_id, arrays, batch, out = job
            served = ref()
            if served is None or served.stopped == "disabled":
                self.jobs.task_done()
                continue
            try:
                if kind == "verify":
                    served.verify(bucket_id, arrays, out)
                elif kind == "trial":
                    served.next_trial(bucket_id)
                elif kind == "call":
                    out(served, bucket_id, arrays)
                else:
                    served.build(bucket_id, arrays, batch, out)
            except Exception as exc:  # fail open: this bucket stays on the original path
                b = served.buckets.get(bucket_id)
                if b is not None:
                    served._keep_original(
                        b, f"its frozen session could not be built: {type(exc).__name__}: {exc}", warn=False
                    )
                fail_open(f"build the frozen session of {served.name}", exc)
            finally:
                del served, out, arrays
                _trim_heap()
                self.jobs.task_done()


#: Tests only: while this event is set but not yet signalled, the builder holds every job back.
BUILD_GATE: threading.Event | None = None


def wait_idle(timeout: float = 60.0) -> bool:
    """Wait until no build, check or timing is queued or running; False on timeout. For benchmarks
    and tests that want the steady state; a server never needs to call it."""
    deadline = time.monotonic() + timeout
    builder = _the_builder
    while builder is not None and builder.jobs.unfinished_tasks:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _exiting() -> bool:
    return _the_builder is not None and _the_builder.stopping


_the_builder: _Builder | None = None
_builder_lock = threading.Lock()


def _builder() -> _Builder:
    global _the_builder
    with _builder_lock:
        if _the_builder is None or not _the_builder.thread.is_alive():
            _the_builder = _Builder()
        return _the_builder


#: At exit, how long a build under way may take to finish (a NASNet build: about 9 s of CPU).
EXIT_WAIT_S = 30.0


def _at_exit() -> None:
    """The running build ends first, then the calls counted since the last write go to the cache."""
    try:
        if _the_builder is not None and _the_builder.thread.is_alive():
            _the_builder.stop(EXIT_WAIT_S)
        with _served_lock:
            served = list(_served)
        for s in served:
            if s.calls:
                s._remember()
    except Exception as exc:  # never break the interpreter's exit
        log.debug("tf_autopar: fast-path cache flush at exit failed", exc_info=exc)


atexit.register(_at_exit)
