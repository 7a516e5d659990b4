"""What a build does (builder thread): freeze, plan, open the runner, check its outputs against
the original's, time both paths, and settle: serve from the runner, check the plan's next
neighbour, or stay on the original path (checked again later).

The timing: on the live calls when the function has traffic (alternate blocks of calls from the
frozen session, paired under the same load and decided by measure/live.py's rule, as live tuning
is: served.py's _check_call), in paired rounds here when it has none. The bucket switches only if
the outputs agree (rules.outputs_differ) and the frozen path is not slower.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath import builder, memory, pools, remembered, rules, trials
from tf_autopar.runtime.fastpath.bucket import Bucket, State
from tf_autopar.runtime.fastpath.pairing import Trial
from tf_autopar.runtime.fastpath.bucket import bucket_words
from tf_autopar.runtime.fastpath.switches import live_wanted
from tf_autopar.runtime.lowprio import run_low
from tf_autopar.runtime.safety import maybe_fail

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.engines import Runner, Setting
    from tf_autopar.runtime.fastpath.function import Function

log = logging.getLogger("tf_autopar.runtime")

Verdict = tuple[bool, float, float, str]  # (switch?, speedup, spread, evidence)


def build(fn: Function, bucket_id: int, arrays: list[Any], batch: int, original_out: Any) -> None:
    """The bucket's build, from one call's inputs and the original's outputs for them."""
    import numpy as np
    import tensorflow as tf

    b = fn.buckets[bucket_id]
    if not memory.wait_for_room(builder.exiting):  # memory under pressure: the bucket stays queued
        return
    t0 = time.perf_counter()
    calls_before = sum(fn.calls.values())  # more by the check's start: traffic beside the build
    with fn.lock:
        b.start_build()
    generation = fn.watch.generation  # before the values are read: a write during the build shows next call
    maybe_fail("fast path build")
    # one build at a time per memory cgroup, from the freeze until its session ran once; the room
    # is read under it (freeze, pool_for), so it counts the other workers' finished copies
    with memory.build_lock(f"{fn.name} of {fn.model}, batch {bucket_words(b.bucket)}", builder.exiting) as held:
        opened = _open(fn, b, arrays, batch, generation) if held else None
    if opened is None:
        return
    plan, key, pool, frozen_flat = opened
    original_flat = [np.asarray(t) for t in tf.nest.flatten(original_out)]
    diff = rules.outputs_differ(frozen_flat, original_flat, *pools.tolerance(key))
    if diff:
        fn.keep_original(b, f"the frozen graph's outputs differ from the original's ({diff})")
        return
    target = fn.target()
    if target is None or builder.exiting():
        return
    with fn.lock:
        b.plan, b.batch, b.warm, b.expected = plan, max(b.batch, batch), arrays, original_flat
    verdict: Verdict | tuple[()] | None = None
    if sum(fn.calls.values()) != calls_before:  # traffic beside the build: checked on the live calls
        verdict = _live_check(fn, b, key, pool, generation)
        if verdict is None:  # a re-freeze or a failure took the check away: its own build checks again
            return
    if not verdict:  # no traffic (or it stopped): paired rounds here, alone
        times_o, times_f = _paired(fn, target, pool, arrays)
        verdict = (*rules.switch_verdict(times_o, times_f), f"{rules.SWITCH_ROUNDS} paired rounds")
    _settle(fn, b, key, pool, generation, t0, *verdict)


