#!/usr/bin/env python
"""Fair concurrency on the paths that serve calls: eight threads against one caller.

In one process per model (``enable()`` first, then ``tf.saved_model.load``): the fast path
(``signatures["serving_default"]`` once its frozen session serves), ``optimize(loaded)`` in
latency mode (one session) and in throughput mode with two streams. Per path: one caller for
``--seconds`` (calls per second), then eight threads for as long: each thread's call count, the
lowest share of the best-served thread (the issue's bar: at least a fifth), and the total rate
against the single caller's.

    python benchmarks/bench_concurrency.py /work/user_models --out benchmarks/results/concurrency.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import host  # noqa: E402

CHILD = r"""
import json, sys, threading, time
sys.path.insert(0, sys.argv[4])
import tf_autopar
tf_autopar.enable(tune_live=False)
import numpy as np, tensorflow as tf
from tf_autopar.runtime import fastpath
from user_models import make_inputs
path, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]
x = make_inputs(name, 1)
sig(**x); fastpath.wait_idle(300)
paths = {"fast path (signature)": lambda: sig(**x)}
opt = tf_autopar.optimize(loaded); paths["optimize(), latency"] = lambda: opt(**x)
opt2 = tf_autopar.optimize(loaded, mode="throughput", streams=2); paths["optimize(), 2 streams"] = lambda: opt2(**x)
def hammer(fn, threads):
    counts = [0] * threads
    for _ in range(3): fn()
    stop = time.monotonic() + seconds
    def work(i):
        while time.monotonic() < stop:
            fn(); counts[i] += 1
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts: t.start()
    for t in ts: t.join()
    return counts, time.monotonic() - t0
out = {}
for label, fn in paths.items():
    one, w1 = hammer(fn, 1)
    eight, w8 = hammer(fn, 8)
    out[label] = dict(single_rate=one[0] / w1, counts=eight, rate=sum(eight) / w8,
                      lowest_share=min(eight) / max(eight) if max(eight) else 0.0)
st = [b.path for s in tf_autopar.status().served if s.function == "signatures['serving_default']" for b in s.buckets]
out["fast_path_state"] = st
print("RESULT " + json.dumps(out), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--only", default="dlrm,mobilenet_v2")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "concurrency.json"))
    args = ap.parse_args()
    data = {"host": host(), "models": {}}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(HERE), env.get("PYTHONPATH", "")) if p),
    )
    for name in args.only.split(","):
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, os.path.join(args.model_dir, name), name, str(args.seconds), HERE],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        res = next(
            (json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")),
            {"error": proc.stderr[-1500:]},
        )
        data["models"][name] = res
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
    print(f"processor: {data['host']['cpu_model']}; batch 1; 8 threads against 1 caller")
    print("| model | path | 1 caller calls/s | 8 threads calls/s | per-thread calls (min-max) | lowest share of best |")
    print("|---|---|---|---|---|---|")
    for name, res in data["models"].items():
        if "error" in res:
            print(f"| {name} | error | | | | |")
            continue
        for label, r in res.items():
            if label == "fast_path_state":
                continue
            print(
                f"| {name} | {label} | {r['single_rate']:.0f} | {r['rate']:.0f} | {min(r['counts'])}-{max(r['counts'])} | "
                f"{r['lowest_share']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
