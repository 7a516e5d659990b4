#!/usr/bin/env python
"""Every way people call a model, under ``enable()``: a matrix of calling conventions x models at
batch 1, each cell in a fresh process on an empty plan cache (TF_AUTOPAR_CACHE_DIR), cells
interleaved (round-robin over the models within a convention's column, conventions in turn).

Conventions: ``keyword`` (``loaded.signatures["serving_default"](**inputs)``, the reference),
``positional`` (``sig(tf.constant(x))``, single-input signatures only: TensorFlow makes a signature
with several inputs keyword-only), ``keras call`` (``model(x)`` of the .keras file),
``keras call training=False``, ``predict_on_batch``, ``predict`` (one batch), ``TFSMLayer``
(``keras.layers.TFSMLayer(dir)(x)``). Per cell: calls until ``--seconds`` after the switch (the first
poll, every 0.5 s, that finds the convention's function served by a frozen session), or for
``--limit`` seconds when it does not switch; the steady-state median ms of the calls after the
switch (cells that did not switch: of the window's last ``--seconds``); the
path that served (status()); how its calls were counted (status(): served, original, not routed
with the reason); the outputs on one fixed input against the keyword call's (max abs difference).
After the switch, ``--seconds`` more of blocks of 5 calls and 5 calls of the bucket's bare
runner (``runner.run(arrays)``), interleaved: ``of_bare`` = bare ms / call ms in that process,
``normalised_vs_keyword`` = of_bare / the keyword cell's of_bare (the host's load cancels within
a process; the frozen graphs of a .keras model and of its SavedModel do the same work). Live
tuning is off (TF_AUTOPAR_TUNE_LIVE=0) so that the serving session is the one switched to.
The goal: each routed convention >= 0.95 of the keyword call's steady-state speed.

    python benchmarks/bench_conventions.py --out benchmarks/results/conventions_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402

MODELS = ("lstm_classifier", "dlrm", "mobilenet_v2")
CONVENTIONS = (
    "keyword",
    "positional",
    "keras call",
    "keras call training=False",
    "predict_on_batch",
    "predict",
    "TFSMLayer",
)

CHILD = r"""
import json, os, sys, time
import numpy as np
how, path, seconds, out_npy, limit = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5])
import tf_autopar
tf_autopar.enable()
import tensorflow as tf
keras_path = path + ".keras"
if how in ("keyword", "positional"):
    loaded = tf.saved_model.load(path)
    sig = loaded.signatures["serving_default"]
    specs = sig.structured_input_signature[1]
else:
    import keras
    if how == "TFSMLayer":
        model = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
        specs = tf.saved_model.load(path).signatures["serving_default"].structured_input_signature[1]
    else:
        model = keras.models.load_model(keras_path)
        specs = {t.name: tf.TensorSpec([None, *t.shape[1:]], t.dtype) for t in model.inputs}
rng = np.random.default_rng(0)
def make(spec):
    shape = [1 if d is None else d for d in spec.shape]
    dt = spec.dtype.as_numpy_dtype
    if spec.dtype.is_integer:
        return rng.integers(0, 2, shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)
inputs = {k: make(s) for k, s in sorted(specs.items())}
single = len(inputs) == 1
x = next(iter(inputs.values())) if single else inputs
if how == "keyword":
    call = lambda: sig(**inputs)
elif how == "positional":
    if not single:
        print(json.dumps({"skipped": "the signature takes several inputs: TensorFlow makes it keyword-only"})); sys.exit(0)
    xt = tf.constant(x)
    call = lambda: sig(xt)
elif how == "keras call":
    call = lambda: model(x)
elif how == "keras call training=False":
    call = lambda: model(x, training=False)
elif how == "predict_on_batch":
    call = lambda: model.predict_on_batch(x)
elif how == "predict":
    call = lambda: model.predict(x, verbose=0)
elif how == "TFSMLayer":
    if not single:
        print(json.dumps({"skipped": "TFSMLayer passes a dict positionally: TensorFlow raises for a signature of several inputs, without tf_autopar too"})); sys.exit(0)
    xin = tf.constant(x) if single else {k: tf.constant(v) for k, v in inputs.items()}
    call = lambda: model(xin)
