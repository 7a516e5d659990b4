#!/usr/bin/env python
"""Paired A/B of the allocator `tf-autopar run --allocator` preloads: glibc malloc vs jemalloc vs tcmalloc.

Per model (benchmarks/user_models.py SavedModels, batch 1), each configuration is a fresh
process started by ``tf-autopar run --allocator A -- python bench_allocator.py --child MODEL``
(the launcher's plan for the host, the model's ``serving_default`` called in a loop on TensorFlow's
own path, as a server the launcher starts without code changes runs it); rounds interleave the
allocators, the order rotating per round. Reported per model and allocator: the median latency over
rounds, and the median of the per-round paired ratios (glibc / allocator, > 1 = faster) with their
range. An allocator is worth recommending for a model only where every round's ratio is above 1.

    python benchmarks/bench_allocator.py --models-dir /tmp/models --rounds 3 --json benchmarks/results/allocator.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
ALLOCATORS = ("default", "jemalloc", "tcmalloc")


def child(model_dir: str, name: str, seconds: float) -> None:
    import numpy as np
    import tensorflow as tf

    from user_models import make_inputs

    fn = tf.saved_model.load(model_dir).signatures["serving_default"]
    inputs = {k: tf.constant(v) for k, v in make_inputs(name, 1).items()}
    for _ in range(20):
        [v.numpy() for v in fn(**inputs).values()]
    lat, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        [v.numpy() for v in fn(**inputs).values()]
        lat.append(time.perf_counter() - t0)
    rss = int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) // 1024
    print(
        "RESULT "
        + json.dumps(
            {
                "median_ms": float(np.median(lat)) * 1e3,
                "calls": len(lat),
                "peak_rss_mb": rss,
                "ld_preload": os.environ.get("LD_PRELOAD", ""),
            }
        ),
        flush=True,
    )


def one(model_dir: str, name: str, allocator: str, seconds: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "LD_PRELOAD"))}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [
        sys.executable,
        "-m",
        "tf_autopar.cli.main",
        "run",
        "--allocator",
        allocator,
        "--",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--model-dir",
        model_dir,
        "--seconds",
        str(seconds),
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{name} {allocator}: {out.stderr[-2000:]}")
    return json.loads(lines[-1][7:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models-dir", default="/tmp/tf_autopar_bench_http_models")
    p.add_argument("--models", default="mobilenet_v2,dlrm")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--json", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.model_dir, args.child, args.seconds)
        return 0
    from bench_http import processor

    runs = []
    for r in range(args.rounds):
        order = ALLOCATORS[r % 3 :] + ALLOCATORS[: r % 3]
        for name in args.models.split(","):
            for a in order:
                res = one(str(Path(args.models_dir) / name), name, a, args.seconds)
                runs.append(dict(res, model=name, allocator=a, round=r))
                print(
                    f"round {r + 1} {name} {a}: {res['median_ms']:.2f} ms ({res['calls']} calls, "
                    f"peak RSS {res['peak_rss_mb']} MB)",
                    flush=True,
                )
    rows = []
    for name in args.models.split(","):
        base = {x["round"]: x["median_ms"] for x in runs if x["model"] == name and x["allocator"] == "default"}
        for a in ALLOCATORS:
            mine = {x["round"]: x for x in runs if x["model"] == name and x["allocator"] == a}
            ratios = [base[k] / mine[k]["median_ms"] for k in mine]
            row = {
                "model": name,
                "allocator": a,
                "median_ms": statistics.median(x["median_ms"] for x in mine.values()),
                "peak_rss_mb": statistics.median(x["peak_rss_mb"] for x in mine.values()),
                "speedup": [statistics.median(ratios), min(ratios), max(ratios)],
                "wins_every_round": a != "default" and min(ratios) > 1.0,
            }
            rows.append(row)
            print(
                f"{name:14s} {a:9s} {row['median_ms']:8.2f} ms  x{row['speedup'][0]:.2f} "
                f"[{row['speedup'][1]:.2f}-{row['speedup'][2]:.2f}]  RSS {row['peak_rss_mb']} MB"
            )
    from tf_autopar.graph import analyze  # the graph fingerprint allocator.MEASURED is keyed by

    fingerprints = {
        name: analyze(str(Path(args.models_dir) / name), batch=1).fingerprint for name in args.models.split(",")
    }
    doc = {
        "processor": processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "args": vars(args),
        "rows": rows,
        "fingerprints": fingerprints,
        "runs": runs,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
