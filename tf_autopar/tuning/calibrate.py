"""Calibrate the small-op threshold on this host: from which op size does a second thread pay?

The planner gives ops under ``SMALL_OP_WORK`` multiply-adds one intra-op thread each; that
number was fitted on an AMD EPYC host. Where one thread per op wins depends on how fast a core
finishes an op against the fixed cost of waking and joining the others, so it differs between
processors. This measures it, briefly, and the plan cache remembers it for this host (the
topology key plus the processor model): a ladder of 3x3 convolutions at batch 1 (0.6 M to
150 M multiply-adds each, chains of ``CHAIN``), each size timed in a fresh process with one
intra-op thread and with the whole budget, in interleaved rounds. The threshold is the
geometric middle between the largest size where one thread is not beaten (by ``MARGIN``) and
the smallest size from which the budget wins at every larger size.

Parent (``calibrate()``) never imports TensorFlow; ``ladder`` is the child function (measure/child.py).
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from typing import Any, Callable, Mapping

import tf_autopar.planning.variables as V
from tf_autopar.measure.child import command
from tf_autopar.measure.runner import OK, clean_env, run_child
from tf_autopar.measure.stats import median
from tf_autopar.runtime import cache
from tf_autopar.topology import detect_topology

CHANNELS = 64
SIDES = (4, 6, 8, 11, 16, 23, 32, 45, 64)  # 3x3x64x64 convolutions: side^2 x 36,864 multiply-adds
CHAIN = 6
MARGIN = 0.05  # the budget must be this much faster to count as a win
TIMEOUT_S = 300.0


def work_of(side: int) -> int:
    return side * side * 9 * CHANNELS * CHANNELS


def threshold(one: Mapping[int, float], many: Mapping[int, float]) -> tuple[int | None, str]:
    """(threshold in multiply-adds, why) from per-op times by work with one thread and with
    the budget. Pure. None when the ladder does not show a crossover."""
    works = sorted(set(one) & set(many))
    if not works:
        return None, "no size ran with both settings"
    wins = [many[w] * (1 + MARGIN) < one[w] for w in works]
    first = next((i for i in range(len(works)) if all(wins[i:])), None)
    if first is None:
        return None, f"one thread was never beaten up to {works[-1] / 1e6:.0f} M multiply-adds"
    if first == 0:
        return works[0], f"the budget won at every size, from {works[0] / 1e6:.1f} M multiply-adds"
    lo, hi = works[first - 1], works[first]
    return int(math.sqrt(lo * hi)), (
        f"one thread held up to {lo / 1e6:.1f} M multiply-adds, the budget won from {hi / 1e6:.1f} M on"
    )


def calibrate(
    rounds: int = 3,
    *,
    run: Callable[[int, int], Mapping[int, float] | None] | None = None,
    store: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure, decide, and (``store``) remember the threshold for this host; returns the entry.
    ``run(intra, round)`` -> {work: seconds per op} (default: a fresh child process)."""
    topology = detect_topology(cpu_details=False)
    budget = max(1, int(topology.cpu_budget))
    if budget < 2:
        raise ValueError("this process may use 1 CPU: there is no second intra-op thread to calibrate")
    run = run or _child_run
    times: dict[int, dict[int, list[float]]] = {1: {}, budget: {}}
    for r in range(1, rounds + 1):
        for intra in (1, budget):
            got = run(intra, r) or {}
            for w, t in got.items():
                times[intra].setdefault(int(w), []).append(float(t))
            if progress is not None:
                progress(f"round {r}/{rounds}, {intra} intra-op thread(s): {'ok' if got else 'failed'}")
    one = {w: median(ts) for w, ts in times[1].items()}
    many = {w: median(ts) for w, ts in times[budget].items()}
    value, why = threshold(one, many)
    entry = {
        "small_op_work": value,
        "why": why,
        "date": _dt.date.today().isoformat(),
        "cpu_model": getattr(topology.cpu, "model", "unknown"),
        "budget": budget,
        "rounds": rounds,
        "per_op_s": {str(w): {"1": one.get(w), str(budget): many.get(w)} for w in sorted(set(one) | set(many))},
    }
    if store and value is not None:
        cache.store_calibration(cache.host_key(topology), entry)
    return entry


def _child_run(intra: int, rnd: int) -> Mapping[int, float] | None:
    env, _ = clean_env()
    env.update({V.INTEROP: "1", V.INTRAOP: str(intra), "TF_CPP_MIN_LOG_LEVEL": "3"})
    res = run_child(command(f"{__name__}:ladder"), env, TIMEOUT_S)
    if res.status != OK or not res.payload:
        return None
    return {int(w): float(t) for w, t in res.payload["per_op_s"].items()}


def _measure_ladder(reps: int = 15, warmup: int = 3) -> dict[str, float]:
    """Child: seconds per convolution for each size of the ladder, in this process's pools."""
    import tensorflow as tf  # the child's only: the parent never starts TensorFlow

    out = {}
    for side in SIDES:
        x = tf.random.normal([1, side, side, CHANNELS], seed=1)
        filters = [tf.random.normal([3, 3, CHANNELS, CHANNELS], stddev=0.05, seed=i) for i in range(CHAIN)]

        @tf.function
        def chain(y: Any) -> Any:
            for f in filters:  # noqa: B023
                y = tf.nn.relu(tf.nn.conv2d(y, f, 1, "SAME"))
            return y

        for _ in range(warmup):
            chain(x).numpy()
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            chain(x).numpy()
            samples.append((time.perf_counter() - t0) / CHAIN)
        samples.sort()
        out[str(work_of(side))] = samples[len(samples) // 2]
    return out


def ladder(args: list[str]) -> dict[str, Any]:
    """The child function: seconds per convolution of the ladder, in this process's pools."""
    return {"per_op_s": _measure_ladder()}
