#!/usr/bin/env python
"""How close a served signature call can come to ONNX Runtime alone: the ceiling of the tiny rows.

In one process: ``enable()``, a SavedModel's ``serving_default`` called until the fast path serves
it from ONNX Runtime (``TF_AUTOPAR_ENGINES=onnxruntime``), then, interleaved in rounds, blocks of:

- ``routed``: the signature call as a user makes it, outputs read back with ``.numpy()``;
- ``ort alone``: an ``InferenceSession`` with ONNX Runtime's defaults on the same converted model
  and inputs, numpy in and out (what bench_engines.py's ``onnxruntime`` runs);
- ``ort + eager outputs``: the same, each output made an eager tensor and read back: the least
  any wrapper returning what a TensorFlow signature returns (tensors) must add;
- the request path's parts, each timed alone: matching the call's inputs, the runner, the outputs;
- ``routed, runner from memory``: the routed call with the runner answering from the outputs of an
  earlier run: the routing's own CPU per call (matching, bookkeeping, the outputs as tensors),
  without the engine and without what its threads do to the caller's (spinning beside it, caches).

``ort alone`` over ``ort + eager outputs`` is the ceiling of ``enable()`` against ONNX Runtime
alone for a model whose whole call is a few microseconds; ``routed`` minus ``ort + eager outputs``
is the routing's own cost.

    python benchmarks/engine_call_ceiling.py /work/user_models/tiny_mlp --out benchmarks/results/engine_call_ceiling_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402
from user_models import make_inputs  # noqa: E402


def _median_us(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a SavedModel directory of benchmarks/user_models.py (its name picks the inputs)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warm", type=float, default=20.0, help="seconds of calls before measuring (the switch)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200, help="calls per block")
    ap.add_argument(
        "--engines",
        default="onnxruntime",
        help="TF_AUTOPAR_ENGINES for the run (onnxruntime: it alone; e.g. tensorflow,openvino,onnxruntime: "
        "the others built and tried first, as under enable()'s default)",
    )
    ap.add_argument("--out")
    args = ap.parse_args()

    cache = tempfile.mkdtemp(prefix="tfa-ceiling-")
    os.environ.update(
        TF_AUTOPAR_CACHE_DIR=os.path.join(cache, "cache"),
        TF_AUTOPAR_FAST_PATH_DIR=os.path.join(cache, "fastpath"),
        TF_AUTOPAR_ENGINES=args.engines,
    )
    import tf_autopar

    tf_autopar.enable()
    import onnxruntime as ort
    import tensorflow as tf
    from tensorflow.python.framework import ops

    from tf_autopar.runtime.fastpath.engines import onnxruntime_engine
    from tf_autopar.runtime.fastpath.routing.base import ATTR

    name = os.path.basename(os.path.normpath(args.model))
    sig = tf.saved_model.load(args.model).signatures["serving_default"]
    inputs = make_inputs(name, args.batch)
    t0 = time.monotonic()
    while time.monotonic() - t0 < args.warm:
        [v.numpy() for v in sig(**inputs).values()]
    served = sig.__dict__[ATTR]
    bucket = next(iter(served.buckets.values()))
    engine = bucket.pool.describe()["engine"] if bucket.pool is not None else ""
    if not engine.startswith("onnxruntime"):
        raise SystemExit(
            f"the fast path does not serve {name} from ONNX Runtime after {args.warm} s ({engine or 'no runner'})"
        )
    serialized = next(iter(onnxruntime_engine._conversions._done.values()))  # the converted model's bytes
    alone = ort.InferenceSession(serialized, providers=["CPUExecutionProvider"])
    matched = served.matched((), inputs)
    arrays = matched[0]
    feed = dict(zip(served.frozen.inputs, arrays))  # the ONNX model's inputs are the placeholders, in their order
    raw = bucket.pool.run(arrays)
    frozen = served.frozen
    blocks = {
        "routed": lambda: [v.numpy() for v in sig(**inputs).values()],
        "ort alone": lambda: alone.run(None, feed),
        "ort + eager outputs": lambda: [ops.EagerTensor(v, None).numpy() for v in alone.run(None, feed)],
        "part: match the inputs": lambda: served.matched((), inputs),
        "part: the runner": lambda: bucket.pool.run(arrays),
        "part: the outputs as tensors": lambda: served.convention.outputs(frozen.structure, raw),
    }
    runner = bucket.pool

    def from_memory() -> None:
        runner.run = lambda arrays: raw  # the runner's answer without running it (an instance attribute)
        try:
            sig(**inputs)
        finally:
            del runner.run

    blocks["routed, runner from memory"] = from_memory
    per_round: dict[str, list[float]] = {k: [] for k in blocks}
    for r in range(args.rounds):
        order = list(blocks)[r % len(blocks) :] + list(blocks)[: r % len(blocks)]
        for k in order:
            _median_us(blocks[k], 20)  # warm
            per_round[k].append(_median_us(blocks[k], args.calls))
    result = {
        "processor": processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "model": name,
        "batch": args.batch,
        "engine": engine,
        "load_average": os.getloadavg(),
        "method": "one process; blocks of --calls calls per configuration, rotated per round; median per block, "
        "median over rounds (min, max)",
        "us": {
            k: {"median": round(statistics.median(v), 2), "min": round(min(v), 2), "max": round(max(v), 2)}
            for k, v in per_round.items()
        },
    }
    us = {k: v["median"] for k, v in result["us"].items()}
    result["ceiling_vs_ort_alone"] = round(us["ort alone"] / us["ort + eager outputs"], 3)
    result["routed_vs_ort_alone"] = round(us["ort alone"] / us["routed"], 3)
    result["routing_us"] = round(us["routed"] - us["ort + eager outputs"], 2)
    result["routing_own_us"] = us["routed, runner from memory"]
    for k, v in result["us"].items():
        print(f"{k:30s} {v['median']:9.2f} us  ({v['min']:.2f}-{v['max']:.2f})")
    print(
        f"ceiling {result['ceiling_vs_ort_alone']} of ONNX Runtime alone; enable() {result['routed_vs_ort_alone']}; "
        f"routing {result['routing_us']} us a call, its own CPU {result['routing_own_us']} us "
        f"({result['processor']}, {name} b{args.batch}, {engine})"
    )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
