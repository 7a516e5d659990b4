#!/usr/bin/env python
"""TensorFlow's CPU allocator on the path a server runs: malloc (TensorFlow's default) vs its BFC allocator.

TensorFlow's CPU allocator hands every tensor buffer to malloc and frees it after the op. Buffers
of tens of MB (a vision model's activations at batch 8) are above glibc's mmap threshold (at most
32 MB) or trimmed back to the system when freed, so every call maps them afresh and takes a page
fault per 4 KB touched: EfficientNet-B0 at batch 8 took 16,000-59,000 minor faults per call.
``TF_CPU_ALLOCATOR_USE_BFC=true``, read once when the runtime starts, makes the process's CPU
allocator TensorFlow's best-fit-with-coalescing pool, which keeps freed regions for reuse.

Per row (a benchmarks/user_models.py SavedModel at batch 1 or its serving batch), each
configuration is a fresh process: ``tf_autopar.enable(tune_live=False)`` at its top (the fast
path serves the calls once it switched; live tuning off so that only the allocator differs), the
signature called in a loop until the fast path has settled, then timed for ``--seconds``.
``malloc``: TensorFlow's default allocator, as enable() leaves it; ``bfc``: the same with the
variable set, as the fast path's advice (runtime/tf_allocator.py) tells a user to. Rounds
interleave the configurations, the order alternating per round. Reported per row: each
configuration's median latency and minor page faults per call, peak RSS, and the median of the
per-round ratios malloc / bfc (> 1: BFC faster) with their range.

    python benchmarks/bench_cpu_allocator.py MODELS_DIR --rounds 2 --json benchmarks/results/cpu_allocator_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_fastpath import host, run_script  # noqa: E402
from user_models import SERVING  # noqa: E402

VAR = "TF_CPU_ALLOCATOR_USE_BFC"
CONFIGS = ("malloc", "bfc")

CHILD = r"""
import json, os, resource, sys, time
path, name, batch, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
sys.path.insert(0, sys.argv[5])
import tf_autopar
tf_autopar.enable(tune_live=False)
import numpy as np, tensorflow as tf
from tf_autopar.runtime import fastpath
from user_models import make_inputs
sig = tf.saved_model.load(path).signatures["serving_default"]
inputs = make_inputs(name, batch)
def call():
    {k: v.numpy() for k, v in sig(**inputs).items()}
call()
deadline = time.perf_counter() + 120
while time.perf_counter() < deadline:  # until the fast path has built and checked (or kept the original)
    call()
    if fastpath.wait_idle(0.0):
        break
for _ in range(3):
    call()
lat, faults, end = [], [], time.perf_counter() + seconds
while time.perf_counter() < end or len(lat) < 5:
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    call()
    lat.append(time.perf_counter() - t0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
served = [b.path for s in tf_autopar.status().served for b in s.buckets]
hwm = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) // 1024
print("RESULT " + json.dumps(dict(median_ms=float(np.median(lat)) * 1e3, calls=len(lat),
      faults_per_call=float(np.median(faults)), peak_rss_mb=hwm, path=served[0] if served else "",
      bfc=os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", ""))), flush=True)
"""


def run_one(model_dir: str, name: str, batch: int, config: str, seconds: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR", VAR))}
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join(p for p in (str(HERE.parent), env.get("PYTHONPATH", "")) if p),
    )
    env["TF_AUTOPAR_CACHE_DIR"] = os.path.join("/tmp", f"tf_autopar_bench_cpu_allocator_{os.getpid()}")
    if config == "bfc":
        env[VAR] = "true"
    elif config == "malloc":
        env[VAR] = "false"  # the variable said: enable() keeps the user's value, whatever its default
    return run_script(CHILD, [os.path.join(model_dir, name), name, str(batch), str(seconds), str(HERE)], env)


def summarise(data: dict) -> str:
    out = [
        f"{data['processor']}, {data['cpus']} CPUs; medians of {data['rounds']} rounds",
        "",
        "| model | batch | path | malloc ms | bfc ms | malloc / bfc [range] | faults per call, malloc -> bfc | peak RSS MB, malloc -> bfc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        runs = row["runs"]
        ok = {c: [r for r in runs[c] if "median_ms" in r] for c in CONFIGS}
        if not all(ok.values()):
            out.append(f"| {row['model']} | {row['batch']} | error | | | | | |")
            continue
        med = {c: statistics.median(r["median_ms"] for r in ok[c]) for c in CONFIGS}
        ratios = [a["median_ms"] / b["median_ms"] for a, b in zip(ok["malloc"], ok["bfc"])]
        flt = {c: statistics.median(r["faults_per_call"] for r in ok[c]) for c in CONFIGS}
        rss = {c: statistics.median(r["peak_rss_mb"] for r in ok[c]) for c in CONFIGS}
        out.append(
            f"| {row['model']} | {row['batch']} | {ok['bfc'][0]['path']} | {med['malloc']:.2f} | {med['bfc']:.2f} "
            f"| {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] "
            f"| {flt['malloc']:.0f} -> {flt['bfc']:.0f} | {rss['malloc']:.0f} -> {rss['bfc']:.0f} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models_dir", nargs="?", help="the directory benchmarks/user_models.py wrote")
    p.add_argument("--only", default=",".join(SERVING), help="comma-separated model names")
    p.add_argument("--batches", default="batch1,serving", help="batch1, serving, or both")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=6.0, help="timed seconds per process")
    p.add_argument("--json", default=None, help="write the results here (after every row)")
    p.add_argument("--summarise", metavar="JSON", help="print the table of a results file and exit")
    args = p.parse_args()
    if args.summarise:
        print(summarise(json.loads(Path(args.summarise).read_text())))
        return 0
    if not args.models_dir:
        p.error("models_dir is required")
    machine = host()  # the processor (and TensorFlow version) with every figure
    data = dict(
        processor=machine["cpu_model"],
        cpus=machine["cpus"],
        host=machine,
        rounds=args.rounds,
        seconds=args.seconds,
        date=time.strftime("%Y-%m-%d"),
        rows=[],
    )
    batches = args.batches.split(",")
    for name in args.only.split(","):
        for which in batches:
            batch = SERVING[name][which]
            row = dict(model=name, batch=batch, runs={c: [] for c in CONFIGS})
            data["rows"].append(row)
            for r in range(args.rounds):
                for config in CONFIGS if r % 2 == 0 else CONFIGS[::-1]:
                    res = run_one(args.models_dir, name, batch, config, args.seconds)
                    row["runs"][config].append(res)
                    print(
                        name,
                        batch,
                        config,
                        {k: res.get(k) for k in ("median_ms", "faults_per_call", "path", "error")},
                        flush=True,
                    )
            if args.json:
                Path(args.json).write_text(json.dumps(data, indent=1))
    print(summarise(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