def ours():
    found = [s for s in tf_autopar.status().served if s.calls or s.declined]
    return max(found, key=lambda s: s.calls + sum(n for _, n in s.declined)) if found else None
times, stamps = [], []
switch_at = None
t_start = time.perf_counter(); next_poll = t_start + 0.5
while True:
    now = time.perf_counter()
    if (now - switch_at >= seconds) if switch_at is not None else (now - t_start >= limit):
        break
    t0 = time.perf_counter(); call(); t1 = time.perf_counter()
    times.append(t1 - t0); stamps.append(t1)
    if switch_at is None and t1 >= next_poll:
        next_poll = t1 + 0.5
        r = ours()
        if r is not None and any(b.path == "frozen session" and b.served for b in r.buckets):
            switch_at = t1
r = ours()
cut = switch_at if switch_at is not None else t_start + limit - seconds
steady = [d for d, s in zip(times, stamps) if s > cut]
bare_ms = conv_ms = None
if switch_at is not None:  # blocks of the call and of its bucket's bare runner, interleaved: the load cancels
    from tf_autopar.runtime.fastpath import roster
    from tf_autopar.runtime.fastpath.routing.arrays import synthetic
    fn = max(roster._all(), key=lambda s: sum(s.calls.values()))
    b = fn.buckets.get(1)
    if b is not None and b.pool is not None:
        runner, arrays = b.pool, [synthetic(spec, 1) for _, spec in fn.specs]
        conv, bare = [], []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for f, acc in ((call, conv), (lambda: runner.run(arrays), bare)):
                for _ in range(5):
                    t0 = time.perf_counter(); f(); acc.append(time.perf_counter() - t0)
        conv_ms, bare_ms = float(np.median(conv)) * 1e3, float(np.median(bare)) * 1e3
