#!/usr/bin/env python
"""What a conversion child costs the calls served beside it, and whether stopping it gives it back.

One process: a SavedModel of ``benchmarks/user_models.py`` frozen (runtime/frozen.py) and served
from one TensorFlow session (the host's CPUs as 2 inter-op x N intra-op threads) back to back;
``--before`` seconds alone, then the fast path's conversion child (engines/conversion.py: the
real child, at ``SCHED_IDLE``) converts the same graph for ``--kind`` while a thread stops and
continues it in alternate ``--slice`` second slices. Each call counts for the slice it ran wholly
inside: the median and 90th percentile while the child ran, while it was stopped, and alone
before it. The ratio of the first two is what engines/pacing.py measures live; that stopping
the child gives the calls their time back is why it stops it.

    python benchmarks/conversion_cost.py /work/user_models/xception --batch 2 --kind onnx \\
        --out benchmarks/results/conversion_cost_xception_b2_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402
from user_models import make_inputs  # noqa: E402


def _summary(ms: list[float]) -> dict:
    if len(ms) < 2:
        return {"calls": len(ms)}
    return {
        "calls": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p90_ms": round(statistics.quantiles(ms, n=10)[-1], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a SavedModel directory of benchmarks/user_models.py (its name picks the inputs)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--kind", choices=("onnx", "openvino"), default="onnx")
    ap.add_argument("--before", type=float, default=10.0, help="seconds served alone first")
    ap.add_argument("--slice", type=float, default=1.5, help="seconds running, then stopped, alternately")
    ap.add_argument("--limit", type=float, default=400.0, help="stop serving after this long beside the child")
    ap.add_argument("--out")
    args = ap.parse_args()

    os.environ["TF_AUTOPAR_DISABLE"] = "1"  # the session's pools are set here, nothing planned
    import tensorflow as tf

    from tf_autopar.runtime.fastpath.engines import conversion
    from tf_autopar.runtime.frozen import FrozenGraph

    name = os.path.basename(os.path.normpath(args.model))
    sig = tf.saved_model.load(args.model).signatures["serving_default"]
    frozen = FrozenGraph(sig)
    cpus = len(os.sched_getaffinity(0))
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=cpus)
    session = tf.compat.v1.Session(graph=frozen.graph, config=config)
    inputs = make_inputs(name, args.batch)
    # a signature's keyword inputs flatten in sorted key order, as the frozen graph's inputs do
    feed = dict(zip(frozen.inputs, (inputs[k] for k in sorted(inputs))))
    for _ in range(3):
        session.run(frozen.outputs, feed)

    calls: list[tuple[float, float]] = []  # (start, end) on time.monotonic
    slices: list[tuple[float, float, bool]] = []  # (start, end, child running)
    done = threading.Event()
    outcome: dict = {}

    def call() -> None:
        t0 = time.monotonic()
        session.run(frozen.outputs, feed)
        calls.append((t0, time.monotonic()))

    def convert() -> None:
        t0 = time.monotonic()
        try:
            conversion.convert(args.kind, frozen).close()
            outcome["converted"] = True
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"[:300]
        outcome["conversion_s"] = round(time.monotonic() - t0, 1)
        done.set()

    def alternate() -> None:
        running, start = True, time.monotonic()
        while not done.wait(args.slice):
            with conversion._children_lock:
                children = list(conversion._children)
            now = time.monotonic()
            slices.append((start, now, running))
            running, start = not running, now
            for child in children:
                conversion._signal(child, signal.SIGCONT if running else signal.SIGSTOP)
        slices.append((start, time.monotonic(), running))

    end = time.monotonic() + args.before
    while time.monotonic() < end:
        call()
    alone = [(b - a) * 1e3 for a, b in calls]
    calls.clear()
    threading.Thread(target=convert, daemon=True).start()
    threading.Thread(target=alternate, daemon=True).start()
    limit = time.monotonic() + args.limit
    while not done.is_set() and time.monotonic() < limit:
        call()
    done.set()

    def inside(running: bool) -> list[float]:
        return [(b - a) * 1e3 for a, b in calls if any(s <= a and b <= e and r == running for s, e, r in slices)]

    ran, stopped = _summary(inside(True)), _summary(inside(False))
    result = {
        "processor": processor(),
        "cpus": cpus,
        "model": name,
        "batch": args.batch,
        "kind": args.kind,
        "slice_s": args.slice,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "alone": _summary(alone),
        "child_running": ran,
        "child_stopped": stopped,
        "running_over_stopped": round(ran["median_ms"] / stopped["median_ms"], 3)
        if "median_ms" in ran and "median_ms" in stopped
        else None,
        **outcome,
        "load_average_at_end": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
