#!/usr/bin/env python
"""Does a candidate session built beside a serving one measure slow? (docs/tuning.md)

Live tuning on AMD EPYC measured newly built candidate sessions slower than the serving one
where an in-process sweep, all sessions built up front, had them faster (Xception at batch 1:
1x2 lost to 2x2 at 0.85x over 6 pairs, the sweep had it 10% ahead). This separates the two
ways a candidate can meet the incumbent, each in fresh processes, alternated:

- ``live``: the incumbent serves a loop of calls while the candidate's session is opened on
  another thread and its first run (grappler) goes through the niced build thread
  (runtime/lowprio.py), as live tuning builds it; then both alternate;
- ``upfront``: both sessions are built and run once before any timed call, as the sweep does.

Both then alternate blocks of 4 calls, the first of each untimed, and pair each candidate call
with the incumbent's at the same place of the block before (live tuning's pairs), then blocks
of 8 with 2 dropped (the sweep's blocks). Reported: the median candidate/incumbent ratio over
the first, middle and last third of the live-style blocks, and over the sweep-style ones; a
candidate that is slow only while new shows as a first third above the last.

    python benchmarks/bench_candidate_bias.py /work/models --model xception --batch 1 \\
        --candidate 1x2 --incumbent 2x2 --runs 2 --out benchmarks/results/candidate_bias_xeon.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import child_env, host, run_script  # noqa: E402

CHILD = r"""
import json, statistics, sys, threading, time
mode, path, name, batch, cand, inc, n_live, n_sweep = sys.argv[1:9]
sys.path.insert(0, sys.argv[9])
import tf_autopar
tf_autopar.enable(optimize=False)  # the process pools enable() plans, no fast path of its own
import tensorflow as tf
from user_models import make_inputs
from tf_autopar.runtime.frozen import FrozenGraph
from tf_autopar.runtime.lowprio import run_low

inputs = make_inputs(name, int(batch))
frozen = FrozenGraph(tf.saved_model.load(path).signatures["serving_default"])
feeds = {t: inputs[n] for t, n in zip(frozen.inputs, sorted(inputs))}
key = lambda s: tuple(int(x) for x in s.split("x"))
s_inc = frozen.open_sessions(*key(inc))[0]
run_inc = lambda: s_inc.run(frozen.outputs, feeds)
run_inc()
box = {}
def build():
    s = frozen.open_sessions(*key(cand))[0]
    (run_low if mode == "live" else lambda f, *a: f(*a))(s.run, frozen.outputs, feeds)
    box["s"] = s
t0, served = time.perf_counter(), 0
if mode == "live":
    th = threading.Thread(target=build); th.start()
    while th.is_alive():
        run_inc(); served += 1
    th.join()
else:
    build()
build_s = time.perf_counter() - t0
run_cand = lambda: box["s"].run(frozen.outputs, feeds)
def blocks(n, size, drop):
    out = []
    for i in range(n):
        for who, run in (("inc", run_inc), ("cand", run_cand)):
            for k in range(size):
                t = time.perf_counter(); run(); dt = time.perf_counter() - t
                if k >= drop:
                    out.append((i, who, k, dt))
    return out
a, b = blocks(int(n_live), 4, 1), blocks(int(n_sweep), 8, 2)
def ratios(rec):
    incs = {(i, k): t for i, w, k, t in rec if w == "inc"}
    return [(i, t / incs[(i, k)]) for i, w, k, t in rec if w == "cand" and (i, k) in incs]
med = lambda xs: statistics.median(xs) if xs else float("nan")
ra, n = ratios(a), int(n_live)
third = max(1, n // 3)
print("RESULT " + json.dumps(dict(
    mode=mode, build_s=build_s, served_during_build=served,
    first=med([r for i, r in ra if i < third]), middle=med([r for i, r in ra if third <= i < 2 * third]),
    last=med([r for i, r in ra if i >= 2 * third]), sweep=med([r for _, r in ratios(b)]),
    incumbent_ms=med([t for _, w, _, t in a if w == "inc"]) * 1e3,
    candidate_ms=med([t for _, w, _, t in a if w == "cand"]) * 1e3,
    per_block=[round(med([r for i, r in ra if i == j]), 3) for j in range(n)])), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--model", default="xception")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--candidate", default="1x2")
    ap.add_argument("--incumbent", default="2x2")
    ap.add_argument("--blocks", type=int, default=24, help="live-style blocks of 4 per setting")
    ap.add_argument("--sweep-blocks", type=int, default=6, help="sweep-style blocks of 8 per setting")
    ap.add_argument("--runs", type=int, default=2, help="runs of each mode, alternated")
    ap.add_argument("--out")
    args = ap.parse_args()
    env = child_env()
    rows, start = [], time.time()
    for run in range(args.runs):
        for mode in ("live", "upfront"):
            argv = [mode, os.path.join(args.model_dir, args.model), args.model, str(args.batch), args.candidate]
            argv += [args.incumbent, str(args.blocks), str(args.sweep_blocks), HERE]
            res = run_script(CHILD, argv, env)
            res["run"] = run
            rows.append(res)
            if "error" in res:
                print(f"{mode}: error {res['error'][-300:]}")
                continue
            print(
                f"{mode:8s} run {run}: candidate/incumbent, live-style blocks first/middle/last third "
                f"{res['first']:.3f}/{res['middle']:.3f}/{res['last']:.3f}, sweep-style {res['sweep']:.3f} "
                f"({res['candidate_ms']:.1f} against {res['incumbent_ms']:.1f} ms; built in {res['build_s']:.1f} s)"
            )
    out = dict(
        host=host(),
        model=args.model,
        batch=args.batch,
        candidate=args.candidate,
        incumbent=args.incumbent,
        rows=rows,
        command=" ".join(sys.argv),
        wall_s=round(time.time() - start, 1),
    )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
