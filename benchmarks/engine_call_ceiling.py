#!/usr/bin/env python
"""How close a served signature call can come to the same engine alone: the ceiling of the tiny
rows, and whether the fast path's copy of an engine runs as fast as the engine by hand.

In one process: ``enable()``, a SavedModel's ``serving_default`` called until the fast path serves
it from ONNX Runtime, OpenVINO or TensorFlow's session (``--engines``, TF_AUTOPAR_ENGINES:
``onnxruntime`` by default, ``openvino``, ``tensorflow``), then, interleaved in rounds, blocks of:

- ``routed``: the signature call as a user makes it, outputs read back with ``.numpy()``;
- ``alone``: the engine by hand on the same inputs, numpy in and out, what bench_engines.py runs
  alone: ONNX Runtime's ``InferenceSession`` with its defaults on the fast path's conversion,
  OpenVINO's ``convert_model`` on the signature compiled with the LATENCY hint at f32, or a bare
  session of the fast path's frozen graph at the served setting's pools (where the served session
  measured slower than that setting alone in another process: is it the served call?);
- ``alone + eager outputs``: the same, each output made an eager tensor and read back: the least
  any wrapper returning what a TensorFlow signature returns (tensors) must add;
- the request path's parts, each timed alone: matching the call's inputs, the runner, the outputs;
- ``routed, runner from memory``: the routed call with the runner answering from the outputs of an
  earlier run: the routing's own CPU per call (matching, bookkeeping, the outputs as tensors),
  without the engine and without what its threads do to the caller's (spinning beside it, caches).

``alone`` over ``alone + eager outputs`` is the ceiling of ``enable()`` against the engine alone
for a model whose whole call is a few microseconds; ``routed`` minus ``alone + eager outputs``
is the routing's own cost; ``alone`` over ``part: the runner`` compares the fast path's copy of the
engine (its conversion, threads, shapes) with the engine by hand, in the same process and rounds.

    python benchmarks/engine_call_ceiling.py /work/user_models/tiny_mlp --out benchmarks/results/engine_call_ceiling_epyc.json
    python benchmarks/engine_call_ceiling.py /work/user_models/mobilenet_v2 --engines openvino
    python benchmarks/engine_call_ceiling.py /work/user_models/nasnet_mobile --batch 8 --engines tensorflow \
        --warm 75 --calls 8
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


#: what "alone" runs, per engine the fast path serves
ALONE = {
    "onnxruntime": "ONNX Runtime alone (its defaults, on the fast path's conversion)",
    "openvino": "OpenVINO alone (convert_model on the signature, LATENCY hint, f32; as bench_engines.py)",
    "tensorflow": "a bare TF session of the fast path's frozen graph at the served pools (as bench_engines.py's tf-frozen)",
}


def _alone(engine: str, sig, frozen, arrays: list, inputs: dict, runner):
    """The engine by hand on the same inputs, numpy in and out: what bench_engines.py runs alone."""
    if engine == "tensorflow":  # the served setting's pools in a session of their own
        described = runner.describe()
        session = frozen.open_sessions(described["inter_op"], described["intra_op"])[0]
        feed = dict(zip(frozen.inputs, arrays))
        return lambda: session.run(frozen.outputs, feed)
    if engine.startswith("onnxruntime"):
        import onnxruntime as ort

        from tf_autopar.runtime.fastpath.engines import onnxruntime_engine

        serialized = next(iter(onnxruntime_engine._conversions._done.values()))  # the converted model's bytes
        session = ort.InferenceSession(serialized, providers=["CPUExecutionProvider"])
        feed = dict(zip(frozen.inputs, arrays))  # the ONNX model's inputs are the placeholders, in their order
        return lambda: session.run(None, feed)
    import numpy as np
    import openvino as ov

    compiled = ov.Core().compile_model(
        ov.convert_model(sig), "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    )
    request = compiled.create_infer_request()
    feed = {}
    for i, port in enumerate(compiled.inputs):  # the ports carry the signature's input names
        hit = [k for k in inputs if k in {n.split(":")[0] for n in port.get_names()}]
        if len(hit) != 1:
            raise SystemExit(f"OpenVINO's input {sorted(port.get_names())} is none of the signature's {sorted(inputs)}")
        feed[i] = np.asarray(inputs[hit[0]])
    return lambda: list(request.infer(feed).values())


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
    import tensorflow as tf
    from tensorflow.python.framework import ops

    from tf_autopar.runtime.fastpath.routing.base import ATTR

    name = os.path.basename(os.path.normpath(args.model))
    loaded = tf.saved_model.load(args.model)  # held: convert_model reads the signature's variables
    sig = loaded.signatures["serving_default"]
    inputs = make_inputs(name, args.batch)
    t0 = time.monotonic()
    while time.monotonic() - t0 < args.warm:
        [v.numpy() for v in sig(**inputs).values()]
    served = sig.__dict__[ATTR]
    bucket = next(iter(served.buckets.values()))
    engine = bucket.pool.describe()["engine"] if bucket.pool is not None else ""
    if engine != "tensorflow" and not engine.startswith(("onnxruntime", "openvino")):
        raise SystemExit(
            f"the fast path does not serve {name} from TensorFlow's session, ONNX Runtime or OpenVINO "
            f"after {args.warm} s ({engine or 'no runner'})"
        )
    matched = served.matched((), inputs)
    arrays = matched[0]
    alone = _alone(engine, sig, served.frozen, arrays, inputs, bucket.pool)
    raw = bucket.pool.run(arrays)
    frozen = served.frozen
    blocks = {
        "routed": lambda: [v.numpy() for v in sig(**inputs).values()],
        "alone": alone,
        "alone + eager outputs": lambda: [ops.EagerTensor(v, None).numpy() for v in alone()],
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
        "runner": bucket.pool.describe(),  # its threads, streams, precision
        "load_average": os.getloadavg(),
        "method": "one process; blocks of --calls calls per configuration, rotated per round; median per block, "
        "median over rounds (min, max)",
        "us": {
            k: {"median": round(statistics.median(v), 2), "min": round(min(v), 2), "max": round(max(v), 2)}
            for k, v in per_round.items()
        },
    }
    us = {k: v["median"] for k, v in result["us"].items()}
    result["alone"] = ALONE[engine.split("-")[0]]
    result["ceiling_vs_alone"] = round(us["alone"] / us["alone + eager outputs"], 3)
    result["routed_vs_alone"] = round(us["alone"] / us["routed"], 3)
    if engine.startswith("onnxruntime"):  # the keys bench_engines.py --ceilings reads
        result["ceiling_vs_ort_alone"], result["routed_vs_ort_alone"] = (
            result["ceiling_vs_alone"],
            result["routed_vs_alone"],
        )
    result["routing_us"] = round(us["routed"] - us["alone + eager outputs"], 2)
    result["runner_vs_alone"] = round(us["alone"] / us["part: the runner"], 3)
    result["routing_own_us"] = us["routed, runner from memory"]
    for k, v in result["us"].items():
        print(f"{k:30s} {v['median']:9.2f} us  ({v['min']:.2f}-{v['max']:.2f})")
    print(
        f"ceiling {result['ceiling_vs_alone']} of {result['alone']}; enable() {result['routed_vs_alone']}; "
        f"the fast path's runner {result['runner_vs_alone']}; "
        f"routing {result['routing_us']} us a call, its own CPU {result['routing_own_us']} us "
        f"({result['processor']}, {name} b{args.batch}, {engine})"
    )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
