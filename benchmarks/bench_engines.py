#!/usr/bin/env python
"""Issue 46's judge: ``enable()`` against every CPU engine a user could serve the same SavedModel with.

For each SavedModel of benchmarks/user_models.py (none a bundled workload) at batch 1 and at its
serving batch, each configuration in a fresh process, the configurations of a row one after the
other and rows and rounds interleaved (as bench_fastpath.py), a server-style loop on the same
inputs (fixed seed, written once per row): load with ``tf.saved_model.load``, call, read the outputs
back as numpy. Configurations:

- ``default``: TensorFlow alone, the eager ``serving_default`` signature; twice per round
  (``default``, ``default-again``) for the row's noise floor; each runs as long as the first window
  (``--default-seconds``), so that its p99 is over the same seconds as ``enable()``'s, its first
  call a like share of them;
- ``enable``: ``tf_autopar.enable()`` only, empty plan cache, ``--seconds`` of traffic: the first
  ``--window`` seconds' p50/p99, the steady state (median of the last third of the run), which
  engine serves at the end (the fast path's runner's ``describe()["engine"]``), peak RSS;
- ``enable-2nd``: a second start on the cache the first left: is its first call served by the
  fast path, and by which engine;
- ``tf-frozen``: the frozen graph alone (``runtime/frozen.py``'s FrozenGraph) in
  ``tf.compat.v1.Session``s, one per (inter, intra) pool pair of this host, interleaved in one
  process: the best pair's median (bench_fastpath's ``frozen-sweep``);
- ``openvino``: ``openvino.convert_model`` on the loaded signature's concrete function, compiled
  for CPU with ``PERFORMANCE_HINT=LATENCY`` and ``INFERENCE_PRECISION_HINT=f32`` (explicit: on a
  CPU with AVX512_BF16 or AMX OpenVINO's default is bf16), as OpenVINO's docs show a user;
- ``openvino-bf16``: the same with OpenVINO's default precision on this CPU (the compiled model's
  ``INFERENCE_PRECISION_HINT`` is recorded);
- ``onnxruntime``: tf2onnx as its README shows a user (``python -m tf2onnx.convert --saved-model
  DIR --signature_def serving_default --opset 17``), else its Python API on the same function
  (``from_function``, in memory), an ORT ``InferenceSession`` with its default settings; which
  conversion served is recorded (``converter``); both failing is the row's result (each error's
  first line), never the benchmark's end;
- ``enable-bf16``: ``enable(precision="bf16")``, only if ``tf_autopar.enable`` takes ``precision``
  (read with inspect.signature in a child); otherwise skipped with that reason;
- ``enable-unpaced`` (only when ``--configs`` names it): ``enable`` with
  ``TF_AUTOPAR_CONVERSION_BUDGET=off``, its conversions never stopped (engines/pacing.py), on an
  empty cache of its own: the pacing's A/B, the two in the same round.

Each records its median ms and p99, its outputs' max relative difference from the same round's
``default`` (max |a - b| over max |b|, per output, the largest), conversion/compile seconds and
peak RSS. The summary gives, per row, enable()'s steady state against the fastest single f32
engine whose outputs are within 1e-4 (goal: >= 0.95 on every row, >= 1.1x in geometric mean),
against the default (never slower), the first window's p99 against the default's (goal <= 1.5x),
and the second start's first call.

    python benchmarks/bench_engines.py /work/user_models --out benchmarks/results/engines.json.gz
    python benchmarks/bench_engines.py /work/user_models --only tiny_mlp,unet_small --batches batch1 \\
        --seconds 20 --engine-seconds 6 --rounds 1                            # a quick look
    python benchmarks/bench_engines.py --summarise benchmarks/results/engines.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import child_env, host, run_script  # noqa: E402
from user_models import SERVING, make_inputs  # noqa: E402

from tf_autopar.runtime.fastpath.rules import BF16_RTOL, outputs_differ  # noqa: E402  (pure: no TensorFlow)

#: In run order within a row (``enable-bf16`` only where enable() takes ``precision``).
CONFIGS = (
    "default",
    "enable",
    "default-again",
    "enable-2nd",
    "tf-frozen",
    "openvino",
    "openvino-bf16",
    "onnxruntime",
    "enable-bf16",
)
#: The f32 engines a user could run alone; the fastest of them (outputs within DIFF_TOL) is the bar.
ENGINES = ("tf-frozen", "openvino", "onnxruntime")
DIFF_TOL = 1e-4
#: the opt-in precision's tolerance: the fast path's own check of a bf16 candidate
BF16_TOL = BF16_RTOL
BF16_CONFIGS = ("openvino-bf16", "enable-bf16")
#: Run only when --configs names them: enable() with its conversions never stopped (pacing's A/B).
EXTRA_CONFIGS = ("enable-unpaced",)
PAIRS = ("1x1", "1x2", "2x1", "2x2")

# ------------------------------------------------------------------------------ the child (a server)

CHILD = r"""
import dataclasses, json, os, resource, sys, time
cfg, path, name, batch, seconds, here, rowdir, tag = sys.argv[1:9]
batch, seconds = int(batch), float(seconds)
sys.path.insert(0, here)
out = {"config": cfg}
if cfg.startswith("enable"):
    import tf_autopar
    out["tf_autopar"] = os.path.dirname(os.path.dirname(os.path.abspath(tf_autopar.__file__)))  # which checkout ran
    if cfg == "enable-bf16":
        tf_autopar.enable(precision="bf16")
    else:
        tf_autopar.enable()
