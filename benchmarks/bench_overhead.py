#!/usr/bin/env python
"""The fast path's own cost per served call: a routed call against its bare engine runner.

For each case, in one fresh process per case (``enable()``, an empty plan cache, live tuning off,
the switch forced with ``rules.SWITCH_RATIO = inf``: what is measured is the request path, not the
switch), once the bucket serves from its frozen session: blocks of ``--block`` calls of the
routed call (what a user writes) and of the bare runner (``fn.pools[key].run(arrays)``, the
frozen session alone with the same arrays), interleaved for ``--seconds``; per block the mean
time per call. The overhead is the median over block pairs of (routed - bare), with the 10th
and 90th percentiles of those differences as its spread.

    python benchmarks/bench_overhead.py --out benchmarks/results/overhead_epyc.json
    python benchmarks/bench_overhead.py --profile dlrm   # cProfile of the routed calls
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402

MODELS = os.environ.get("TF_AUTOPAR_USER_MODELS", "/work/user_models")
# name: (model path under MODELS, how it is called, batch)
CASES = {
    "dlrm": ("dlrm", "signature", 64),
    "tiny_mlp": ("tiny_mlp", "signature", 1),
    "tiny_mlp.keras call": ("tiny_mlp.keras", "keras call", 1),
    "tiny_mlp.keras predict_on_batch": ("tiny_mlp.keras", "keras predict_on_batch", 1),
}

CHILD = r"""
import json, sys, time
path, how, batch, seconds, block, profile = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
import tf_autopar
tf_autopar.enable()
import numpy as np, tensorflow as tf
from tf_autopar.runtime import fastpath
from tf_autopar.runtime.fastpath import roster, rules
from tf_autopar.runtime.fastpath.routing.arrays import synthetic
rules.SWITCH_RATIO = float("inf")
if how.startswith("keras"):
    import keras
    model = keras.models.load_model(path)
    fn = next(s for s in roster._all() if s.kind == how)
    arrays = [synthetic(spec, batch) for _, spec in fn.specs]
    entry = model if how == "keras call" else model.predict_on_batch
    call = (lambda: entry(arrays[0])) if len(arrays) == 1 else (lambda: entry(list(arrays)))
else:
    loaded = tf.saved_model.load(path)
    sig = loaded.signatures["serving_default"]
    fn = next(s for s in roster._all() if s.name == "signatures['serving_default']")
    arrays = [synthetic(spec, batch) for _, spec in fn.specs]
    kwargs = {n: a for (n, _), a in zip(fn.specs, arrays)}
    call = lambda: sig(**kwargs)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    call()
    fastpath.wait_idle(60)
    b = fn.buckets.get(rules.bucket_of(batch))
    if b is not None and b.state.value == "frozen session":
        break
else:
    print(json.dumps({"error": "never switched"})); sys.exit(0)
runner = fn.pools[b.key]
bare = lambda: runner.run(arrays)
for _ in range(200):
    call(); bare()
if profile:
    import cProfile, pstats, io
    pr = cProfile.Profile(); pr.enable()
    for _ in range(3000): call()
    pr.disable(); out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25); print(out.getvalue(), file=sys.stderr)
routed, plain = [], []
end = time.monotonic() + seconds
while time.monotonic() < end:
    for f, acc in ((call, routed), (bare, plain)):
        t0 = time.perf_counter()
        for _ in range(block): f()
        acc.append((time.perf_counter() - t0) / block)
served = b.served
print(json.dumps({"routed_s": routed, "bare_s": plain, "served": served, "key": list(b.key), "path": b.state.value}))
"""


# Where a routed call's time goes (tiny_mlp, signature by keyword): the pieces alone and after a
# bare run, in blocks of 200, rounds interleaved; median and 10th percentile per piece.
DECOMPOSE = r"""
import json, statistics, time
import tf_autopar
tf_autopar.enable()
import numpy as np, tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import ops
from tf_autopar.runtime import fastpath
from tf_autopar.runtime.fastpath import roster, rules
from tf_autopar.runtime.fastpath.routing.arrays import as_tensors, synthetic
rules.SWITCH_RATIO = float("inf")
import sys
loaded = tf.saved_model.load(sys.argv[1])
sig = loaded.signatures["serving_default"]
fn = next(s for s in roster._all() if s.name == "signatures['serving_default']")
arrays = [synthetic(spec, 1) for _, spec in fn.specs]
kwargs = {n: a for (n, _), a in zip(fn.specs, arrays)}
for _ in range(5):
    sig(**kwargs); fastpath.wait_idle(60)
