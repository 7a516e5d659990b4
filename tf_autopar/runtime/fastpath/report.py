"""The fast path in words and records: ``record`` (status()'s ServedRecord), ``summary`` (what the
plan cache keeps), and the tuning words of a bucket's status line."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import tf_allocator
from tf_autopar.runtime.fastpath import converting, engines, rules
from tf_autopar.runtime.fastpath.bucket import Bucket, State
from tf_autopar.runtime.fastpath.switches import BY_LIVE, BY_TUNE
from tf_autopar.runtime.records import BucketRecord, ServedRecord
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function


def record(fn: Function) -> ServedRecord:
    """The function for status(): per bucket, which path serves it, with what, and why."""
    with fn.lock:
        buckets = tuple(_bucket_record(b, fn.calls.get(b.bucket, 0)) for b in sorted(fn.buckets.values(), key=_id))
        calls = dict(fn.calls)
        declined = tuple(fn.declined.most_common())
    return ServedRecord(
        model=fn.model,
        function=fn.name,
        calls=sum(calls.values()),
        batches=rules.batch_words(calls),
        buckets=buckets,
        stopped=fn.stopped,
        convention=fn.kind,
        served=sum(b.served for b in buckets),
        declined=declined,
    )


def _id(b: Bucket) -> int:
    return b.bucket


def _bucket_record(b: Bucket, calls: int) -> BucketRecord:
    return BucketRecord(
        bucket=b.bucket,
        batch=b.batch,
        calls=calls,
        served=b.served,
        path=b.state.value,
        inter_op=b.key[0],
        intra_op=b.key[1],
        streams=b.pool.streams if b.pool else 0,
        speedup=round(b.speedup, 3),
        spread=round(b.spread, 3),
        evidence=b.evidence,
        build_s=round(b.build_s, 2),
        reason=b.reason,
        plan_source=plan_source(b),
        tuning=tuning_words(b),
        tuned=b.tuned == "done",
        **_engine_words(b),
    )


def _engine_words(b: Bucket) -> dict[str, str]:
    """The serving runner's engine and configuration, from its own description."""
    if b.pool is None or b.state is not State.FAST:
        return {}
    try:
        d = b.pool.describe()
    except Exception:  # a closed or failing runner: status still reads
        return {"engine": engines.engine_of(b.key)}
    keys = ("precision", "threads", "streams")
    detail = ", ".join(f"{k} {d[k]}" for k in keys if k in d and d.get("engine") != engines.DEFAULT)
    if d.get("static_shapes"):  # a second copy compiled for the bucket's calls (pools.static_shapes)
        detail += ", a copy for " + " and ".join("x".join(map(str, s)) or "scalar" for s in d["static_shapes"])
    return {"engine": str(d.get("engine", engines.engine_of(b.key))), "engine_detail": detail}


#: a bucket's ``tuned`` in the cache when its start ended with candidates left (report.summary)
UNFINISHED = "unfinished"