import numpy as np, tensorflow as tf
with np.load(os.path.join(rowdir, "inputs.npz")) as z:
    inputs = {k: z[k] for k in z.files}
in_names = sorted(inputs)  # the signature's flat input order
t0 = time.perf_counter()
loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]
out["load_s"] = time.perf_counter() - t0
out_keys = sorted(sig.structured_outputs)  # the flat output order of the signature's function

def strip(n):
    return n.split(":")[0]

def first_line(exc):
    text = str(exc).strip()
    return (type(exc).__name__ + ": " + (text.splitlines()[0] if text else ""))[:1000]

def timed(call, seconds, after=None):
    times, stamps, result = [], [], None
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 3:
        t = time.perf_counter()
        result = call()
        times.append(round((time.perf_counter() - t) * 1e3, 4))  # 0.1 us: keeps the JSON small
        stamps.append(round(t - start, 4))
        if after is not None:
            after()
    return result, times, stamps

def finish(result):
    f = os.path.join(rowdir, f"out_{cfg}_{tag}.npz")
    np.savez(f, **{k: np.asarray(v) for k, v in result.items()})
    out["outputs_file"] = f
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out, default=str), flush=True)
    sys.exit(0)

def fail(stage, exc):
    out["failed"] = f"{stage}: {first_line(exc)}"
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out, default=str), flush=True)
    sys.exit(0)

def by_name(ports_names, keys):
    # each port's names -> the key it carries (names match after ':0' is stripped), else by position
    found = []
    for i, names in enumerate(ports_names):
        hit = [k for k in keys if k in {strip(n) for n in names}]
        found.append(hit[0] if hit else None)
    return found if None not in found and len(set(found)) == len(found) else list(keys)

def fast_runners():
    # the fast path's buckets of this signature and their runners' configuration (describe())
    rows = []
    try:
        from tf_autopar.runtime import fastpath
        for f in list(fastpath._served):
            if "serving_default" not in f.name:
                continue
            for b in list(f.buckets.values()):
                d = {"bucket": b.bucket, "state": b.state.value, "served": b.served, "tried": list(b.tried)}
                if b.pool is not None and hasattr(b.pool, "describe"):
                    d.update(b.pool.describe())
                rows.append(d)
    except Exception as exc:
        rows.append({"error": first_line(exc)})
    return rows

def fast_served():
    # the buckets' own counters, read between calls: status() there (it builds the whole report)
    # took longer than a tiny model's call and left the next call slower (a tiny MLP: 59 us a call
    # against 24 in a loop without it)
    from tf_autopar.runtime import fastpath
    return sum(b.served for f in list(fastpath._served) if "serving_default" in f.name for b in list(f.buckets.values()))

if cfg.startswith("default") or cfg.startswith("enable"):
    call = lambda: {k: v.numpy() for k, v in sig(**inputs).items()}
    if not cfg.startswith("enable"):
        result, out["times_ms"], out["stamps_s"] = timed(call, seconds)
        finish(result)
    flags, seen = [], [0]
    def after():
        n = fast_served(); flags.append(n > seen[0]); seen[0] = n
        if len(flags) == 1:
            out["first_call_runners"] = fast_runners()
    result, out["times_ms"], out["stamps_s"] = timed(call, seconds, after)
    out["fast"] = flags
    st = tf_autopar.status()
    out["status"] = st.text()
    out["buckets"] = [dataclasses.asdict(b) for s in st.served if s.function == "signatures['serving_default']"
                      for b in s.buckets]
    out["runners"] = fast_runners()
    finish(result)

