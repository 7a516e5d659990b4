#!/usr/bin/env python
"""What the requests pay while the fast path builds: the calls the original path answers from
the first call until the frozen session takes over, against TensorFlow alone in the same seconds.

A server-style program per process: a SavedModel of ``benchmarks/user_models.py`` loaded, its
``serving_default`` called back to back for ``--seconds``, with ``tf_autopar.enable()`` at its
top (an empty cache of its own) or without it (``default``). Each ``--root`` is a checkout whose
tf_autopar the enabled processes import, so two versions are compared in one run: one fresh
process per arm, model and round, the arms' order rotating each round. Per enabled process:
the calls before the first one the fast path served (their median, 90th percentile and largest,
in ms), and when that first served call came; for ``default``, its calls in the same seconds
(the median of the enabled arms' switch times). The first call of every process (tracing) is
left out of both.

    python benchmarks/build_window.py /work/user_models --rows bert_encoder:16,efficientnet_b0:8 \\
        --root before=/path/to/old/checkout --root after=. --rounds 3 \\
        --out benchmarks/results/build_window_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import child_env, host, run_script  # noqa: E402

from tf_autopar.measure.stats import median, quantile  # noqa: E402  (pure, no TF)

CHILD = r"""
import json, os, sys, time
path, name, batch, seconds, here, enable = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6] == "1"
sys.path.insert(0, here)
if enable:
    import tf_autopar
    tf_autopar.enable()
import tensorflow as tf
from user_models import make_inputs
sig = tf.saved_model.load(path).signatures["serving_default"]
inputs = make_inputs(name, batch)
served = lambda: 0
if enable:
    from tf_autopar.runtime import fastpath
    served = lambda: sum(b.served for f in list(fastpath._served) for b in list(f.buckets.values()))
calls, start = [], time.perf_counter()
while time.perf_counter() - start < seconds:
    before = served()
    t = time.perf_counter()
    [v.numpy() for v in sig(**inputs).values()]
    calls.append((round(t - start, 4), round((time.perf_counter() - t) * 1e3, 3), served() > before))
root = None
if enable:
    import tf_autopar
    root = os.path.dirname(os.path.dirname(os.path.abspath(tf_autopar.__file__)))
print("RESULT " + json.dumps({"calls": calls, "root": root}))
"""


def summary(calls: list[list], until: float | None) -> dict:
    """The calls before the first the fast path served (or before ``until`` seconds), the first left out."""
    first_fast = next((s for s, _, fast in calls if fast), None)
    end = until if until is not None else first_fast
    ms = [m for s, m, fast in calls[1:] if (end is None or s < end) and not fast]
    out = {"switched_at_s": first_fast, "calls": len(ms)}
    if ms:
        out.update(median_ms=median(ms), p90_ms=quantile(ms, 0.9), max_ms=max(ms))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--rows", required=True, help="comma-separated model:batch")
    ap.add_argument(
        "--root", action="append", required=True, help="NAME=checkout whose tf_autopar an enabled arm imports"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "build_window.json"))
    args = ap.parse_args()
    roots = dict(r.split("=", 1) for r in args.root)
    arms = ["default", *roots]
    out = {"host": host(), "command": " ".join(sys.argv), "roots": roots, "rows": []}
    print(f"processor: {out['host']['cpu_model']} ({out['host']['cpus']} CPUs); TensorFlow {out['host']['tf_version']}")
    for row in args.rows.split(","):
        name, batch = row.split(":")
        runs: dict[str, list[dict]] = {a: [] for a in arms}
        for r in range(args.rounds):
            order = arms[r % len(arms) :] + arms[: r % len(arms)]
            for arm in order:
                env = child_env(root=roots.get(arm))
                env["TF_AUTOPAR_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfa-window-")
                env["TF_AUTOPAR_FAST_PATH_DIR"] = tempfile.mkdtemp(prefix="tfa-window-fp-")
                res = run_script(
                    CHILD,
                    [
                        os.path.join(args.model_dir, name),
                        name,
                        batch,
                        str(args.seconds),
                        HERE,
                        "0" if arm == "default" else "1",
                    ],
                    env,
                )
                res.update(arm=arm, round=r)
                runs[arm].append(res)
        switch = [
            s["switched_at_s"] for a in roots for s in (summary(x["calls"], None) for x in runs[a] if "calls" in x)
        ]
        until = median(s for s in switch if s is not None) if any(s is not None for s in switch) else None
        row_out = {"model": name, "batch": int(batch), "runs": runs, "default_until_s": until, "summary": {}}
        for arm in arms:
            sums = [summary(x["calls"], until if arm == "default" else None) for x in runs[arm] if "calls" in x]
            row_out["summary"][arm] = sums
            cells = "; ".join(
                f"{s.get('median_ms', 0):.1f}/{s.get('p90_ms', 0):.1f}/{s.get('max_ms', 0):.0f} ms ({s['calls']} calls"
                + (f", switch {s['switched_at_s']:.1f} s)" if arm != "default" and s["switched_at_s"] else ")")
                for s in sums
            )
            print(f"{name} b{batch} {arm:>8}: median/p90/max per round: {cells}", flush=True)
        out["rows"].append(row_out)
        with open(args.out, "w") as fh:
            json.dump(out, fh)
    out["load_average_at_end"] = round(os.getloadavg()[0], 2)
    with open(args.out, "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