def summary(fn: Function) -> dict[str, Any]:
    """What the cache keeps: calls per bucket, the batch planned for, the verdict and its evidence."""
    import tensorflow as tf  # deferred: startup cost

    out: dict[str, Any] = {}
    # a fault count says what malloc does; under the BFC pool (set because of it) none is
    # written, and the cache keeps malloc's from the earlier start (cache.store_served)
    allocator = tf_allocator.in_use()
    for bucket_id, n in sorted(dict(fn.calls).items()):
        b = fn.buckets.get(bucket_id)
        entry: dict[str, Any] = {"calls": n}
        if b is not None and b.state in (State.FAST, State.ORIGINAL):
            entry.update(
                path=b.state.value,
                batch=b.batch,
                speedup=round(b.speedup, 4),
                spread=round(b.spread, 4),
                evidence=b.evidence,
                tf=tf.__version__,
                date=time.strftime("%Y-%m-%d"),
            )
            if b.key[0]:
                entry.update(inter_op=b.key[0], intra_op=b.key[1], streams=b.key[2])
                if engines.engine_of(b.key) != engines.DEFAULT:
                    entry.update(engine=engines.engine_of(b.key))
            if allocator == "malloc" and len(b.faults) >= tf_allocator.SAMPLE_CALLS:  # tf_allocator.remembered_env
                entry.update(faults_per_call=int(statistics.median(b.faults)))
            under_way = b.state is State.FAST and not b.tuned and (b.won or b.candidates or b.trial is not None)
            if b.tuned or under_way:
                entry.update(
                    tuned=b.tuned or UNFINISHED,
                    tried=list(b.tried),
                    won=dict(b.won),
                    by=b.by or BY_LIVE,
                    allocator=allocator,  # remembered.remembered_key: another allocator tunes again
                    precision=STATE.precision,  # and so does another precision opted in to
                )
                if under_way:
                    # a server stopped while tuning (a 60-s window on a slow model): the next start
                    # serves the winner so far from its first call and tries only what was left
                    trial = [b.trial.key] if b.trial is not None else []
                    entry.update(pending=[rules.label(k) for k in trial + list(b.candidates)])
            elif b.tried:  # the switch checks of the plan and its neighbours, none faster than the original
                entry.update(tried=list(b.tried))
        out[str(bucket_id)] = entry
    return {"buckets": out}


def tuned_how(b: Bucket) -> str:
    return "tuned by `tf-autopar tune`" if (b.won.get("by") or b.by) == BY_TUNE else "tuned live"


def tuning_words(b: Bucket) -> str:
    """Live tuning in a user's words: what is being tried, what won and by how much, what it cost."""
    won = (
        (
            f"{b.won.get('to')} won over {b.won.get('from')}, {number(b.won.get('speedup')):.2f}x faster "
            f"({b.won.get('pairs')} paired calls, {b.won.get('seconds')} s)"
        )
        if b.won
        else ""
    )
    if b.tuned == "done":
        how = tuned_how(b)
        if won:
            return f"{how}: {won}; {len(b.tried)} setting(s) tried"
        return f"{how}: the plan held against {len(b.tried)} neighbour(s)" if b.tried else how
    trial = b.trial
    if b.state is State.CHECKING:
        return (
            f"switch check: {rules.label(trial.key)} against the original path on live calls "
            f"({len(trial.test.ratios)} pairs so far)"
            if trial is not None
            else "switch check: decided, settling"
        )
    so_far = f"; so far {won}" if won else ""
    if any(engines.engine_of(k) != engines.DEFAULT for k in b.candidates):
        converting_now = converting.under_way()
        so_far += f"; {converting_now}" if converting_now else ""
    if trial is not None:
        return (
            f"live tuning: trying {rules.label(trial.key)} against {rules.label(b.key)} ({len(trial.test.ratios)} pairs so "
            f"far; {len(b.candidates)} more to try){so_far}"
        )
    if b.candidates:
        return f"live tuning: {len(b.candidates)} neighbour(s) to try{so_far}"
    return ""


def plan_source(b: Bucket) -> str:
    """Where the bucket's serving numbers came from, in a user's words (status().text()): "tuned
    live on <date>, N samples, x faster than <the setting before>", the rule, or `tune`."""
    if b.won and rules.label(b.key) == b.won.get("to"):
        w = b.won
        return (
            f"{tuned_how(b)} on {w.get('date', '?')}, {w.get('pairs_total', w.get('pairs'))} samples, "
            f"{number(w.get('total', w.get('speedup'))):.2f}x faster than {w.get('plan', w.get('from'))}"
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
            source += f"; it held against the {len(b.tried)} setting(s) tried {tuned_how(b)}"
    elif b.tuned == "done" and b.tried:
        source += f", which held against {len(b.tried)} neighbour(s) {tuned_how(b)}"
    return source


def number(value: Any) -> float:
    """A positive finite number read from the cache, else 0."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e6
    return float(value) if ok else 0.0
