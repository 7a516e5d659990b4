"""Live tuning: once a bucket serves from a runner, the plan's neighbours (measure/search.py) are
tried one at a time on live calls, in alternate blocks of calls, each candidate call paired with
the incumbent call at the same place of the block before, under the same load (pairing.py);
measure/live.py's stopping rule decides from the pairs. A winner replaces the incumbent; the
result and its evidence are remembered for the next start. At most one candidate runner beside
the serving one; candidates are built on the builder thread (``next_trial``), a verdict is
taken on the request path (``end_trial``) and the next candidate queued.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from tf_autopar.runtime.fastpath import builder, converting, engines, memory, pools, remembered, rules
from tf_autopar.runtime.fastpath.bucket import Bucket, State
from tf_autopar.runtime.fastpath.pairing import Trial
from tf_autopar.runtime.fastpath.bucket import bucket_words
from tf_autopar.runtime.fastpath.report import number
from tf_autopar.runtime.lowprio import run_low

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.engines import Key
    from tf_autopar.runtime.fastpath.function import Function

log = logging.getLogger("tf_autopar.runtime")


def end_trial(fn: Function, b: Bucket, trial: Trial) -> None:
    """The verdict is in: a winner becomes the incumbent; the next candidate is built off the request path."""
    with fn.lock:
        if b.trial is not trial:
            return
        b.trial = None
        label = rules.label(trial.key)
        test = trial.test
        b.tried.append(f"{label}: {test.verdict} ({test.why})")
        retired = trial.pool
        if test.verdict == "win":
            b.won = _win(b, trial, fn.by)
            retired, b.pool, b.key = b.pool, trial.pool, trial.key
            if b.speedup:
                b.speedup *= test.speedup
            # over TensorFlow's session: the product of the wins since the plan's setting (the
            # engines are tried first: OpenVINO 1.9x over it, then ONNX Runtime 1.4x over OpenVINO)
            total = number(b.won.get("total")) or test.speedup
            if engines.engine_of(trial.key) != engines.DEFAULT and total >= rules.ENGINE_MARGIN:
                # TensorFlow's other pool settings differ by tens of percent at most: not worth the
                # calls they would take from a much faster engine
                skipped = [c for c in b.candidates if engines.engine_of(c) == engines.DEFAULT]
                b.candidates = [c for c in b.candidates if c not in skipped]
                if skipped:
                    b.tried.append(
                        f"{len(skipped)} TensorFlow session setting(s) not tried: "
                        f"{rules.label(trial.key)} was {total:.2f}x faster than TensorFlow's session"
                    )
        in_use = any(o.pool is retired for o in fn.buckets.values() if o is not b) or retired is b.pool
        if not in_use:
            fn.pools = {k: p for k, p in fn.pools.items() if p is not retired}
    if not in_use and retired is not None:
        retired.close()
    log.info(
        "tf_autopar: live tuning of %s, batch %s: %s %s (%s)",
        fn.name,
        bucket_words(b.bucket),
        label,
        "won" if test.verdict == "win" else "kept the incumbent",
        test.why,
    )
    if test.verdict == "win":  # the winner so far, kept for a start after a kill (no atexit): off the request path
        builder.submit(fn, b.bucket, _remember)
    builder.submit(fn, b.bucket, next_trial)


def _remember(fn: Function, bucket_id: int) -> None:
    remembered.remember(fn)


def pause(fn: Function, why: str) -> int:
    """Memory pressure: the candidates' sessions that serve no bucket close now (their calls in
    flight are answered by the original path); each is tried again, first, when room is back.
    How many closed."""
    closed = []
    with fn.lock:
        for b in fn.buckets.values():
            trial = b.trial
            if trial is None or b.state is not State.FAST:  # a switch check's session is the one to serve
                continue
            b.trial = None
            if trial.key not in b.candidates:
                b.candidates.insert(0, trial.key)
            closed.append(trial.key)
    for key in closed:
        pools.drop_pool(fn, key)
    if closed:
        log.info("tf_autopar: %s of %s: %d live-tuning candidate(s) closed: %s", fn.name, fn.model, len(closed), why)
    return len(closed)


def resume(fn: Function) -> None:
    """Room is back: the buckets whose tuning was paused try their next candidate (builder thread)."""
    for b in list(fn.buckets.values()):
        if b.state is State.FAST and b.trial is None and b.candidates and b.tuned != "done":
            builder.submit(fn, b.bucket, next_trial)


def _win(b: Bucket, trial: Trial, by: str) -> dict[str, object]:
    """The evidence of a win; an earlier win in this bucket: the evidence chains back to the plan."""
    test, before = trial.test, b.won
    earlier = before.get("pairs_total", before.get("pairs", 0))
    return {
        "from": rules.label(b.key),
        "to": rules.label(trial.key),
        "speedup": round(test.speedup, 4),
        "pairs": len(test.ratios),
        "spread": round(test.spread, 4),
        "pairs_total": len(test.ratios) + (earlier if isinstance(earlier, int) else 0),
        "seconds": round(time.monotonic() - trial.started, 1),
        "date": time.strftime("%Y-%m-%d"),
        "plan": before.get("plan", before.get("from", rules.label(b.key))),
        "total": round(test.speedup * (number(before.get("total", before.get("speedup"))) or 1.0), 4),
        "by": by,
    }


def ready(fn: Function, candidates: list[Key]) -> Key | None:
    """The first candidate that can be built now; one that needs a conversion waits for it, which
    runs in the background meanwhile (converting.py). None: every one left waits."""
    for key in candidates:
        if not (converting.needed(fn, key) and converting.begin(fn, key)):
            return key
    return None


def next_trial(fn: Function, bucket_id: int) -> None:
    """Builder thread: open the next candidate's runner (warmed up and checked), or finish."""
    b = fn.buckets.get(bucket_id)
    if b is None or b.state is not State.FAST or b.trial is not None or fn.frozen is None:
        return
    while b.candidates:
        if memory.paused():  # under memory pressure: resumed (roster.memory_tick) when the room is back
            return
        key = ready(fn, b.candidates)
        if key is None:  # every candidate left waits for the conversion under way
            if not converting.wait(builder.exiting):
                return
            continue
        if key == b.key:
            b.candidates.remove(key)
            continue
        # one session's first run at a time per memory cgroup; the room is read under the lock
        with memory.build_lock(f"{fn.name} of {fn.model}: candidate {rules.label(key)}", builder.exiting) as held:
            if not held:
                return
            b.candidates.remove(key)
            pool = pools.pool_for(fn, key, b.warm)
            values = run_low(pool.run, b.warm) if pool is not None else None  # grappler, here
            memory.trim_heap()
        if pool is None:
            b.tried.append(f"{rules.label(key)}: not tried ({fn.refused or 'memory bound'})")
            continue
        diff = rules.outputs_differ(values, b.expected, *pools.tolerance(key))
        if diff:
            b.tried.append(f"{rules.label(key)}: not tried (outputs differ: {diff})")
            pools.drop_pool(fn, key)
            continue
        with fn.lock:
            if b.state is State.FAST and b.generation == fn.watch.generation:
                b.trial = Trial(key, pool, incumbent=b.pool)
                return
        pools.drop_pool(fn, key)
        return
    b.tuned, b.by = "done", fn.by
    b.warm, b.expected = [], []
    remembered.remember(fn)
