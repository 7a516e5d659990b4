"""Memory across starts: each bucket's calls and verdict go into the plan cache (``remember``);
the next start plans the process pools for the commonest batch and, where the frozen path won
last time, builds it while the model loads (``prebuild``), so the first call is served by it
(verified again on that call's inputs, in the background: build.verify)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import cache, tf_allocator
from tf_autopar.runtime.fastpath import engines, memory, pools, rules
from tf_autopar.runtime.fastpath.engines import choice
from tf_autopar.runtime.fastpath.bucket import Bucket, State
from tf_autopar.runtime.fastpath.report import UNFINISHED, number, summary
from tf_autopar.runtime.fastpath.routing.arrays import synthetic
from tf_autopar.runtime.fastpath.switches import BY_LIVE, BY_TUNE
from tf_autopar.runtime.safety import fail_open
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.engines import Key
    from tf_autopar.runtime.fastpath.function import Function

log = logging.getLogger("tf_autopar.runtime")

EARLIER = " at an earlier start"  # a remembered verdict's evidence, said once however many starts ago


def lookup(fingerprint: str | None) -> dict[str, Any]:
    """This model's cached fast-path entry on this host and mode, by function name."""
    if not (fingerprint and STATE.use_cache):
        return {}
    try:
        entry = cache.lookup_served(fingerprint, cache.host_key(STATE.topology()), STATE.mode)
    except Exception as exc:
        log.debug("fast-path cache lookup failed: %s", exc)
        return {}
    functions = entry.get("functions") if isinstance(entry, dict) else None
    return functions if isinstance(functions, dict) else {}


def remember(fn: Function) -> None:
    """The function's summary into the plan cache (when the cache is on)."""
    if not (STATE.use_cache and fn.fingerprint):
        return
    try:
        cache.store_served(fn.fingerprint, cache.host_key(STATE.topology()), STATE.mode, fn.name, summary(fn))
    except Exception as exc:
        fail_open("write the plan cache", exc)


def remembered_key(entry: dict[str, Any], allocator: str | None = None) -> Key | None:
    """The sessions a cached bucket ended on (after live tuning, finished or not), or None when not usable: also when
    it was tuned under another CPU allocator than ``allocator`` (the one running now). A start that
    switched to TensorFlow's BFC pool because malloc faulted (tf_allocator) tunes again: the faults
    were in every sample the old winner was chosen on. The same for another precision opted in to."""
    inter, intra = entry.get("inter_op"), entry.get("intra_op")
    if entry.get("tuned") not in ("done", UNFINISHED) or not (rules.is_batch(inter) and rules.is_batch(intra)):
        return None
    if allocator and entry.get("allocator") not in (None, allocator):
        return None
    if entry.get("precision", "f32") != STATE.precision:  # bf16 opted in (or out) since: tuned again
        return None
    streams = entry.get("streams", 1)
    if inter > 1024 or intra > 1024 or not rules.is_batch(streams) or streams > 1024:
        return None
    name = entry.get("engine") or engines.DEFAULT
    if not isinstance(name, str) or name not in engines.names():
        return None
    if name != engines.DEFAULT:  # another engine: only where it is still installed and allowed
        engine = engines.get(name)
        if not choice.allows(choice.allowed_names(), name, engine) or engine.available():
            return None
        if getattr(engine, "precision", "f32") != "f32" and STATE.precision != engine.precision:
            return None
    return engines.key_for(name, (inter, intra, streams))


def prebuild(fn: Function, remembered: dict[str, Any]) -> None:
    """At load: the buckets that won last time on this host are built now, from synthesised
    inputs of the remembered batch, so the first call is served by them (and checked)."""
    for key, entry in (remembered.get("buckets") or {}).items():
        if not isinstance(entry, dict) or entry.get("path") != State.FAST.value:
            continue
        batch = entry.get("batch")
        if not rules.is_batch(batch) or rules.bucket_of(batch) != rules.dominant_bucket({key: 1}):
            continue
        try:
            # at load, on the loading thread: another worker of this memory cgroup building now
            # means no build here (the first call queues one, which waits for its turn)
            with memory.build_lock(f"{fn.name} of {fn.model}: at load", wait=False) as held:
                if not held:
                    return
                arrays = [synthetic(spec, batch) for _, spec in fn.specs]
                fn.refused = ""
                pools.freeze(fn, fn.watch.generation)
                if fn.stopped or fn.refused or fn.frozen is None:
                    return
                plan = pools.plan(fn, arrays, batch)
                tuned_key = remembered_key(entry, tf_allocator.in_use())
                setting = tuned_key or pools.plan_key(plan)
                pool = pools.pool_for(fn, setting, arrays)
                if pool is None:
                    return
                pool.run(arrays)  # grappler, now
        except Exception as exc:  # the deferred path still works: build on the first call instead
            log.debug("tf_autopar: building %s at load failed", fn.name, exc_info=exc)
            return
        memory.trim_heap()
        bucket_id = rules.bucket_of(batch)
        fn.buckets[bucket_id] = _remembered_bucket(fn, bucket_id, entry, batch, pool, plan, setting, tuned_key)


def _remembered_bucket(
    fn: Function,
    bucket_id: int,
    entry: dict[str, Any],
    batch: int,
    pool: Any,
    plan: Any,
    setting: Key,
    tuned_key: Key | None,
) -> Bucket:
    """The bucket as the cache entry left it, serving from ``pool``; to verify on its first call."""
    tuned = entry.get("tuned")
    stale = tuned in ("done", UNFINISHED) and not tuned_key  # tuned under another allocator: all again
    won = entry.get("won") if isinstance(entry.get("won"), dict) and not stale else {}
    tried = entry.get("tried", []) if isinstance(entry.get("tried"), list) and not stale else []
    left = entry.get("pending")
    pending = [str(p)[:80] for p in left[:64]] if tuned == UNFINISHED and tuned_key and isinstance(left, list) else None
    return Bucket.serving(
        bucket_id,
        pool,
        fn.frozen_generation,
        setting,
        batch=batch,
        plan=plan,
        verify=True,
        speedup=number(entry.get("speedup")),
        spread=number(entry.get("spread")),
        evidence=f"{str(entry.get('evidence') or 'paired rounds').removesuffix(EARLIER)[:80]}{EARLIER}",
        reason="built at load: it won last time",
        tuned="done" if tuned_key and tuned == "done" else "",
        pending=pending,
        won=won,
        tried=[str(t)[:300] for t in tried[:16]],
        by=BY_TUNE if entry.get("by") == BY_TUNE else BY_LIVE,
    )