def _open(fn: Function, b: Bucket, arrays: list[Any], batch: int, generation: int) -> Any:
    """Freeze (once per generation), plan, open the runner and run it once (grappler's first run,
    at the build priority): (plan, setting, runner, its outputs), or None (kept on the original
    path: the memory rule said no; or the process exits)."""
    fn.refused = ""
    pools.freeze(fn, generation)
    pool = None
    if not fn.stopped and fn.frozen is not None and not fn.refused:
        plan = run_low(pools.plan, fn, arrays, batch)
        # a re-freeze keeps what tuning chose; a neighbour's switch check (below) its setting
        key = b.key if b.tuned == "done" and b.key[0] else (b.checking or pools.plan_key(plan))
        if pools.failed(fn, key):  # a tuned engine that could not take the re-frozen graph: the plan's session
            key = pools.plan_key(plan)
        pool = pools.pool_for(fn, key, arrays)
    if pool is None:
        if fn.stopped:
            fn.keep_original(b, fn.stopped)
            return None
        # the memory rule said no: asked again later (another worker's copy gone, a limit raised)
        why = fn.refused or "no session fits the memory bound beside the ones it has"
        fn.keep_original(b, f"{why}; asked again every {rules.MEMORY_RETRY_S:.0f} s")
        b.retry_at = time.monotonic() + rules.MEMORY_RETRY_S
        return None
    if builder.exiting():
        return None
    frozen_flat = run_low(pool.run, arrays)
    memory.trim_heap()  # grappler's copies
    return plan, key, pool, frozen_flat


def _live_check(fn: Function, b: Bucket, key: Setting, pool: Runner, generation: int) -> Any:
    """The switch check on live calls (served.py's _check_call answers them and pairs the times).
    It waits for the rule's verdict: (switch, speedup, spread, evidence); () when the traffic
    stopped first (no call for a while: the caller checks alone, in paired rounds); None when the
    check was taken away (a re-freeze, a failure)."""
    slowest = 0.0
    for _ in range(rules.SWITCH_WARMUP):
        t = time.perf_counter()
        pool.run(b.warm)
        slowest = max(slowest, time.perf_counter() - t)
    idle_s = max(rules.CHECK_IDLE_S, 5 * slowest)
    trial = Trial(key, pool, switch=True)
    with fn.lock:
        b.start_check(trial, generation)
    seen = -1
    while not trial.done.wait(idle_s):
        if builder.exiting() or b.trial is not trial:
            return None
        if trial.calls == seen:
            with fn.lock:
                if b.trial is not trial:
                    return None
                b.check_idle()
            return ()
        seen = trial.calls
    if b.state is not State.CHECKING:
        return None
    test = trial.test
    return test.verdict == "win", test.speedup, test.spread, f"{len(test.ratios)} paired live calls"


def _paired(fn: Function, target: Any, pool: Runner, arrays: list[Any]) -> tuple[list[float], list[float]]:
    """Seconds per call of the original and the frozen path, alternating, on the same inputs."""
    args, kwargs = fn.convention.call_args(fn, arrays)
    times_o, times_f = [], []
    for _ in range(rules.SWITCH_WARMUP):
        fn.original(target, args, kwargs)
        pool.run(arrays)
    for _ in range(rules.SWITCH_ROUNDS):
        t0 = time.perf_counter()
        fn.original(target, args, kwargs)
        t1 = time.perf_counter()
        pool.run(arrays)
        times_o.append(t1 - t0)
        times_f.append(time.perf_counter() - t1)
    return times_o, times_f


def _settle(
    fn: Function,
    b: Bucket,
    key: Setting,
    pool: Runner,
    generation: int,
    t0: float,
    switch: bool,
    speedup: float,
    spread: float,
    evidence: str,
) -> None:
    """The switch check's verdict: serve from the runner (and tune live), or check the plan's
    next neighbour, or stay on the original path (checked again later)."""
    assert b.plan is not None
    with fn.lock:
        b.speedup, b.spread, b.build_s = speedup, spread, time.perf_counter() - t0
        b.evidence = evidence
    if not switch:
        if _check_neighbour(fn, b, key, speedup):
            builder.submit(fn, b.bucket, build, b.warm, b.batch, b.expected)  # the next neighbour's check, now
        else:
            _not_taken(fn, b, key, speedup, evidence)
        return
    with fn.lock:
        b.serve(pool, generation, key)
        tune = live_wanted() and not b.tuned
        if tune:
            # A setting that lost its switch check lost to the original path, not to this session,
            # and such checks are noisy (EfficientNet-B0 at batch 8 here: its plan, 1x2, passed in
            # one run and lost at 0.87x in the next). So the losers are tried again, first, frozen
            # against frozen; the stopping rule drops a clearly slower one after a few calls.
            lost = [k for k in b.lost if k != key]
            b.candidates = lost + [c for c in pools.candidates(fn, b.plan, b.key) if c not in lost]
        else:
            b.warm, b.expected = [], []
    if tune:
        builder.submit(fn, b.bucket, trials.next_trial)  # no neighbour (one CPU): it is marked tuned at once
    log.info(
        "tf_autopar: %s of %s serves batch %s from a frozen session (%sx%s): %.2fx the original path's "
        "speed (%s), ready after %.1f s",
        fn.name,
        fn.model,
        bucket_words(b.bucket),
        key[0],
        key[1],
        speedup,
        evidence,
        b.build_s,
    )
    remembered.remember(fn)


