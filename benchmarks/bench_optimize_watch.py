#!/usr/bin/env python
"""What optimize()'s stale-variable watch costs, on a small model (numbers for frozen.py's docstring).

Measured in one process, hooks on and off in interleaved rounds (median of per-round medians):
- the per-call stale check of the optimized callable (one integer comparison), beside the
  whole call of a tiny Keras model at batch 1;
- what the installed hooks add to the user's other work: a tf.function call and an eager
  ``v.assign`` (hooks are installed only while an optimize() callable with variables lives);
- the same two hooks in isolation (the wrapper around a no-op, so the machine's load does not
  drown it): what each tf.function call and each eager write pays while a watch lives;
- one re-freeze after a write (trace kept, freeze + import + new session).

    python benchmarks/bench_optimize_watch.py [--rounds 7] [--json benchmarks/results/optimize_watch.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import timeit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def per_call_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def isolated_hooks(tf, watch, handle) -> dict[str, float]:
    """Per-call cost of the call_flat and eager-write wrappers around a no-op (microseconds)."""

    class Fn:  # stands in for an AtomicFunction whose write analysis is cached
        name = b"bench_fn"
        _bound_context = None

    def noop(*a, **k):
        return None

    fn, args = Fn(), tuple(tf.ones([1]) for _ in range(3)) + (handle,)
    wrapped_fn, wrapped_write = watch._wrap_call_flat(noop), watch._wrap_eager_write(noop)
    res = {}
    for label, written in (("read_only", ()), ("writes_unwatched", (3,))):
        watch._writes_of[Fn.name] = written  # the function writes its 4th argument (not a watched one)
        res[f"hook_fn_{label}_us"] = round(
            per_call_us(lambda: wrapped_fn(fn, *args), 100000) - per_call_us(lambda: noop(fn, *args), 100000), 3
        )
    res["hook_write_unwatched_us"] = round(
        per_call_us(lambda: wrapped_write(handle, 1.0), 100000) - per_call_us(lambda: noop(handle, 1.0), 100000), 3
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    import tf_autopar
    from tf_autopar.runtime import watch

    keras.utils.set_random_seed(0)
    inp = keras.Input((32,))
    model = keras.Model(inp, keras.layers.Dense(10)(keras.layers.Dense(64, activation="relu")(inp)))
    x = np.random.default_rng(0).random((1, 32), dtype=np.float32)
    fast = tf_autopar.optimize(model)
    fast(x)
    compiled = next(iter(fast._compiled.values()))
    w = fast._watch

    other = tf.Variable(tf.zeros([64]))
    step = tf.function(lambda t: tf.reduce_sum(t * other))
    step(tf.ones([64]))
    value = tf.ones([64])

    rows: dict[str, list[float]] = {
        k: []
        for k in (
            "call_us",
            "check_us",
            "fn_hooks_on_us",
            "fn_hooks_off_us",
            "assign_hooks_on_us",
            "assign_hooks_off_us",
        )
    }
    t_in = tf.ones([64])

    def hooks_on() -> None:
        assert watch.installed()
        rows["fn_hooks_on_us"].append(per_call_us(lambda: step(t_in), 2000))
        rows["assign_hooks_on_us"].append(per_call_us(lambda: other.assign(value), 2000))

    def hooks_off() -> None:
        handles = list(w._handles.values())
        w.close()  # hooks off: the only watch is gone
        assert not watch.installed()
        rows["fn_hooks_off_us"].append(per_call_us(lambda: step(t_in), 2000))
        rows["assign_hooks_off_us"].append(per_call_us(lambda: other.assign(value), 2000))
        w.add(handles)  # hooks on again

    for i in range(args.rounds):
        rows["call_us"].append(per_call_us(lambda: fast(x), 300))
        rows["check_us"].append(per_call_us(lambda: compiled.generation == w.generation, 200000))
        for measure in (hooks_on, hooks_off) if i % 2 == 0 else (hooks_off, hooks_on):  # order alternates
            measure()
    refresh_ms = []
    for _ in range(args.rounds):
        model.weights[0].assign(model.weights[0] * 1.0)
        t0 = time.perf_counter()
        fast(x)
        refresh_ms.append((time.perf_counter() - t0) * 1e3)
    out = {k: round(statistics.median(v), 3) for k, v in rows.items()}
    out.update(isolated_hooks(tf, watch, other.handle))
    out["refresh_call_ms"] = round(statistics.median(refresh_ms), 1)
    out["refreshes"] = fast.refreshes
    out["fn_overhead_us"] = round(out["fn_hooks_on_us"] - out["fn_hooks_off_us"], 2)
    out["assign_overhead_us"] = round(out["assign_hooks_on_us"] - out["assign_hooks_off_us"], 2)
    out["rounds"] = args.rounds
    out["model"] = "Dense 32-64-10, batch 1"
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