out = call()
flat = [np.asarray(v, np.float64).ravel() for v in tf.nest.flatten(out)]
np.save(out_npy, np.concatenate(flat) if flat else np.zeros(0))
report = dict(
    paired_ms=conv_ms, bare_ms=bare_ms, reasons=[b.reason for b in r.buckets if b.reason] if r else [],
    calls=len(times), steady_ms=float(np.median(steady)) * 1e3 if steady else None, steady_calls=len(steady),
    switch_s=round(switch_at - t_start, 2) if switch_at is not None else None,
    function=r.function if r else "", convention=r.convention if r else "",
    paths=sorted({b.path for b in r.buckets}) if r else [], served=r.served if r else 0,
    taken=r.calls if r else 0, declined=dict(r.declined) if r else {},
    routed=[(s.function, s.convention, s.served, s.calls) for s in tf_autopar.status().served if s.calls or s.declined],
)
print(json.dumps(report))
"""


def cell(how: str, model_dir: str, seconds: float, limit: float, npy: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR", "OMP_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p),
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_AUTOPAR_CACHE_DIR=tempfile.mkdtemp(prefix="tfa_conv_"),
        TF_AUTOPAR_TUNE_LIVE="0",  # the serving session stays the one switched to: the bare runner is the same
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, how, model_dir, str(seconds), npy, str(limit)],
        env=env,
        capture_output=True,
        text=True,
        timeout=limit + seconds + 300,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": proc.stderr.strip().splitlines()[-1:] if proc.stderr else f"exit {proc.returncode}"}
    res = json.loads(lines[-1])
    res["process_s"] = round(time.monotonic() - t0, 1)
    return res


def table(path: str) -> str:
    """The result file as a markdown table: per model and convention, the steady-state ms, its speed
    against the keyword call's, the switch time, the path and the outputs' difference."""
    with open(path) as fh:
        result = json.load(fh)
    lines = [
        "| model | convention | steady ms | vs keyword | of its bare runner | normalised vs keyword | switch s "
        "| path (status()) | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, cells in result["rows"].items():
        for how, r in cells.items():
            if "skipped" in r or "error" in r:
                lines.append(f"| {m} | {how} | - | - | - | - | - | {r.get('skipped') or r.get('error')} | - |")
                continue
            served = f"{', '.join(r['paths']) or 'no bucket'}: {r['served']:,} of {r['calls']:,} calls served"
            if r.get("reasons"):
                served += " (" + "; ".join(r["reasons"]) + ")"
            if r.get("declined"):
                served += "; not routed: " + ", ".join(f"{n:,} {why}" for why, n in r["declined"].items())
            diff = r.get("max_abs_diff_vs_keyword")
            lines.append(
                f"| {m} | {how} | {r['steady_ms']:.2f} | {r.get('speed_vs_keyword', 0):.2f} | "
                f"{r.get('of_bare', 0):.2f} | {r.get('normalised_vs_keyword', 0):.2f} | "
                f"{r['switch_s'] if r['switch_s'] is not None else 'no switch'} | {served} | "
                f"{'-' if diff is None else f'{diff:.1e}'} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default=os.environ.get("TF_AUTOPAR_USER_MODELS", "/work/user_models"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--conventions", default=",".join(CONVENTIONS))
    ap.add_argument("--seconds", type=float, default=15.0, help="steady-state window after the switch")
    ap.add_argument("--limit", type=float, default=60.0, help="longest wait for the switch (then: its last --seconds)")
    ap.add_argument("--out")
    ap.add_argument("--summarise", help="print a result file as a markdown table")
    a = ap.parse_args()
    if a.summarise:
        print(table(a.summarise))
        return
    models = a.models.split(",")
    conventions = a.conventions.split(",")
    tmp = tempfile.mkdtemp(prefix="tfa_conv_out_")
    rows: dict[str, dict[str, dict]] = {m: {} for m in models}
    started = time.monotonic()
    for how in conventions:  # a convention's column, the models round-robin
        for m in models:
            npy = os.path.join(tmp, f"{m}-{how.replace(' ', '_')}.npy")
            res = cell(how, os.path.join(a.models_dir, m), a.seconds, a.limit, npy)
            if os.path.exists(npy):
                res["npy"] = npy
            rows[m][how] = res
            print(
                f"{m:16s} {how:26s} {json.dumps({k: res.get(k) for k in ('steady_ms', 'switch_s', 'paths', 'skipped', 'error')})}",
                flush=True,
            )
    for cells in rows.values():
        ref = cells.get("keyword", {})
        ref_out = np.load(ref["npy"]) if "npy" in ref else None
        for res in cells.values():
            if ref.get("steady_ms") and res.get("steady_ms"):
                res["speed_vs_keyword"] = round(ref["steady_ms"] / res["steady_ms"], 3)
            if res.get("paired_ms"):  # the call against its own bare runner, then against the keyword call's
                res["of_bare"] = round(res["bare_ms"] / res["paired_ms"], 3)
                if ref.get("paired_ms"):
                    res["normalised_vs_keyword"] = round(res["of_bare"] / (ref["bare_ms"] / ref["paired_ms"]), 3)
            if ref_out is not None and "npy" in res:
                got = np.load(res.pop("npy"))
                res["max_abs_diff_vs_keyword"] = (
                    float(np.max(np.abs(got - ref_out))) if got.shape == ref_out.shape else None
                )
            res.pop("npy", None)
    result = {
        "processor": processor(),
        "python": platform.python_version(),
        "steady_seconds": a.seconds,
        "switch_limit_seconds": a.limit,
        "wall_s": round(time.monotonic() - started, 1),
        "method": "fresh process per cell, enable() on an empty plan cache, batch 1, conventions in turn and "
        "models round-robin within each; steady_ms = median call after the switch (first 0.5 s poll finding a "
        "frozen session serving) for --seconds, else of the last --seconds of --limit; speed_vs_keyword = keyword ms / cell ms",
        "rows": rows,
    }
    text = json.dumps(result, indent=2)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    print(text[-3000:])


if __name__ == "__main__":
    main()