if cfg == "tf-frozen":
    from tf_autopar.runtime.frozen import FrozenGraph
    t0 = time.perf_counter()
    frozen = FrozenGraph(sig)
    feeds = {t: inputs[n] for t, n in zip(frozen.inputs, in_names)}
    pairs = [tuple(int(v) for v in p.split("x")) for p in os.environ["BENCH_PAIRS"].split(",")]
    runs = {f"{p[0]}x{p[1]}": (lambda s: lambda: s.run(frozen.outputs, feeds))(frozen.open_sessions(*p)[0])
            for p in pairs}
    for run in runs.values():
        run()  # grappler, once per session
    out["convert_s"] = time.perf_counter() - t0
    per, rounds = {}, []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or not per:
        this = {}
        for p, run in runs.items():  # blocks of 8, the first 2 dropped: the previous session's threads wind down
            block = []
            for k in range(8):
                t = time.perf_counter(); run()
                if k >= 2:
                    block.append((time.perf_counter() - t) * 1e3)
            per.setdefault(p, []).extend(block)
            this[p] = sorted(block)[len(block) // 2]
        rounds.append(this)
    out["sweep_ms"] = {p: sorted(v)[len(v) // 2] for p, v in per.items()}
    out["sweep_rounds_ms"] = rounds
    best = min(out["sweep_ms"], key=out["sweep_ms"].get)
    out["setting"] = best
    out["samples_ms"] = per[best]
    finish(dict(zip(out_keys, runs[best]())))

if cfg.startswith("openvino"):
    try:
        import openvino as ov
        out["version"] = ov.__version__
        t0 = time.perf_counter()
        model = ov.convert_model(sig)
        out["convert_s"] = time.perf_counter() - t0
        props = {"PERFORMANCE_HINT": "LATENCY"}
        if cfg == "openvino":
            props["INFERENCE_PRECISION_HINT"] = "f32"
        t0 = time.perf_counter()
        compiled = ov.Core().compile_model(model, "CPU", props)
        out["compile_s"] = time.perf_counter() - t0
        out["properties"] = {p: str(compiled.get_property(p)) for p in
                             ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS")}
        request = compiled.create_infer_request()
        in_keys = by_name([p.get_names() for p in compiled.inputs], in_names)
        res_keys = by_name([p.get_names() for p in compiled.outputs], out_keys)
        feed = {i: inputs[k] for i, k in enumerate(in_keys)}
        def call():
            res = request.infer(feed)
            return {k: res[i] for i, k in enumerate(res_keys)}
        call()
    except Exception as exc:
        fail("conversion or compilation", exc)
    result, times, _ = timed(call, seconds)
    out["samples_ms"] = times[len(times) // 2:]
    finish(result)

if cfg == "onnxruntime":
    # tf2onnx two ways, as a user would try them: its README's command line on the SavedModel
    # (which freezes the model itself), then its Python API on the loaded function; the first whose
    # model ONNX Runtime loads serves. The Python API alone failed on EfficientNet-B0 and DLRM
    # (the converted model asks for inputs the signature has not), the command line did not.
    import subprocess
    import onnxruntime as ort, tf2onnx
    out["version"] = f"onnxruntime {ort.__version__}, tf2onnx {tf2onnx.__version__}"

    def by_command_line():
        f = os.path.join(rowdir, f"tf2onnx_{tag}.onnx")
        argv = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", path, "--signature_def",
                "serving_default", "--opset", "17", "--output", f]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0 or not os.path.exists(f):
            lines = [l for l in done.stderr.splitlines() if "Error" in l or "error" in l] or done.stderr.splitlines()[-1:]
            raise RuntimeError(f"tf2onnx.convert --saved-model exited {done.returncode}: {(lines or [''])[-1][:500]}")
        with open(f, "rb") as fh:
            data = fh.read()
        os.remove(f)
        return data

    def by_python_api():
        specs = [tf.TensorSpec(sig.structured_input_signature[1][n].shape, sig.structured_input_signature[1][n].dtype,
                               name=n) for n in in_names]
        @tf.function(input_signature=specs)
        def positional(*args):
            return sig(**dict(zip(in_names, args)))
        proto, _ = tf2onnx.convert.from_function(positional, input_signature=specs, opset=17)
        return proto.SerializeToString()

    session, errors = None, []
    for how, convert in (("tf2onnx command line, --saved-model", by_command_line),
                         ("tf2onnx.convert.from_function", by_python_api)):
        try:
            t0 = time.perf_counter()
            model = convert()
            out["convert_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            out["compile_s"] = time.perf_counter() - t0
            in_keys = by_name([[i.name] for i in session.get_inputs()], in_names)
            if len(session.get_inputs()) != len(in_names):  # by_name falls back to the order
                raise ValueError(f"the converted model's inputs {[i.name for i in session.get_inputs()]} are not the signature's")
            feed = {i.name: inputs[k] for i, k in zip(session.get_inputs(), in_keys)}
            res_keys = by_name([[o.name] for o in session.get_outputs()], out_keys)
            call = lambda: dict(zip(res_keys, session.run(None, feed)))
            call()
            out["converter"] = how
            break
        except Exception as exc:
            errors.append(f"{first_line(exc)} ({how})")
            session = None
    if session is None:
        out["failed"] = "conversion or session: " + "; ".join(errors)
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(out, default=str), flush=True)
        sys.exit(0)
    if errors:
        out["converter_failures"] = errors
    result, times, _ = timed(call, seconds)
    out["samples_ms"] = times[len(times) // 2:]
    finish(result)
raise SystemExit(f"unknown configuration {cfg}")
"""

PRECISION_CHECK = r"""
import inspect, json, tf_autopar
print("RESULT " + json.dumps({"precision": "precision" in inspect.signature(tf_autopar.enable).parameters}))
"""


def run_child(cfg: str, model_dir: str, name: str, batch: int, seconds: float, cache: str, rowdir: str, tag: str):
    env = child_env()
    env["TF_AUTOPAR_CACHE_DIR"] = cache
    if cfg == "enable-unpaced":
        env["TF_AUTOPAR_CONVERSION_BUDGET"] = "off"
    if cfg == "tf-frozen":
        env["TF_OVERRIDE_GLOBAL_THREADPOOL"] = "1"  # each session's own pools (bench_fastpath's frozen-sweep)
        env["BENCH_PAIRS"] = ",".join(PAIRS)
    t0 = time.time()
    res = run_script(
        CHILD, [cfg, os.path.join(model_dir, name), name, str(batch), str(seconds), HERE, rowdir, tag], env
    )
    if set(res) == {"error"}:
        res = {"config": cfg, "error": res["error"]}
    res["wall_s"] = round(time.time() - t0, 1)
    res["load_avg"] = round(os.getloadavg()[0], 2)
    return res


def enable_takes_precision() -> bool:
    res = run_script(PRECISION_CHECK, [], child_env(), timeout=300)
    return bool(res.get("precision"))


def max_rel_diff(path: str, ref_path: str) -> float | str:
    """max over outputs of max |a - b| / max |b| (b: TF default's); a string when they do not match."""
    import numpy as np

    with np.load(path) as a, np.load(ref_path) as b:
        if sorted(a.files) != sorted(b.files):
            return f"outputs {sorted(a.files)} != {sorted(b.files)}"
        worst = 0.0
        for k in b.files:
            x, y = a[k].astype("float64"), b[k].astype("float64")
            if x.shape != y.shape:
                return f"{k}: shape {x.shape} != {y.shape}"
            scale = float(np.max(np.abs(y))) or 1.0
            worst = max(worst, float(np.max(np.abs(x - y))) / scale)
        return worst


def bf16_differs(path: str, ref_path: str) -> str:
    """ "" when the outputs pass the opt-in precision's check against TF default's (rules.outputs_differ:
    within BF16_TOL of the largest value and the same top class in every row), else what differs."""
    import numpy as np

    with np.load(path) as a, np.load(ref_path) as b:
        if sorted(a.files) != sorted(b.files):
            return f"outputs {sorted(a.files)} != {sorted(b.files)}"
        return outputs_differ([a[k] for k in b.files], [b[k] for k in b.files], BF16_TOL, top1=True)


# ------------------------------------------------------------------------------ summary


def _median(xs):
    xs = [x for x in xs if isinstance(x, (int, float)) and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def _p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)] if xs else float("nan")


def steady(run: dict) -> tuple[float, float]:
    """(median, p99) of a run's steady state: enable()'s last third of the traffic (by time), an
    engine's samples (its second half; tf-frozen: the best pair's), the default's second half."""
    if run["config"].startswith("enable"):
        stamps, times = run.get("stamps_s") or [], run.get("times_ms") or []
        end = max(stamps, default=0.0)
        xs = [t for t, s in zip(times, stamps) if s >= end * 2 / 3] or times[-3:]
    elif "samples_ms" in run:
        xs = run["samples_ms"]
    else:
        times = run.get("times_ms") or []
        xs = times[len(times) // 2 :]
    return (statistics.median(xs), _p99(xs)) if xs else (float("nan"), float("nan"))


def window(run: dict, seconds: float) -> tuple[float, float, float]:
    """(p50, p99, mean) of the requests that started within the first ``seconds`` of traffic."""
    xs = sorted(t for t, s in zip(run.get("times_ms") or [], run.get("stamps_s") or []) if s < seconds)
    return (xs[len(xs) // 2], _p99(xs), statistics.fmean(xs)) if xs else (float("nan"),) * 3


def end_engine(run: dict) -> str:
    """The engine (and setting) that served the fast path's bucket(s) at the end of an enable() run."""
    names = []
    for r in run.get("runners") or []:
        if "engine" in r and r.get("served"):
            names.append(f"{r['engine']} {r.get('inter_op', '?')}x{r.get('intra_op', '?')}")
        elif "error" in r:
            names.append(f"? ({r['error']})")
    if names:
        return "; ".join(sorted(set(names)))
    paths = sorted(
        {b.get("path", "?") + (f" ({b['reason']})" if b.get("reason") else "") for b in run.get("buckets") or []}
    )
    return "not served: " + "; ".join(paths) if paths else "not routed"


def first_call(run: dict) -> str:
    """Whether the first call of a run was served by the fast path, and by which engine."""
    if not run.get("fast"):
        return "no calls"
    if not run["fast"][0]:
        return "original path"
    engines = sorted({r["engine"] for r in run.get("first_call_runners") or [] if r.get("engine")})
    return "fast path: " + (", ".join(engines) or "engine unknown")


def row_summary(row: dict, window_s: float) -> dict:
    rounds = row["rounds"]

    def ok(cfg):
        return [r[cfg] for r in rounds if cfg in r and "error" not in r[cfg] and "failed" not in r[cfg]]

    out: dict = {"model": row["model"], "batch": row["batch"]}
    d, d2 = ok("default"), ok("default-again")
    out["default_ms"] = _median([steady(r)[0] for r in d + d2])
    out["noise"] = _median([abs(steady(a)[0] / steady(b)[0] - 1) for a, b in zip(d, d2)])
    out["default_p99_window"] = _median([window(r, window_s)[1] for r in d + d2])
    for cfg in CONFIGS[1:] + EXTRA_CONFIGS:
        if cfg == "default-again":
            continue
        runs = ok(cfg)
        mine = [r[cfg] for r in rounds if cfg in r]
        failed = [
            x.get("failed") or "error: " + x["error"].strip().splitlines()[-1]
            for x in mine
            if "failed" in x or "error" in x
        ]
        skipped = [x["skipped"] for x in mine if "skipped" in x]
        c: dict = {}
        if runs:
            c["ms"] = _median([steady(r)[0] for r in runs])
            c["p99"] = _median([steady(r)[1] for r in runs])
            diffs = [r.get("max_rel_diff") for r in runs]
            num = [x for x in diffs if isinstance(x, (int, float))]
            c["diff"] = max(num) if num else next((x for x in diffs if x is not None), None)
            c["rss_mb"] = _median([r.get("peak_rss_mb") for r in runs])
            c["convert_s"] = _median([(r.get("convert_s") or 0) + (r.get("compile_s") or 0) for r in runs])
            if "setting" in runs[0]:
                c["setting"] = runs[0]["setting"]
            if "properties" in runs[0]:  # "<Type: 'bfloat16'>" -> "bfloat16"
                c["precision"] = runs[0]["properties"].get("INFERENCE_PRECISION_HINT", "").split("'")[-2:][0]
        if failed:
            c["failed"] = failed[0]
        if skipped:
            c["skipped"] = skipped[0]
        out[cfg] = c
    for cfg in ("enable", "enable-unpaced"):
        e = ok(cfg)
        if e:
            out[cfg]["engine_end"] = end_engine(e[-1])
            out[cfg]["p99_window"] = _median([window(r, window_s)[1] for r in e])
            out[cfg]["p50_window"] = _median([window(r, window_s)[0] for r in e])
            out[cfg]["mean_window"] = _median([window(r, window_s)[2] for r in e])
    eb = ok("enable-bf16")
    if eb:
        out["enable-bf16"]["engine_end"] = end_engine(eb[-1])
    ob = out.get("openvino-bf16", {})
    checks = [r.get("bf16_differs") for r in ok("openvino-bf16")]
    if any(checks):  # OpenVINO's bf16 fails the check somewhere: not a bar for this row
        ob["bf16_fails"] = next(c for c in checks if c)
    elif eb and "ms" in ob and isinstance(ob.get("diff"), float) and ob["diff"] <= BF16_TOL:
        out["bf16_vs_openvino"] = ob["ms"] / out["enable-bf16"]["ms"]
    e2 = ok("enable-2nd")
    if e2:
        out["enable-2nd"]["first_call"] = first_call(e2[-1])
    fast = {
        cfg: out[cfg]["ms"]
        for cfg in ENGINES
        if "ms" in out.get(cfg, {}) and isinstance(out[cfg].get("diff"), float) and out[cfg]["diff"] <= DIFF_TOL
    }
    if fast:
        best = min(fast, key=fast.get)
        out["fastest"] = [best, fast[best]]
    em = out.get("enable", {}).get("ms", float("nan"))
    out["enable_vs_fastest"] = out["fastest"][1] / em if "fastest" in out else float("nan")
    out["enable_vs_default"] = out["default_ms"] / em
    out["p99_ratio"] = out.get("enable", {}).get("p99_window", float("nan")) / out["default_p99_window"]
    return out


def _f(x, fmt=".2f"):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _ms(x) -> str:
    """Milliseconds to three significant figures below 1 ms (0.0123), two decimals above."""
    return _f(x, ".3g" if isinstance(x, float) and x < 1 else ".2f")


def _cell(c: dict) -> str:
    if "ms" in c:
        return _ms(c["ms"])
    if "failed" in c:  # the whole first line is under "failures:"
        return "fails: " + c["failed"].split(": ")[1 if ": " in c["failed"] else 0][:40]
    if "skipped" in c:
        return "skipped"
    return "-"


def _diff(c: dict) -> str:
    d = c.get("diff")
    return "-" if d is None else d if isinstance(d, str) else f"{d:.1e}"


def not_slower(r: dict) -> bool:
    """enable() not slower than the default beyond the row's noise (its two default runs' spread,
    2% at least; without a default-again run, 2%)."""
    noise = 0.0 if math.isnan(r["noise"]) else r["noise"]
    return r["enable_vs_default"] >= 1 - max(noise, 0.02)


def _geo(xs):
    xs = [x for x in xs if x > 0 and not math.isnan(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summarise(data: dict, ceilings: dict[tuple[str, int], float] | None = None) -> str:
    """The tables and the goals; ``ceilings``: (model, batch) -> the most a served signature call
    can reach of ONNX Runtime alone there (engine_call_ceiling.py's ``ceiling_vs_ort_alone``)."""
    w = data.get("window_s", 60.0)
    rows = [row_summary(r, w) for r in data["rows"]]
    h = data["host"]
    lines = [f"rows (rounds) from {src}" for src in data.get("sources", [])] + [
        f"processor: {h['cpu_model']} ({h['cpus']} CPUs); TensorFlow {h['tf_version']}; {h['date']}; "
        f"{data.get('rounds', '?')} round(s), enable() {data.get('seconds', '?')} s, "
        f"default {data.get('default_seconds', data.get('engine_seconds', '?'))} s, engines {data.get('engine_seconds', '?')} s",
        "ms = steady-state median (enable(): last third of its run; tf-frozen: best pool pair; OpenVINO/ORT: second half);"
        f" fastest = fastest f32 engine alone with outputs within {DIFF_TOL:g} of TF default's",
        "",
        "| model | batch | default ms (noise) | enable() ms | engine at the end | tf-frozen ms (pools) | openvino f32 ms "
        "| openvino default ms (precision) | onnxruntime ms | enable-bf16 ms | fastest engine | enable() vs fastest "
        "| enable() vs default | first-window p99 enable()/default ms | 2nd start, 1st call |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        en, fz, ov, ob, ox = (r.get(c, {}) for c in ("enable", "tf-frozen", "openvino", "openvino-bf16", "onnxruntime"))
        fastest = r.get("fastest", ["-", float("nan")])
        lines.append(
            f"| {r['model']} | {r['batch']} | {_ms(r['default_ms'])} ({_f(100 * r['noise'], '.0f')}%) | {_cell(en)} | "
            f"{en.get('engine_end', '-')} | {_cell(fz)} ({fz.get('setting', '-')}) | {_cell(ov)} | "
            f"{_cell(ob)} ({ob.get('precision', '-')}) | {_cell(ox)} | {_cell(r.get('enable-bf16', {}))} | "
            f"{fastest[0]} {_ms(fastest[1])} | {_f(r['enable_vs_fastest'])} | {_f(r['enable_vs_default'])}x | "
            f"{_f(en.get('p99_window'), '.1f')}/{_f(r['default_p99_window'], '.1f')} ({_f(r['p99_ratio'])}x) | "
            f"{r.get('enable-2nd', {}).get('first_call', '-')} |"
        )
    lines += [
        "",
        "outputs' max relative difference from TF default's (same inputs), conversion + compile s, peak RSS MB:",
        "",
        "| model | batch | diff enable() | diff tf-frozen | diff openvino f32 | diff openvino default | diff onnxruntime "
        "| convert s tf-frozen / openvino / onnxruntime | peak RSS MB default / enable() / tf-frozen / openvino / onnxruntime |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cs = [r.get(c, {}) for c in ("enable", "tf-frozen", "openvino", "openvino-bf16", "onnxruntime")]
        default_rss = _median([x.get("peak_rss_mb") for x in _runs(data, r, "default")])
        lines.append(
            f"| {r['model']} | {r['batch']} | "
            + " | ".join(_diff(c) for c in cs)
            + f" | {_f(cs[1].get('convert_s'), '.1f')} / {_f(cs[2].get('convert_s'), '.1f')} / "
            f"{_f(cs[4].get('convert_s'), '.1f')} | {_f(default_rss, '.0f')} / "
            + " / ".join(_f(cs[i].get("rss_mb"), ".0f") for i in (0, 1, 2, 4))
            + " |"
        )
    vf = [r["enable_vs_fastest"] for r in rows]
    vd = [r["enable_vs_default"] for r in rows]
    pr = [r["p99_ratio"] for r in rows]
    n = len([x for x in vf if not math.isnan(x)])
    lines += [
        "",
        f"goals over {len(rows)} rows: enable() >= 0.95 of the fastest engine on "
        f"{sum(1 for x in vf if x >= 0.95)} of {n} rows (geometric mean {_f(_geo(vf))}x, goal >= 1.1x); "
        f"not slower than default beyond its noise on {sum(1 for r in rows if not_slower(r))} "
        f"of {len(rows)} (geometric mean {_f(_geo(vd))}x); first-window p99 <= 1.5x default's on "
        f"{sum(1 for x in pr if x <= 1.5)} of {len([x for x in pr if not math.isnan(x)])}; second start's first call "
        + (
            f"on the fast path on {sum(1 for r in rows if r['enable-2nd'].get('first_call', '').startswith('fast'))} "
            f"of {second}"
            if (second := sum(1 for r in rows if r.get("enable-2nd")))
            else "not measured (no enable-2nd)"
        ),
    ]
    if data.get("default_seconds", data.get("engine_seconds", w)) < w:
        lines.append(
            f"(the default ran {data.get('default_seconds', data.get('engine_seconds'))} s, enable() {w:g}: its p99 "
            "is over fewer calls, its first call among them; the p99 ratio is not like for like)"
        )
    bf = [r["bf16_vs_openvino"] for r in rows if "bf16_vs_openvino" in r]
    if bf:
        lines.append(
            f'precision="bf16": enable(precision="bf16") >= 0.95 of OpenVINO\'s bf16 alone on '
            f"{sum(1 for x in bf if x >= 0.95)} of {len(bf)} rows where OpenVINO bf16's outputs are within "
            f"{BF16_TOL:g} (geometric mean {_f(_geo(bf))}x; {', '.join(f'{x:.2f}' for x in bf)})"
        )
    excluded = [
        f"{r['model']} b{r['batch']} ({r['openvino-bf16']['bf16_fails']})"
        for r in rows
        if "bf16_fails" in r.get("openvino-bf16", {})
    ]
    if excluded:
        lines.append("OpenVINO bf16 outside the bf16 check (not a bar): " + "; ".join(excluded))
    single = {}
    for cfg in ENGINES:
        ratios = [
            r[cfg]["ms"] / r["fastest"][1] if "ms" in r.get(cfg, {}) and "fastest" in r else float("nan") for r in rows
        ]
        single[cfg] = _geo([1 / x for x in ratios if not math.isnan(x)])
    lines.append(
        "each engine alone against the per-row fastest (geometric mean over the rows it ran): "
        + ", ".join(f"{k} {_f(v)}" for k, v in single.items())
    )
    # the most any per-row choice could reach against each engine alone: the fastest alone on
    # every row at no cost of its own, and where a call ceiling was measured, no faster than it
    best = {}
    for r in rows:
        if "fastest" in r:
            name, ms = r["fastest"]
            cap = (ceilings or {}).get((r["model"], int(r["batch"])))
            best[r["model"], r["batch"]] = ms / cap if cap and name == "onnxruntime" else ms
    reach = {}
    for cfg in ENGINES:
        got = [r[cfg]["ms"] / best[r["model"], r["batch"]] for r in rows if "ms" in r.get(cfg, {}) and "fastest" in r]
        reach[cfg] = (_geo(got), len(got))
    capped = sorted(f"{m} b{b}" for m, b in (ceilings or {}) if (m, b) in {(r["model"], int(r["batch"])) for r in rows})
    lines.append(
        "the most a per-row choice could reach against each engine alone (the fastest alone on every row, "
        + (f"capped by the measured call ceiling on {', '.join(capped)}" if capped else "at no cost of its own")
        + "; goal >= 1.1x the best): "
        + ", ".join(f"{k} {_f(v)}x over {n}" for k, (v, n) in reach.items())
    )
    # the per-model choice against each engine used for every row (goal: >= 1.1x the best of them)
    versus = {}
    for cfg in ENGINES:
        pairs = [
            r[cfg]["ms"] / r["enable"]["ms"]
            for r in rows
            if "ms" in r.get(cfg, {})
            and r.get("enable", {}).get("ms")
            and r[cfg].get("diff") is not None
            and r[cfg]["diff"] <= DIFF_TOL
        ]
        versus[cfg] = (_geo(pairs), len(pairs))
    lines.append(
        "enable() against each engine alone (geometric mean of its ms over enable()'s, rows where it ran; "
        "goal >= 1.1x the best): " + ", ".join(f"{k} {_f(v)}x over {n}" for k, (v, n) in versus.items())
    )
    failures = [
        f"- {r['model']} b{r['batch']} {c}: {r[c]['failed'][:400]}"
        for r in rows
        for c in CONFIGS
        if "failed" in r.get(c, {})
    ]
    skipped = {r[c]["skipped"] for r in rows for c in CONFIGS if "skipped" in r.get(c, {})}
    if failures:
        lines += ["", "failures:"] + failures
    if skipped:
        lines += ["", "skipped: " + "; ".join(sorted(skipped))]
    paced = [r for r in rows if "ms" in r.get("enable-unpaced", {}) and "ms" in r.get("enable", {})]
    if paced:
        lines += [
            "",
            "the conversions paced (enable(), the default) and never stopped (enable-unpaced), same rounds; "
            "first-window mean / p50 / p99 ms and steady state ms:",
            "",
            "| model | batch | mean paced / unpaced | p50 paced / unpaced | p99 paced / unpaced | steady paced / unpaced "
            "| engine at the end, paced; unpaced |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in paced:
            a, b = r["enable"], r["enable-unpaced"]
            lines.append(
                f"| {r['model']} | {r['batch']} | "
                + " | ".join(f"{_ms(a[k])} / {_ms(b[k])}" for k in ("mean_window", "p50_window", "p99_window", "ms"))
                + f" | {a.get('engine_end', '-')}; {b.get('engine_end', '-')} |"
            )
        ratio = {
            k: _geo([r["enable-unpaced"][k] / r["enable"][k] for r in paced])
            for k in ("mean_window", "p99_window", "ms")
        }
        lines.append(
            f"unpaced over paced, geometric mean over {len(paced)} rows (above 1: pacing faster): first-window mean "
            f"{_f(ratio['mean_window'])}x, p99 {_f(ratio['p99_window'])}x, steady state {_f(ratio['ms'])}x"
        )
    loads = [x.get("load_avg") for row in data["rows"] for rnd in row["rounds"] for x in rnd.values()]
    loads = [x for x in loads if x is not None]
    if loads:
        lines.append(f"\n1-minute load average after each process: median {_median(loads):.2f}, max {max(loads):.2f}")
    return "\n".join(lines)


def _open(path: str, mode: str):
    """A results file, gzipped where its name ends in .gz (every call's time: tens of MB as JSON)."""
    if path.endswith(".gz"):
        return gzip.open(path, mode, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def latest_rows(runs: list[tuple[str, dict]]) -> dict:
    """Several saved runs as one: each row from the last run that measured it (a row re-run in
    more rounds, or on newer code, replaces the earlier one whole; rounds are never mixed)."""
    processors = {d["host"]["cpu_model"] for _, d in runs}
    if len(processors) > 1:
        raise ValueError(f"runs on different processors ({', '.join(sorted(processors))}): summarise each alone")
    rows: dict[tuple[str, int], dict] = {}
    source: dict[tuple[str, int], str] = {}
    for name, data in runs:
        for r in data["rows"]:
            rows[r["model"], r["batch"]] = r
            source[r["model"], r["batch"]] = os.path.basename(name)
    last = runs[-1][1]
    by_file: dict[str, list[str]] = {}
    for key, name in source.items():
        by_file.setdefault(name, []).append(f"{key[0]} b{key[1]} ({len(rows[key]['rounds'])})")
    return {
        **last,
        "rows": list(rows.values()),
        "rounds": "per row",
        "default_seconds": min(d.get("default_seconds", d.get("engine_seconds", 60.0)) for _, d in runs),
        "sources": [f"{name}: {', '.join(keys)}" for name, keys in by_file.items()],
    }


def _runs(data: dict, r: dict, cfg: str) -> list[dict]:
    row = next(x for x in data["rows"] if x["model"] == r["model"] and x["batch"] == r["batch"])
    return [rnd[cfg] for rnd in row["rounds"] if cfg in rnd and "error" not in rnd[cfg]]


# ------------------------------------------------------------------------------ driver


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--only", default=None, help="comma-separated model names (default: all of user_models.SERVING)")
    ap.add_argument("--batches", default="batch1,serving", help="which of SERVING's batches: batch1, serving")
    ap.add_argument(
        "--rows",
        default=None,
        metavar="NAME:BATCH,...",
        help="explicit rows instead of --only x --batches, e.g. mobilenet_v2:batch1,dlrm:serving",
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0, help="enable()'s first start runs this long")
    ap.add_argument("--window", type=float, default=None, help="first window for p50/p99 (default: --seconds)")
    ap.add_argument("--engine-seconds", type=float, default=15.0, help="traffic per engine process")
    ap.add_argument(
        "--default-seconds",
        type=float,
        default=None,
        help="traffic per default process (default: the window, so that the first-window p99s compare like for like)",
    )
    ap.add_argument("--second-seconds", type=float, default=5.0, help="traffic of enable()'s second start")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="a subset of the configurations, in run order")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "engines.json"))
    ap.add_argument(
        "--summarise",
        metavar="JSON[,JSON]",
        help="a saved run's tables and goals; several: each row from the last run that measured it",
    )
    ap.add_argument(
        "--ceilings",
        metavar="JSON[,JSON]",
        help="with --summarise: engine_call_ceiling.py results, each capping its row's best reachable",
    )
    args = ap.parse_args()
    if args.summarise:
        ceilings = {}
        for path in filter(None, (args.ceilings or "").split(",")):
            with _open(path, "rt") as fh:
                c = json.load(fh)
            ceilings[c["model"], int(c["batch"])] = float(c["ceiling_vs_ort_alone"])
        runs = []
        for path in args.summarise.split(","):
            with _open(path, "rt") as fh:
                runs.append((path, json.load(fh)))
        print(summarise(runs[0][1] if len(runs) == 1 else latest_rows(runs), ceilings))
        return 0
    if not args.model_dir or not os.path.isdir(args.model_dir):
        ap.error("give the directory written by benchmarks/user_models.py")
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS + EXTRA_CONFIGS]
    if unknown:
        ap.error(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS + EXTRA_CONFIGS)}")
    if "default" not in configs:
        configs.insert(0, "default")  # the reference for the outputs' differences
    names = args.only.split(",") if args.only else list(SERVING)
    pairs = [(n, w) for n in names for w in args.batches.split(",")]
    if args.rows:
        pairs = [tuple(x.split(":", 1)) for x in args.rows.split(",") if x]
    rows = [{"model": n, "batch": SERVING[n][w], "rounds": []} for n, w in pairs]
    window_s = args.window or args.seconds
    data = {
        "host": host(),
        "rows": rows,
        "window_s": window_s,
        "seconds": args.seconds,
        "engine_seconds": args.engine_seconds,
        "default_seconds": args.default_seconds or window_s,
        "rounds": args.rounds,
        "command": " ".join(sys.argv),
        "load_avg_start": os.getloadavg(),
    }
    skip_bf16 = None
    if "enable-bf16" in configs and not enable_takes_precision():
        skip_bf16 = "tf_autopar.enable() takes no precision argument"
    work = tempfile.mkdtemp(prefix="tfa_engines_")
    t0 = time.time()
    try:
        for rnd in range(args.rounds):
            for row in rows:
                rowdir = os.path.join(work, f"{row['model']}_b{row['batch']}")
                inputs = os.path.join(rowdir, "inputs.npz")
                if not os.path.exists(inputs):  # fixed-seed inputs, once per row, every configuration the same
                    import numpy as np

                    os.makedirs(rowdir)
                    np.savez(inputs, **make_inputs(row["model"], row["batch"], seed=0))
                cache = os.path.join(rowdir, f"cache_r{rnd}")
                os.makedirs(cache)
                results: dict = {}
                for cfg in configs:
                    if cfg == "enable-bf16" and skip_bf16:
                        results[cfg] = {"config": cfg, "skipped": skip_bf16}
                        continue
                    seconds = {
                        "enable": args.seconds,
                        "enable-unpaced": args.seconds,
                        "enable-bf16": args.seconds,
                        "enable-2nd": args.second_seconds,
                        "default": data["default_seconds"],
                        "default-again": data["default_seconds"],
                    }
                    res = run_child(
                        cfg,
                        args.model_dir,
                        row["model"],
                        row["batch"],
                        seconds.get(cfg, args.engine_seconds),
                        os.path.join(cache, {"enable-bf16": "bf16", "enable-unpaced": "unpaced"}.get(cfg, "f32")),
                        rowdir,
                        f"r{rnd}",
                    )
                    ref = results.get("default", {}).get("outputs_file")
                    if res.get("outputs_file") and ref:
                        res["max_rel_diff"] = max_rel_diff(res["outputs_file"], ref)
                        if cfg in BF16_CONFIGS:  # the fast path's own check of a bf16 candidate
                            res["bf16_differs"] = bf16_differs(res["outputs_file"], ref)
                    results[cfg] = res
                    if "error" in res:
                        print(f"  {row['model']} b{row['batch']} {cfg}: ERROR {res['error'][-300:]}", flush=True)
                row["rounds"].append(results)
                s = row_summary(row, window_s)
                print(
                    f"round {rnd + 1} {row['model']} b{row['batch']}: default {_ms(s['default_ms'])} ms, "
                    + ", ".join(f"{c} {_cell(s.get(c, {}))}" for c in configs if c not in ("default", "default-again"))
                    + f"; {time.time() - t0:.0f} s",
                    flush=True,
                )
                data["wall_s"] = round(time.time() - t0, 1)
                data["load_avg_end"] = os.getloadavg()
                with _open(args.out, "wt") as fh:
                    json.dump(data, fh)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(summarise(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