def _not_taken(fn: Function, b: Bucket, key: Setting, speedup: float, evidence: str) -> None:
    """No setting passed: the original path keeps the bucket, checked again after rules.retry_delay."""
    b.attempts += 1
    delay = rules.retry_delay(b.attempts)
    fn.keep_original(
        b,
        f"the frozen session measured {speedup:.2f}x the original path's speed "
        f"({evidence}): not faster, so not taken" + (f"; checked again in {delay:.0f} s" if delay else ""),
        warn=False,
    )
    b.retry_at = time.monotonic() + delay if delay else 0.0
    b.warm, b.expected = [], []
    pools.drop_pool(fn, key)
    remembered.remember(fn)


def _check_neighbour(fn: Function, b: Bucket, key: Setting, speedup: float) -> bool:
    """The frozen session at ``key`` lost the switch check: with live tuning on, the plan's
    neighbours are checked against the original path in turn (a model whose plan loses may
    win at another setting: an LSTM at batch 32 here). True when the next one is queued."""
    if not live_wanted() or b.tuned:
        return False
    with fn.lock:
        if b.checks is None:
            b.checks = pools.candidates(fn, b.plan, key)
        b.tried.append(f"{rules.label(key)}: {speedup:.2f}x the original path's speed, not taken")
        b.lost.append(key)
        if not b.checks:
            b.checking = None
            return False
        b.queue_neighbour(b.checks.pop(0))
    pools.drop_pool(fn, key)
    return True


def verify(fn: Function, bucket_id: int, arrays: list[Any], frozen_out: Any) -> None:
    """A bucket built at load from the cache served its first call: check it against the original."""
    import numpy as np
    import tensorflow as tf

    target = fn.target()
    if target is None:
        return
    args, kwargs = fn.convention.call_args(fn, arrays)
    original = fn.original(target, args, kwargs)
    b = fn.buckets[bucket_id]
    diff = rules.outputs_differ(
        [np.asarray(t) for t in tf.nest.flatten(frozen_out)],
        [np.asarray(t) for t in tf.nest.flatten(original)],
        *pools.tolerance(b.key),
    )
    if diff:
        fn.keep_original(
            b, f"the frozen graph's outputs differ from the original's ({diff}); one call was served from it"
        )
        return
    if live_wanted() and not b.tuned and b.plan is not None:  # resume where it stopped
        b.warm = arrays
        b.expected = [np.asarray(t) for t in tf.nest.flatten(original)]
        b.candidates = pools.candidates(fn, b.plan, b.key)
        if b.pending is not None:  # an earlier start's unfinished tuning: what it had left, in its order
            # its list was made around the setting that first served (the plan's), not the winner
            around = b.candidates + pools.candidates(fn, b.plan, pools.plan_key(b.plan))
            by_label = {rules.label(k): k for k in around if k != b.key}
            b.candidates = [by_label[label] for label in dict.fromkeys(b.pending) if label in by_label]
            b.pending = None
        trials.next_trial(fn, bucket_id)
