"""A served function and its request path: ``ServedFunction.__call__``.

The way of a call: the routed object's ``__call__`` (routing/classes.routed_call;
positional.Overloads for a restored function) or its ``predict``/``predict_on_batch``
(routing/keras_predict.py) -> ``ServedFunction.__call__`` -> the calling convention's ``match``
(the call's arrays and batch, or why not: counted by reason, the original answers) -> the
bucket's ``route``: SERVE from its engine runner (``_serve`` -> ``_run`` -> ``Runner.run``), take
part in the switch CHECK (``_check_call``), or the ORIGINAL path (``_original_way``, which queues
a build when the bucket wants one). No request waits for a build; any failure of ours answers
the call the original way.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import tf_allocator
from tf_autopar.runtime.fastpath import build, builder, engines, pools, remembered, rules, trials
from tf_autopar.runtime.fastpath.bucket import CHECK, ORIGINAL_PATH, SERVE, Bucket, State, bucket_words
from tf_autopar.runtime.fastpath.engines import pacing
from tf_autopar.runtime.fastpath.function import Function
from tf_autopar.runtime.fastpath.routing import reasons
from tf_autopar.runtime.fastpath.routing.arrays import eager
from tf_autopar.runtime.fastpath.routing.base import Matched
from tf_autopar.runtime.fastpath.switches import wanted
from tf_autopar.runtime.safety import fail_open, warn_once
from tf_autopar.runtime.streams import Retired

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.engines import Runner

log = logging.getLogger("tf_autopar.runtime")

_DECLINED = object()  # the frozen session could not answer: the original path does


class ServedFunction(Function):
    """One routed function's request path (``__call__``); its state is Function's."""

    # ------------------------------------------------------------------ the request path
    def __call__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One call of the routed function ``target``: served from a bucket's runner when it can
        be, else the original way (counted with the reason)."""
        matched = self.matched(args, kwargs)
        if matched.__class__ is str:
            return self.decline(target, args, kwargs, matched)  # type: ignore[arg-type]
        return self.answer(target, args, kwargs, matched)  # type: ignore[arg-type]

    def matched(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | str:
        """The call's arrays and batch when the fast path may serve it, else why not (reasons.py)."""
        if self.stopped or not wanted():
            return reasons.OFF
        if not eager():
            return reasons.GRAPH
        try:
            return self.convention.match(self, args, kwargs)
        except Exception as exc:  # ours: fail open
            fail_open("read a call's inputs for the fast path", exc)
            return reasons.FAILED

    def decline(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], reason: str) -> Any:
        """A call the fast path does not take: counted with its reason, answered by the original."""
        if reason is reasons.GRAPH:  # a trace (Keras's own predict step calls the model so): not a user's call
            return self.original(target, args, kwargs)
        self.declined[reason] += 1
        if reason in reasons.ADVICE and reason not in self.warned:
            self.warned.add(reason)
            warn_once(
                f"fast-path-miss:{self.model}:{self.name}:{reason}",
                f"tf_autopar: {self.name} of {self.model} was called {reason}: such calls run TensorFlow's "
                f"usual path, not the fast path; to have them served, {reasons.ADVICE[reason]}",
            )
        return self.original(target, args, kwargs)

    def answer(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], matched: Matched) -> Any:
        """A call the fast path takes: its bucket serves it, checks on it, or leaves it to the original."""
        arrays, batch = matched
        bucket_id = rules.bucket_of(batch)
        self.calls[bucket_id] += 1
        b = self.buckets.get(bucket_id)
        way = b.route(self.watch.generation) if b is not None else ORIGINAL_PATH
        if way == SERVE:
            out = self._serve_call(b, arrays)  # type: ignore[arg-type]
            if out is not _DECLINED:
                return out
        elif way == CHECK:
            return self._check_call(b, target, args, kwargs, arrays)  # type: ignore[arg-type]
        return self._original_way(b, bucket_id, target, args, kwargs, arrays, batch)

    def _serve_call(self, b: Bucket, arrays: list[Any]) -> Any:
        """A call from the bucket's runner; _DECLINED when it could not answer (re-frozen meanwhile, or failed)."""
        try:
            out = self._serve(b, arrays)
            b.served += 1
            if b.verify:  # built at load from the cache: checked against the original, off the request path
                b.verify = False
                builder.submit(self, b.bucket, build.verify, [a.copy() for a in arrays], out)
            return out
        except Retired:
            return _DECLINED  # re-frozen meanwhile: the original serves this call
        except Exception as exc:
            name = engines.engine_of(b.key)
            if name != engines.DEFAULT:  # not tried again for this function (its rebuild: TF's sessions)
                self.engine_failed[name] = f"{name} failed while serving: {type(exc).__name__}: {str(exc)[:200]}"
            self._retire_bucket(b, f"its frozen session failed: {type(exc).__name__}: {exc}")
            fail_open("serve a call from the frozen session", exc)
            return _DECLINED

    def _original_way(
        self,
        b: Bucket | None,
        bucket_id: int,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        arrays: list[Any],
        batch: int,
    ) -> Any:
        """The original answers; a bucket's first call, a write of its variables or a due retry queue a build."""
        # a bucket kept on the original path is counted too: malloc's faults can be why it lost its check
        mark = fault_mark(b) if b is not None and b.state is State.ORIGINAL else None
        out = self.original(target, args, kwargs)
        if b is not None:
            self._count_faults(b, mark)
        if b is None or b.wants_build(self.watch.generation, time.monotonic()):
            self._schedule(bucket_id, arrays, batch, out)
        return out

    def _serve(self, b: Bucket, arrays: list[Any]) -> Any:
        """A call from the bucket's runner, or while a trial runs, alternate blocks from the
        candidate's; each timed (the run alone) and paired for the trial."""
        trial, pool = b.trial, b.pool
        candidate, place = trial.take() if trial is not None else (False, 0)
        if candidate:
            pool = trial.pool  # type: ignore[union-attr]
        level = b.in_flight
        b.in_flight += 1
        mark = fault_mark(b)
        try:
            t0 = time.perf_counter()
            try:
                out = self._run(pool, arrays)
            except Exception as exc:
                if not candidate or isinstance(exc, Retired):
                    raise
                self._candidate_failed(b, trial, exc)  # the incumbent answers; the candidate is dropped
                return self._run(b.pool, arrays)
            seconds = time.perf_counter() - t0
        finally:
            b.in_flight -= 1
        if pacing.watchers:  # a conversion beside the requests measures what it costs them
            pacing.note((b.bucket, id(pool)), t0, seconds)
        self._count_faults(b, mark)
        if trial is not None and trial.paired(candidate, place, level, seconds):
            trials.end_trial(self, b, trial)
        return out

    def _check_call(
        self, b: Bucket, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], arrays: list[Any]
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
                    self._check_failed(b, trial, exc)
                    return self.original(target, args, kwargs)
            else:
                out = self.original(target, args, kwargs)
            seconds = time.perf_counter() - t0
        finally:
            b.in_flight -= 1
        if pacing.watchers:
            pacing.note((b.bucket, candidate), t0, seconds)
        if candidate:
            b.served += 1
        if trial.paired(candidate, place, level, seconds):
            with self.lock:
                if b.trial is trial:
                    b.trial = None  # the calls go the original way until the builder settles the verdict
                    trial.done.set()
        return out

    def _candidate_failed(self, b: Bucket, trial: Any, exc: Exception) -> None:
        """A live-tuning candidate raised: it is dropped (an engine: not tried again for this
        function), the tuning goes on with the next one."""
        name = engines.engine_of(trial.key)
        why = f"{rules.label(trial.key)} failed: {type(exc).__name__}: {str(exc)[:200]}"
        with self.lock:
            if b.trial is not trial:
                return
            b.trial = None
            b.tried.append(why)
            if name != engines.DEFAULT:
                self.engine_failed[name] = why
        fail_open(f"serve a call from {rules.label(trial.key)}", exc)
        builder.submit(self, b.bucket, _drop_and_go_on, trial.key)

    def _check_failed(self, b: Bucket, trial: Any, exc: Exception) -> None:
        retired = isinstance(exc, Retired)
        with self.lock:
            if b.trial is trial:
                b.check_failed(retired)
        if not retired:
            self.keep_original(b, f"its frozen session failed: {type(exc).__name__}: {exc}")
            fail_open("serve a call from the frozen session", exc)

    def _run(self, pool: Runner, arrays: list[Any]) -> Any:
        frozen = self.frozen
        assert frozen is not None
        return self.convention.outputs(frozen.structure, pool.run(arrays))

    def _count_faults(self, b: Bucket, mark: int | None) -> None:
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
            warn_once("cpu-allocator", f"tf_autopar: {self.name}, batch {bucket_words(b.bucket)}: {text}")
            # the count into the plan cache, off the request path: the next start sets the variable
            builder.submit(self, b.bucket, _remember)

    def _schedule(self, bucket_id: int, arrays: list[Any], batch: int, out: Any) -> None:
        with self.lock:
            b = self.buckets.get(bucket_id)
            if b is not None and b.in_progress():
                return
            if b is None:
                b = self.buckets[bucket_id] = Bucket(bucket_id)
            b.queue(batch)
        # copies: the caller may reuse its buffers before the build reads them
        builder.submit(self, bucket_id, build.build, [a.copy() for a in arrays], batch, out)

    # ------------------------------------------------------------------ leaving the fast path
    def _retire_bucket(self, b: Bucket, reason: str) -> None:
        with self.lock:
            b.keep_original(reason)

    def unroute(self) -> None:
        """disable(): the object gets its own class (or predict) back; the runners close."""
        target = self._target()
        if target is not None:
            self.convention.uninstall(target, self)
        with self.lock:
            pools = list(self.pools.values())
            self.pools.clear()
            self.stopped = self.stopped or "disabled"
        for pool in pools:
            pool.close()
        self.watch.close()


def fault_mark(b: Bucket) -> int | None:
    """The process's page faults before a call of ``b``, while its first calls are still being counted."""
    return tf_allocator.minor_faults() if len(b.faults) < tf_allocator.SAMPLE_CALLS else None


def _drop_and_go_on(served: ServedFunction, bucket_id: int, key: Any) -> None:
    pools.drop_pool(served, key)
    trials.next_trial(served, bucket_id)


def _remember(served: ServedFunction, _bucket_id: int) -> None:
    remembered.remember(served)