b = fn.buckets[1]
runner, st = fn.pools[b.key], fn.frozen.structure
outs = runner.run(arrays)
dev = context.context().device_name
cases = {
    "bare runner": lambda: runner.run(arrays),
    "routed call": lambda: sig(**kwargs),
    "match (inputs checked)": lambda: fn.matched((), kwargs),
    "outputs as tensors, alone": lambda: as_tensors(st, outs),
    "bare runner + outputs as tensors": lambda: as_tensors(st, runner.run(arrays)),
    "bare runner + EagerTensor of an earlier output": lambda: (runner.run(arrays), ops.EagerTensor(outs[0], dev)),
    "bare runner + numpy copy of an earlier output": lambda: (runner.run(arrays), outs[0].copy()),
}
res = {k: [] for k in cases}
for _ in range(25):
    for k, f in cases.items():
        t0 = time.perf_counter()
        for _ in range(200):
            f()
        res[k].append((time.perf_counter() - t0) / 200 * 1e6)
print(json.dumps({k: {"median_us": round(statistics.median(v), 1), "p10_us": round(sorted(v)[2], 1)} for k, v in res.items()}))
"""


def decompose() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR", "OMP_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p),
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_AUTOPAR_TUNE_LIVE="0",
        TF_AUTOPAR_CACHE_DIR=tempfile.mkdtemp(prefix="tfa_overhead_"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", DECOMPOSE, os.path.join(MODELS, "tiny_mlp")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": proc.stderr[-2000:]}


def run_case(name: str, seconds: float, block: int, profile: bool) -> dict:
    model, how, batch = CASES[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR", "OMP_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p),
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_AUTOPAR_TUNE_LIVE="0",
        TF_AUTOPAR_CACHE_DIR=tempfile.mkdtemp(prefix="tfa_overhead_"),
    )
    args = [os.path.join(MODELS, model), how, str(batch), str(seconds), str(block), "1" if profile else ""]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, timeout=900)
    if profile:
        print(proc.stderr[-6000:])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr[-2000:]}
    res = json.loads(lines[-1])
    if "error" in res:
        return res
    diffs = sorted(r - p for r, p in zip(res["routed_s"], res["bare_s"]))
    q = statistics.quantiles(diffs, n=10) if len(diffs) >= 10 else [diffs[0]] * 9
    return {
        "model": model,
        "called": how,
        "batch": batch,
        "blocks": len(diffs),
        "routed_us": round(statistics.median(res["routed_s"]) * 1e6, 1),
        "bare_us": round(statistics.median(res["bare_s"]) * 1e6, 1),
        "overhead_us": round(statistics.median(diffs) * 1e6, 1),
        "overhead_p10_p90_us": [round(q[0] * 1e6, 1), round(q[-1] * 1e6, 1)],
        "served": res["served"],
        "setting": res["key"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--seconds", type=float, default=20.0, help="measuring window per case")
    ap.add_argument("--block", type=int, default=100, help="calls per timed block")
    ap.add_argument("--only", help="comma-separated case names (default: all)")
    ap.add_argument("--profile", help="a case to run under cProfile (printed), nothing written")
    ap.add_argument("--label", default="", help="a label for this run (e.g. before/after)")
    a = ap.parse_args()
    if a.profile:
        run_case(a.profile, 2.0, a.block, True)
        return
    names = a.only.split(",") if a.only else list(CASES)
    rows = {n: run_case(n, a.seconds, a.block, False) for n in names}
    pieces = decompose()
    result = {
        "processor": processor(),
        "python": platform.python_version(),
        "label": a.label,
        "method": "one fresh process per case; blocks of routed and bare-runner calls interleaved; overhead = "
        "median over block pairs of (routed - bare) per call, p10/p90 its spread",
        "cases": rows,
        "decomposition_tiny_mlp": pieces,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
