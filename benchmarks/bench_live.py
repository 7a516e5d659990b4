#!/usr/bin/env python
"""Live tuning as a server meets it: ``enable()`` alone, an empty cache, requests in a loop.

Per SavedModel of benchmarks/user_models.py and batch, fresh processes, one after the other:

- ``live``: a server-style loop (``signatures["serving_default"]``, numpy in and out) with only
  ``enable()``, until live tuning has tried every neighbour of the plan (or ``--limit`` seconds):
  how long it took from the first request, the p99 while tuning against the default's p99, the
  setting it ended on;
- ``default``: the same loop on TensorFlow alone (the eager signature), for the p99;
- ``frozen-sweep`` (bench_fastpath.py's): every per-session (inter, intra) pair of this host on the
  frozen graph in one process, interleaved, and the original path under the process pools enable()
  plans (``original``: what a bucket serves when no frozen session passes its switch check): the
  exhaustive in-process best, and the time of the setting live tuning chose, measured in the same sweep;
- ``second``: a second start on the cache the live run left: the setting it serves from its
  first call, and whether that call was the frozen session's;
- ``--three-starts``: for a row whose first start finds malloc faulting (the fast path then sets
  TF_CPU_ALLOCATOR_USE_BFC=true at the next start and tunes again under it): the second start runs
  live tuning to its end (``second_tune``), a third start is the ``second`` above, and the default
  and the sweep run under the BFC pool, the allocator the served process ended on; the row's
  figures are the second start's;
- ``live-nice0`` (``--nice-ab``): the live run again with TF_AUTOPAR_BUILD_NICE=0, the builds at
  the requests' priority as before runtime/lowprio.py, for the p99 while tuning before/after.

    python benchmarks/bench_live.py /work/user_models --out benchmarks/results/live.json
    python benchmarks/bench_live.py --summarise benchmarks/results/live.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import PAIRS, host, run_child, run_script  # noqa: E402
from user_models import SERVING  # noqa: E402

LIVE = r"""
import json, sys, time
path, name, batch, limit = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
sys.path.insert(0, sys.argv[5])
import tf_autopar
tf_autopar.enable()
import numpy as np, tensorflow as tf
from user_models import make_inputs
loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]
inputs = make_inputs(name, batch)
def bucket():
    for s in tf_autopar.status().served:
        if s.function == "signatures['serving_default']" and s.buckets:
            return s.buckets[0]
    return None
times, stamps, phases = [], [], []
first_key, done_at, start = None, None, time.perf_counter()
b0 = bucket()
loaded_key = [b0.inter_op, b0.intra_op] if b0 is not None and b0.path == "frozen session" else None
while time.perf_counter() - start < limit:
    t = time.perf_counter()
    {k: v.numpy() for k, v in sig(**inputs).items()}
    times.append(time.perf_counter() - t); stamps.append(t - start)
    b = bucket()
    phase = "original" if b is None or b.path != "frozen session" else ("tuning" if not b.tuning.startswith("tuned live") else "tuned")
    phases.append(phase)
    if phase == "tuned" and done_at is None:
        done_at = time.perf_counter() - start
    if done_at is not None and time.perf_counter() - start > done_at + 5:
        break
b = bucket()
from tf_autopar.runtime import fastpath  # what each trial found, in order (the status says only the outcome)
tried = [t for s in list(fastpath._served) for x in s.buckets.values() for t in x.tried]
print("RESULT " + json.dumps(dict(tried=tried, times_ms=[x * 1e3 for x in times], stamps_s=stamps, phases=phases, done_s=done_at,
      key=[b.inter_op, b.intra_op] if b and b.path == "frozen session" else None, path=b.path if b else None,
      tuning=b.tuning if b else "", loaded_key=loaded_key,
      first_frozen=bool(b) and b.served > 0 and phases[0] != "original", status=tf_autopar.status().text())), flush=True)
