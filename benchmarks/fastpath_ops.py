#!/usr/bin/env python
"""Where the fast path's gain comes from: the kernels each path runs, traced with the native tracer.

For each SavedModel of benchmarks/user_models.py, in one process (TF_OVERRIDE_GLOBAL_THREADPOOL=1,
TensorFlow's default process pools): the loaded ``serving_default`` signature called the usual way
(eager call of the restored function) and its frozen graph in a session (2x2, as the process), each
traced over N calls with ``tf_autopar.trace(cheap_ops=True)`` (every kernel, small ones included).
Per path: kernels per call, kernel time per call, wall time per call, and the op types whose count
changed (which ops disappear or fuse when the variables are constants and grappler can fold).

    python benchmarks/fastpath_ops.py /work/user_models --out benchmarks/results/fastpath_ops.json
    python benchmarks/fastpath_ops.py --summarise benchmarks/results/fastpath_ops.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import host, run_script  # noqa: E402
from user_models import SERVING  # noqa: E402

CHILD = r"""
import json, os, sys, time, statistics
sys.path.insert(0, sys.argv[4])
import numpy as np, tensorflow as tf, tf_autopar
from tf_autopar.runtime.frozen import FrozenGraph
from user_models import make_inputs
path, name, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]
inputs = make_inputs(name, 1)
frozen = FrozenGraph(sig)
session = frozen.open_sessions(2, 2)[0]
feeds = {t: inputs[n] for t, n in zip(frozen.inputs, sorted(inputs))}
paths = {"eager signature": lambda: sig(**inputs), "frozen session": lambda: session.run(frozen.outputs, feeds)}
out = {}
for label, run in paths.items():
    for _ in range(5):
        run()  # warm: grappler, kernel caches
for label, run in paths.items():
    walls = []
    with tf_autopar.trace(cheap_ops=True) as t:
        for _ in range(calls):
            w = time.perf_counter(); run(); walls.append(time.perf_counter() - w)
    types = {r.type: [r.count / calls, r.total_s / calls * 1e3] for r in t.by_type()}
    out[label] = {"wall_ms": statistics.median(walls) * 1e3, "kernels": sum(v[0] for v in types.values()),
                  "kernel_ms": sum(v[1] for v in types.values()), "types": types, "backend": t.backend}
print("RESULT " + json.dumps(out), flush=True)
"""


def run_model(model_dir: str, name: str, calls: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR"))}
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_OVERRIDE_GLOBAL_THREADPOOL="1",
        PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(HERE), env.get("PYTHONPATH", "")) if p),
    )
    return run_script(CHILD, [os.path.join(model_dir, name), name, str(calls), HERE], env)


def summarise(data: dict) -> str:
    lines = [
        f"processor: {data.get('cpu_model', '?')}; batch 1; per call, median wall and traced kernels",
        "",
        "| model | eager: kernels / kernel ms / wall ms | frozen: kernels / kernel ms / wall ms | "
        "gone or folded (count per call, eager -> frozen) | new in the frozen graph |",
        "|---|---|---|---|---|",
    ]
    for name, res in data["models"].items():
        if "error" in res:
            lines.append(f"| {name} | error | | | |")
            continue
        e, f = res["eager signature"], res["frozen session"]
        changed = []
        for op in sorted(set(e["types"]) | set(f["types"]), key=lambda o: -e["types"].get(o, [0])[0]):
            a, b = e["types"].get(op, [0, 0])[0], f["types"].get(op, [0, 0])[0]
            if a - b >= 1:
                changed.append(f"{op} {a:.0f}->{b:.0f}")
        new = [f"{op} {f['types'][op][0]:.0f}" for op in f["types"] if op not in e["types"]]
        lines.append(
            f"| {name} | {e['kernels']:.0f} / {e['kernel_ms']:.2f} / {e['wall_ms']:.2f} | "
            f"{f['kernels']:.0f} / {f['kernel_ms']:.2f} / {f['wall_ms']:.2f} | {', '.join(changed[:6])} | "
            f"{', '.join(new[:4])} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--only", default=None)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fastpath_ops.json"))
    ap.add_argument("--summarise", metavar="JSON")
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise, encoding="utf-8") as fh:
            print(summarise(json.load(fh)))
        return 0
    names = args.only.split(",") if args.only else list(SERVING)
    data = {"cpu_model": host()["cpu_model"], "date": time.strftime("%Y-%m-%d"), "models": {}}
    for name in names:
        data["models"][name] = run_model(args.model_dir, name, args.calls)
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        print(name, "done", flush=True)
    print(summarise(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
