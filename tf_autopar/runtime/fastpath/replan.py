"""A served bucket's sessions re-planned after the CPU limits changed (runtime/quota_watch.py).

Runs on the fast path's builder thread, never on a request's: the bucket's plan is made again
for the host under its new limits (STATE already follows them), and when it gives
other pools, new sessions are opened, run once on the bucket's synthetic inputs (grappler's
first run happens here) and checked against the serving sessions' outputs, then swapped in.
The old sessions retire: idle ones close now, busy ones when their call returns, and a caller
that was about to use them is answered by the original path (streams.Retired), so no request is
dropped or waits. A live-tuning trial under way ends with them (its candidates were neighbours
of the old plan); the bucket's tuning is cleared, so the next start tunes under its own limits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath import builder, memory, pools, rules
from tf_autopar.runtime.streams import Retired

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

log = logging.getLogger("tf_autopar.runtime")


def replan(served: Function, bucket_id: int, arrays: list[Any]) -> str:
    """Re-plan one serving bucket for the current limits; what happened, in words (also logged)."""
    b = served.buckets.get(bucket_id)
    frozen = served.frozen
    if b is None or b.pool is None or frozen is None or b.generation != served.watch.generation:
        return "not serving from a session now: its next build plans for the new limits"
    old_pool, old_key = b.pool, b.key
    plan = pools.plan(served, arrays, b.batch)
    key = pools.plan_key(plan)
    if key == old_key:
        with served.lock:
            b.plan = plan
        return f"kept {rules.label(key)}: the plan for the new limits is the same"
    # one session's first run at a time per memory cgroup; the room is read under the lock
    with memory.build_lock(f"{served.name} of {served.model}: re-plan", builder.exiting) as held:
        pool = pools.pool_for(served, key, arrays) if held else None
        new_out = pool.run(arrays) if pool is not None else None  # grappler's first run: here, not on a request
        memory.trim_heap()
    if pool is None:
        return f"kept {rules.label(old_key)}: no session for {rules.label(key)} fits the memory bound"
    try:
        diff = rules.outputs_differ(new_out, old_pool.run(arrays))
    except Retired:  # replaced meanwhile (a re-freeze): that build plans for the new limits itself
        diff = ""
    with served.lock:
        swapped = not diff and b.pool is old_pool and b.generation == served.watch.generation
        trial = b.trial if swapped else None
        if swapped:
            b.pool, b.key, b.plan, b.trial = pool, key, plan, None
            b.candidates, b.tried, b.won, b.tuned = [], [], {}, ""
            b.checks, b.lost = None, []  # neighbours of the old plan
            b.reason = f"re-planned for new CPU limits while running (was {rules.label(old_key)})"
    pools.drop_pool(served, old_key if swapped else key)  # retired when no bucket serves from it
    if trial is not None:
        pools.drop_pool(served, trial.key)
    if diff:
        what = f"kept {rules.label(old_key)}: the sessions for {rules.label(key)} gave other outputs ({diff})"
    elif not swapped:
        what = f"kept {rules.label(old_key)}: the bucket changed while its new sessions were built"
    else:
        what = f"now {rules.label(key)} (was {rules.label(old_key)})"
    log.info(
        "tf_autopar: %s of %s, batch %s, after the CPU limits changed: %s", served.name, served.model, b.batch, what
    )
    return what