"""


def run_live(model_dir: str, name: str, batch: int, limit: float, cache: str, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    env.update(extra or {})
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_AUTOPAR_CACHE_DIR=cache,
        PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(HERE), env.get("PYTHONPATH", "")) if p),
    )
    return run_script(LIVE, [os.path.join(model_dir, name), name, str(batch), str(limit), HERE], env)


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else float("nan")


def row_summary(row: dict) -> dict:
    live, default, sweep, second = (
        row.get("live", {}),
        row.get("default", {}),
        row.get("sweep", {}),
        row.get("second", {}),
    )
    out = {"model": row["model"], "batch": row["batch"]}
    if "error" in live or "error" in sweep:
        out["error"] = (live.get("error") or sweep.get("error") or "")[-300:]
        return out
    tuning = [t for t, ph in zip(live["times_ms"], live["phases"]) if ph == "tuning"]
    out["done_s"] = live.get("done_s")
    out["p99_tuning"] = _p(tuning, 0.99)
    first30 = [t for t, st in zip(live["times_ms"], live["stamps_s"]) if st <= 30]
    out["p99_first30"] = _p(first30, 0.99)
    nice0 = row.get("live_nice0")
    if nice0 and "error" not in nice0:
        out["nice0_done_s"] = nice0.get("done_s")
        out["nice0_p99_tuning"] = _p([t for t, ph in zip(nice0["times_ms"], nice0["phases"]) if ph == "tuning"], 0.99)
        out["nice0_p99_first30"] = _p([t for t, st in zip(nice0["times_ms"], nice0["stamps_s"]) if st <= 30], 0.99)
    dflt = default.get("times_ms", [])
    out["p99_default_first30"] = _p(dflt[: max(1, len(first30))], 0.99) if dflt else float("nan")
    out["p99_default"] = _p(default.get("times_ms", []), 0.99)
    out["p50_default"] = _p(default.get("times_ms", []), 0.5)
    ms = sweep["sweep_ms"]
    best = min(ms, key=ms.get)
    chosen = f"{live['key'][0]}x{live['key'][1]}" if live.get("key") else "original"
    out.update(
        best=best,
        best_ms=ms[best],
        chosen=chosen,
        chosen_ms=ms.get(chosen, float("nan")),
        share=ms[best] / ms[chosen] if chosen in ms else float("nan"),
        tuning=live.get("tuning", ""),
    )
    # the share's spread: the same ratio per rotation of the sweep (older results have no rounds)
    per_round = sorted(
        r[best] / r[chosen] for r in sweep.get("sweep_rounds_ms", []) if chosen in r and best in r and r[chosen] > 0
    )
    if per_round:
        out["share_q"] = (_p(per_round, 0.25), _p(per_round, 0.75), len(per_round))
    out["second_key"] = second.get("loaded_key")
    out["second_first_frozen"] = second.get("first_frozen")
    return out


def _quartiles(r: dict) -> str:
    q = r.get("share_q")
    return f" [{q[0]:.2f}-{q[1]:.2f}, {q[2]} rotations]" if q else ""


def summarise(data: dict) -> str:
    h = data["host"]
    lines = [
        f"processor: {h['cpu_model']} ({h['cpus']} CPUs); TensorFlow {h['tf_version']}; {h['date']}",
        "share = the in-process sweep's best time / its time for the setting live tuning chose (same process);"
        " [quartiles] of that ratio over the sweep's rotations, where recorded",
        "",
        "| model | batch | tuned after s | p99 while tuning ms | default p99 ms | chosen | best in sweep | "
        "share of best | 2nd start serves | 2nd start 1st call frozen |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in (row_summary(x) for x in data["rows"]):
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | error: {r['error'][:80]} | | | | | | | |")
            continue
        done = f"{r['done_s']:.1f}" if r.get("done_s") is not None else "not within the limit"
        second = f"{r['second_key'][0]}x{r['second_key'][1]}" if r.get("second_key") else "-"
        lines.append(
            f"| {r['model']} | {r['batch']} | {done} | {r['p99_tuning']:.1f} | {r['p99_default']:.1f} | "
            f"{r['chosen']} ({r['chosen_ms']:.2f} ms) | {r['best']} ({r['best_ms']:.2f} ms) | {r['share']:.2f}{_quartiles(r)} | "
            f"{second} | {'yes' if r.get('second_first_frozen') else 'no'} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--only", default=None)
    ap.add_argument("--batches", default="batch1,serving")
    ap.add_argument("--limit", type=float, default=90.0, help="longest a live run feeds requests")
    ap.add_argument("--seconds", type=float, default=15.0, help="default's and the sweep's traffic")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "live.json"))
    ap.add_argument("--summarise", metavar="JSON")
    ap.add_argument("--nice-ab", action="store_true", help="also a live run with TF_AUTOPAR_BUILD_NICE=0")
    ap.add_argument("--three-starts", action="store_true", help="the BFC flow: tune, restart and tune, restart")
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise, encoding="utf-8") as fh:
            print(summarise(json.load(fh)))
        return 0
    if not args.model_dir or not os.path.isdir(args.model_dir):
        ap.error("give the directory written by benchmarks/user_models.py")
    names = args.only.split(",") if args.only else list(SERVING)
    data = {"host": host(), "rows": [], "command": " ".join(sys.argv), "pairs": list(PAIRS)}
    t0 = time.time()
    for name in names:
        for which in args.batches.split(","):
            row = {"model": name, "batch": SERVING[name][which]}
            with tempfile.TemporaryDirectory(prefix="tfa_live_") as cache:
                row["live"] = run_live(args.model_dir, name, row["batch"], args.limit, cache)
                if args.nice_ab:
                    with tempfile.TemporaryDirectory(prefix="tfa_live0_") as cache0:
                        row["live_nice0"] = run_live(
                            args.model_dir, name, row["batch"], args.limit, cache0, {"TF_AUTOPAR_BUILD_NICE": "0"}
                        )
                bfc = None
                if args.three_starts:
                    row["first_live"] = row["live"]  # under malloc: counts the faults, remembers them
                    row["live"] = row["second_tune"] = run_live(args.model_dir, name, row["batch"], args.limit, cache)
                    row["bfc"] = "TF_CPU_ALLOCATOR_USE_BFC=true" in row["live"].get("status", "")
                    bfc = {"TF_CPU_ALLOCATOR_USE_BFC": "true"} if row["bfc"] else None
                row["default"] = run_child(
                    "default", args.model_dir, name, row["batch"], args.seconds, cache, extra_env=bfc
                )
                row["sweep"] = run_child(
                    "frozen-sweep",
                    args.model_dir,
                    name,
                    row["batch"],
                    args.seconds,
                    cache,
                    (*PAIRS, "original"),
                    extra_env=bfc,
                )
                row["second"] = run_live(args.model_dir, name, row["batch"], 3.0, cache)
            data["rows"].append(row)
            data["wall_s"] = round(time.time() - t0, 1)
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            s = row_summary(row)
            print(f"{name} b{row['batch']}: {s}", flush=True)
    print(summarise(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
