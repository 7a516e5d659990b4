"""How long an embedding look-up takes per element read, against a multiply-add, on this host.

Why: on an OpenMP build, embedding look-ups (GatherV2 on a table) run on TensorFlow's own
intra-op pool, while matrix multiplies and convolutions run on oneDNN's OpenMP teams. Whether
TensorFlow's pool deserves more than one thread depends on how much of a step the look-ups
take, which the planner estimates from the graph: elements read by look-ups and multiply-adds
of the rest (graph/work.py), weighted by this ratio. It is measured here on one thread of
each kind, apart from any model, so the ratio is not fitted on the rows it is judged on.

Each kernel runs in fresh processes with TF_NUM_INTRAOP_THREADS=1, TF_NUM_INTEROP_THREADS=1
and OMP_NUM_THREADS=1: GatherV2 of B random rows from tables of R x D float32 (random rows:
a serving batch of users or items), and MatMul of (M x K) @ (K x N); the median of --repeats
timed calls after warm-up. A call also pays a fixed cost (the function call, the copy out),
so the cost per element and per multiply-add are slopes between two sizes of the same kernel
(gathers of 2048 and 16384 rows from one table; matmuls of 16.8 M and 268 M multiply-adds).

    python benchmarks/lookup_cost.py --out benchmarks/results/lookup_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _host import processor as cpu_name  # noqa: E402

CHILD = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
spec = json.loads(sys.argv[1]); rng = np.random.default_rng(0); out = {}
def timed(fn, repeats):
    for _ in range(3): fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return float(np.median(ts))
for rows, dim, batch in spec["gathers"]:
    table = tf.constant(rng.standard_normal((rows, dim), dtype=np.float32))
    ids = tf.constant(rng.integers(0, rows, size=batch), dtype=tf.int64)
    f = tf.function(lambda: tf.gather(table, ids))
    s = timed(lambda: f().numpy(), spec["repeats"])
    out[f"gather {rows}x{dim} rows {batch}"] = {"s": s, "elements": batch * dim, "ns_per_element": s / (batch * dim) * 1e9}
for m, k, n in spec["matmuls"]:
    a = tf.constant(rng.standard_normal((m, k), dtype=np.float32)); b = tf.constant(rng.standard_normal((k, n), dtype=np.float32))
    f = tf.function(lambda: tf.matmul(a, b))
    s = timed(lambda: f().numpy(), spec["repeats"])
    out[f"matmul {m}x{k}x{n}"] = {"s": s, "macs": m * k * n, "ns_per_mac": s / (m * k * n) * 1e9}
print(json.dumps({"tf": tf.__version__, "results": out}))
"""


def _slope(runs: list[dict], small: str, big: str, unit: str) -> list[float]:
    """Per process: nanoseconds per unit between two sizes of one kernel (the fixed cost cancels)."""
    out = []
    for r in runs:
        a, b = r["results"][small], r["results"][big]
        out.append((b["s"] - a["s"]) / (b[unit] - a[unit]) * 1e9)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--processes", type=int, default=3, help="fresh processes (medians are taken over them)")
    ap.add_argument("--out", help="write the JSON here")
    args = ap.parse_args()
    spec = {
        "repeats": args.repeats,
        "gathers": [[1000, 32, 2048], [100000, 32, 2048], [100000, 32, 16384], [30522, 256, 2048]],
        "matmuls": [[2048, 512, 256], [2048, 256, 32], [16, 256, 1024]],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "OMP_", "MKL_", "KMP_"))}
    env.update(
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    runs = []
    t0 = time.time()
    for _ in range(args.processes):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(spec)], env=env, capture_output=True, text=True, timeout=600
        )
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    names = list(runs[0]["results"])
    summary = {}
    for name in names:
        key = "ns_per_element" if name.startswith("gather") else "ns_per_mac"
        vals = sorted(r["results"][name][key] for r in runs)
        summary[name] = {key: vals[len(vals) // 2], "min": vals[0], "max": vals[-1]}
    per_element = _slope(runs, "gather 100000x32 rows 2048", "gather 100000x32 rows 16384", "elements")
    per_mac = _slope(runs, "matmul 2048x256x32", "matmul 2048x512x256", "macs")
    ratios = sorted(e / m for e, m in zip(per_element, per_mac))
    result = {
        "cpu": cpu_name(),
        "tf": runs[0]["tf"],
        "python": platform.python_version(),
        "threads": "1 TF intra-op, 1 inter-op, 1 OpenMP",
        "processes": args.processes,
        "repeats": args.repeats,
        "wall_s": round(time.time() - t0, 1),
        "kernels": summary,
        "ns_per_element": sorted(per_element),
        "ns_per_mac": sorted(per_mac),
        "element_to_mac": {"median": ratios[len(ratios) // 2], "min": ratios[0], "max": ratios[-1]},
    }
    for name, v in summary.items():
        key = "ns_per_element" if name.startswith("gather") else "ns_per_mac"
        print(f"{name:32s} {v[key]:8.4f} {key} with the call's fixed cost [{v['min']:.4f}-{v['max']:.4f}]")
    ratio = result["element_to_mac"]
    print(
        f"slopes: {statistics.median(per_element):.3f} ns per element read, {statistics.median(per_mac):.4f} ns per "
        f"multiply-add: one element costs {ratio['median']:.0f} multiply-adds [{ratio['min']:.0f}-{ratio['max']:.0f} "
        f"over {len(runs)} processes] ({result['cpu']}, TF {result['tf']})"
    )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
