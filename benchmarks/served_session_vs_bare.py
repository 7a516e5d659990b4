#!/usr/bin/env python
"""The fast path's TensorFlow session against a bare one at the same pools, in one process.

Where ``enable()`` ends on TensorFlow's session at the setting that ran fastest alone and still
measures slower than that session alone in another process (NASNetMobile at batch 8 in
bench_engines.py: 0.83-0.85), is it the served call or the processes? ``enable()`` with
TensorFlow's sessions only (``TF_AUTOPAR_ENGINES=tensorflow``, no conversion beside it), the
SavedModel's ``serving_default`` called for ``--warm`` seconds (live tuning ends), then, interleaved
in rounds, blocks of the routed call (outputs read back) and of a bare ``tf.compat.v1.Session`` of
the same frozen graph at ``--pools`` (numpy in and out, as bench_engines.py's ``tf-frozen``).

    TF_AUTOPAR_ENGINES=tensorflow python -P benchmarks/served_session_vs_bare.py \\
        /work/user_models/nasnet_mobile --batch 8 --pools 2x1 --out benchmarks/results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402
from user_models import make_inputs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a SavedModel directory of benchmarks/user_models.py (its name picks the inputs)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--pools", default="2x1", help="the bare session's inter x intra threads")
    ap.add_argument("--warm", type=float, default=75.0, help="seconds of routed calls first (live tuning ends)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10, help="calls per block (the first 2 untimed)")
    ap.add_argument("--out")
    args = ap.parse_args()
    import tf_autopar

    tf_autopar.enable()
    import tensorflow as tf

    from tf_autopar.runtime.frozen import FrozenGraph

    inputs = make_inputs(os.path.basename(os.path.normpath(args.model)), args.batch, seed=0)
    sig = tf.saved_model.load(args.model).signatures["serving_default"]
    tensors = {k: tf.constant(v) for k, v in inputs.items()}

    def routed() -> None:
        [v.numpy() for v in sig(**tensors).values()]

    end = time.time() + args.warm
    while time.time() < end:
        routed()
    served = [
        line.strip()
        for line in tf_autopar.status().text().splitlines()
        if f"batch {args.batch}:" in line or "tuned live" in line
    ]
    frozen = FrozenGraph(sig)
    feeds = {t: inputs[n] for t, n in zip(frozen.inputs, sorted(inputs))}  # the signature's flat input order
    session = frozen.open_sessions(*(int(x) for x in args.pools.split("x")))[0]

    def bare() -> None:
        session.run(frozen.outputs, feeds)

    bare()  # grappler, once
    blocks: dict[str, list[float]] = {"routed": [], "bare": []}
    for rnd in range(args.rounds):
        order = [("routed", routed), ("bare", bare)]
        for name, fn in order if rnd % 2 else order[::-1]:
            times = []
            for k in range(args.calls):
                t = time.perf_counter()
                fn()
                if k >= 2:
                    times.append((time.perf_counter() - t) * 1e3)
            blocks[name].append(statistics.median(times))
    result = {
        "processor": processor(),
        "model": args.model,
        "batch": args.batch,
        "pools": args.pools,
        "served": served,
        "blocks_ms": blocks,
        "routed_ms": statistics.median(blocks["routed"]),
        "bare_ms": statistics.median(blocks["bare"]),
        "bare_over_routed_per_round": [b / r for b, r in zip(blocks["bare"], blocks["routed"])],
        "load_avg": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
