#!/usr/bin/env python
"""Each engine alone, at the settings the fast path would give it, on non-bundled SavedModels.

Per model (mobilenet_v2 b1, efficientnet_b0 b1, dlrm b64, bert_encoder b4 by default), one
worker process per environment, all holding their runners at once, driven in interleaved rounds
(each round runs every configuration for about ``--per`` seconds, the order rotated round to
round); the figure is the median over rounds of each round's median ms per call (and the median over rounds of each round's 10th percentile, which
keeps less of other jobs' preemption on a shared host). Configurations:

- ``tf``: TensorFlow's frozen session (engines "tensorflow") at 1 inter-op x 2 intra-op;
- ``ov-f32``: engines "openvino" at (1, 2, 1) (free input shapes); ``ov-f32-static``: the same
  with a copy compiled for the call's shapes (``build(..., shapes=)``); ``ov-bf16``: engines "openvino-bf16" at (1, 2, 1);
- ``ov-latency``: OpenVINO with only ``PERFORMANCE_HINT=LATENCY`` and f32 (its own choice of
  threads and streams: what a user converting by hand would run); ``ov-latency-bf16``: the same
  at OpenVINO's default precision (bf16 on a CPU with AVX512_BF16 or AMX);
- ``ort-nospin`` / ``ort-spin``: engines "onnxruntime" at (1, 2, 1), intra-op spinning off / on;
  ``ort-spin-stop``: spinning inside a call, stopped when it returns (``session.force_spinning_stop``);
  ``ort-nospin-1t`` / ``ort-spin-1t`` / ``ort-spin-stop-1t``: the same at (1, 1, 1), the calling thread alone;
- ``tf-xla``: the frozen session with ``global_jit_level=ON_1`` in a process started with
  ``TF_XLA_FLAGS=--tf_xla_cpu_global_jit`` (``tf@xla``: the plain session in that process, to
  see whether the flag alone changes it);
- ``tf@frozen-weights``: the frozen session in a process with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1.

Each configuration's outputs are compared with ``tf``'s on the same inputs (largest difference
relative to the largest output). ``--memory``: what a runner adds to RSS, per byte of the frozen
constants (fresh process per model and engine): the first build (conversion and compilation)
and a second at another setting (compilation only).

    python benchmarks/bench_engine_settings.py --out benchmarks/results/engine_settings_epyc.json
    python benchmarks/bench_engine_settings.py --memory --out benchmarks/results/engine_memory_epyc.json
    python benchmarks/bench_engine_settings.py --rows mobilenet_v2,lstm_classifier,tiny_mlp,dlrm \
        --configs ort-nospin,ort-spin,ov-f32 --out benchmarks/results/engine_spinning_epyc.json
    python benchmarks/bench_engine_settings.py --rows gru_tagger:32,lstm_classifier:1,mobilenet_v2:1,youtube_dnn:1,tiny_mlp:1,dlrm:64,efficientnet_b0:1,dcn_v2:1 \
        --configs ort-nospin,ort-spin,ort-spin-stop,ort-spin-1t,ort-spin-stop-1t --rounds 7 --per 0.5 \
        --out benchmarks/results/engine_spin_stop_epyc.json
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402
from user_models import make_inputs  # noqa: E402

ROWS = {"mobilenet_v2": 1, "efficientnet_b0": 1, "dlrm": 64, "bert_encoder": 4}
#: more rows by name (``--rows lstm_classifier,tiny_mlp``): each model's batch here
EXTRA_ROWS = {
    "lstm_classifier": 1,
    "tiny_mlp": 1,
    "gru_tagger": 1,
    "unet_small": 1,
    "nasnet_mobile": 1,
    "dcn_v2": 1,
    "youtube_dnn": 1,
    "gpt_decoder": 1,
}
GROUPS = {
    "base": (
        {},
        [
            "tf",
            "ov-f32",
            "ov-f32-static",
            "ov-latency",
            "ort-nospin",
            "ort-spin",
            "ort-spin-1t",
            "ort-nospin-1t",
            "ort-spin-stop",
            "ort-spin-stop-1t",
            "ov-bf16",
        ],
    ),
    "xla": ({"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit"}, ["tf@xla", "tf-xla"]),
    "frozen-weights": ({"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"}, ["tf@frozen-weights"]),
}
SETTING = (1, 2, 1)


# ------------------------------------------------------------------------------ worker side


def _frozen(models: str, name: str):
    import tensorflow as tf

    from tf_autopar.runtime.frozen import FrozenGraph

    loaded = tf.saved_model.load(os.path.join(models, name))
    return FrozenGraph(loaded.signatures["serving_default"]), loaded


def _arrays(frozen, name: str, batch: int) -> list:
    """The signature's inputs in placeholder order (placeholders are named after them)."""
    feeds = make_inputs(name, batch)
    return [feeds[n.split(":")[0]] for n in frozen.inputs]


def _build(cfg: str, frozen, arrays: list) -> object:
    """A runner-like object with ``run(arrays)``."""
    import numpy as np

    from tf_autopar.runtime.fastpath import engines

    base = cfg.split("@")[0]
    if base == "tf":
        return engines.get("tensorflow").build(frozen, SETTING)
    if base == "ov-f32":
        return engines.get("openvino").build(frozen, SETTING)
    if base == "ov-f32-static":
        return engines.get("openvino").build(frozen, SETTING, shapes=[a.shape for a in arrays])
    if base == "ov-bf16":
        return engines.get("openvino-bf16").build(frozen, SETTING)
    if base in ("ort-nospin", "ort-spin", "ort-spin-stop", "ort-nospin-1t", "ort-spin-1t", "ort-spin-stop-1t"):
        from tf_autopar.runtime.fastpath.engines.onnxruntime_engine import OnnxRuntimeRunner

        one = base.endswith("-1t")  # one intra-op thread: the calling thread alone
        return OnnxRuntimeRunner(
            frozen, (1, 1, 1) if one else SETTING, spin=base.startswith("ort-spin"), stop="-stop" in base
        )
    if base in ("ov-latency", "ov-latency-bf16"):
        from tf_autopar.runtime.fastpath.engines import openvino_engine

        model, _ = openvino_engine._conversions.get(frozen, openvino_engine._convert)
        config = {"PERFORMANCE_HINT": "LATENCY"}
        if base == "ov-latency":
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = openvino_engine.core().compile_model(model, "CPU", config)
        request = compiled.create_infer_request()
        ports = [compiled.outputs[openvino_engine._port_index(compiled.outputs, n)] for n in frozen.outputs]
        order = [openvino_engine._port_index(compiled.inputs, n) for n in frozen.inputs]

        class _Latency:
            def run(self, arrays: list) -> list:
                out = request.infer(dict(zip(order, arrays)))
                return [np.array(out[p]) for p in ports]

            def describe(self) -> dict:
                return {
                    k: getattr(v, "to_string", lambda v=v: str(v))()
                    for k, v in (
                        (k, compiled.get_property(k))
                        for k in (
                            "NUM_STREAMS",
                            "INFERENCE_NUM_THREADS",
                            "INFERENCE_PRECISION_HINT",
                            "ENABLE_CPU_PINNING",
                        )
                    )
                }

        return _Latency()
    if base == "tf-xla":
        import tensorflow as tf

        from tf_autopar.runtime.streams import StreamPool

        config = tf.compat.v1.ConfigProto(
            inter_op_parallelism_threads=SETTING[0],
            intra_op_parallelism_threads=SETTING[1],
            use_per_session_threads=True,
        )
        config.graph_options.optimizer_options.global_jit_level = tf.compat.v1.OptimizerOptions.ON_1
        pool = StreamPool([tf.compat.v1.Session(graph=frozen.graph, config=config)])

        class _Xla:
            def run(self, arrays: list) -> list:
                return pool.run(frozen.outputs, dict(zip(frozen.inputs, arrays)))

            def describe(self) -> dict:
                return {"global_jit_level": "ON_1", "setting": SETTING}

        return _Xla()
    raise ValueError(cfg)


def _rel(ref: list, got: list) -> float:
    import numpy as np

    worst = 0.0
    for r, g in zip(ref, got):
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape:
            return float("inf")
        scale = max(float(np.max(np.abs(r))), 1e-30) if r.size else 1.0
        worst = max(worst, float(np.max(np.abs(r.astype(np.float64) - g))) / scale if r.size else 0.0)
    return worst


def worker(models: str, name: str, batch: int, cfgs: list[str]) -> None:
    """Build every configuration, answer "round" lines with each one's median ms (stdout lines
    starting with "@@" are the protocol; anything else a library prints is ignored)."""
    import numpy as np

    def say(obj: object) -> None:
        sys.stdout.write("@@" + json.dumps(obj) + "\n")
        sys.stdout.flush()

    frozen, _loaded = _frozen(models, name)
    arrays = _arrays(frozen, name, batch)
    from tf_autopar.runtime.fastpath import engines

    ref = engines.get("tensorflow").build(frozen, SETTING).run(arrays)
    runners, info = {}, {}
    for cfg in cfgs:
        t0 = time.perf_counter()
        try:
            runner = _build(cfg, frozen, arrays)
            out = runner.run(arrays)  # first call (compiles XLA clusters, ...)
            build_s = time.perf_counter() - t0
            for _ in range(3):
                runner.run(arrays)
            runners[cfg] = runner
            info[cfg] = {
                "build_s": round(build_s, 2),
                "max_rel_diff_vs_tf": _rel(ref, out),
                "dtypes_equal": [str(np.asarray(a).dtype) for a in out] == [str(a.dtype) for a in ref],
                "describe": {k: str(v) for k, v in runner.describe().items()} if hasattr(runner, "describe") else {},
            }
        except Exception as exc:  # a failed conversion is a result too
            info[cfg] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    say({"ready": info})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("stop"):
            break
        cfg, per = cmd["cfg"], cmd["per"]
        runner = runners.get(cfg)
        if runner is None:
            say({"cfg": cfg, "ms": None})
            continue
        times = []
        end = time.perf_counter() + per
        while time.perf_counter() < end or len(times) < 5:
            t = time.perf_counter()
            runner.run(arrays)
            times.append((time.perf_counter() - t) * 1e3)
        times.sort()
        say({"cfg": cfg, "ms": statistics.median(times), "p10": times[len(times) // 10], "calls": len(times)})


# ------------------------------------------------------------------------------ driver side


class _Worker:
    def __init__(self, models: str, name: str, batch: int, group: str, cfgs: list[str]) -> None:
        env_extra, self.cfgs = GROUPS[group][0], cfgs
        env = {**os.environ, **env_extra, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
        argv = [sys.executable, os.path.abspath(__file__), "--worker", models, name, str(batch), ",".join(self.cfgs)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )

    def read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise RuntimeError(f"worker ended (rc {self.proc.wait()})")

    def ask(self, obj: dict) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"stop": True}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()


def bench_row(models: str, name: str, batch: int, rounds: int, per: float, only: set[str] | None = None) -> dict:
    groups = {g: [c for c in cfgs if only is None or c in only] for g, (_, cfgs) in GROUPS.items()}
    workers = {g: _Worker(models, name, batch, g, groups[g]) for g in GROUPS if groups[g]}
    info: dict = {}
    try:
        for w in workers.values():  # built one after the other: builds do not compete
            info.update(w.read()["ready"])
        cfgs = [(g, c) for g, w in workers.items() for c in w.cfgs]
        per_round: dict[str, list[float]] = {c: [] for _, c in cfgs}
        p10s: dict[str, list[float]] = {c: [] for _, c in cfgs}
        for r in range(rounds):
            k = r % len(cfgs)
            for g, c in cfgs[k:] + cfgs[:k]:
                answer = workers[g].ask({"cfg": c, "per": per})
                if answer["ms"] is not None:
                    per_round[c].append(answer["ms"])
                    p10s[c].append(answer["p10"])
    finally:
        for w in workers.values():
            w.stop()
    tf_ms = statistics.median(per_round["tf"]) if per_round["tf"] else None
    tf_p10 = statistics.median(p10s["tf"]) if p10s["tf"] else None
    out = {}
    for c, values in per_round.items():
        row = dict(info.get(c, {}))
        if values:
            med = statistics.median(values)
            row.update(
                median_ms=round(med, 4),
                round_min_ms=round(min(values), 4),
                round_max_ms=round(max(values), 4),
                rounds=len(values),
                speedup_vs_tf=round(tf_ms / med, 3) if tf_ms else None,
                # the 10th percentile of each round's calls, median over rounds: less of the
                # other jobs' preemption in it on a loaded host
                p10_ms=round(statistics.median(p10s[c]), 4),
                p10_speedup_vs_tf=round(tf_p10 / statistics.median(p10s[c]), 3) if tf_p10 else None,
            )
        out[c] = row
    return out


MEMORY_CHILD = r"""
import gc, json, os, sys, ctypes
sys.path.insert(0, sys.argv[4])
from bench_engine_settings import _frozen, _arrays
models, name, engine = sys.argv[1], sys.argv[2], sys.argv[3]
batch = int(sys.argv[5])
def rss():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
frozen, loaded = _frozen(models, name)
arrays = _arrays(frozen, name, batch)
from tf_autopar.runtime.fastpath import engines
from tf_autopar.runtime.fastpath.engines import foreign
constants = foreign.constant_bytes(frozen)
import openvino, onnxruntime, tf2onnx  # imported before the baseline: their libraries are not the copy
import numpy as np, tensorflow as tf
from tf_autopar.runtime.frozen import FrozenGraph
w = tf.constant(np.ones((16, 16), np.float32))
tiny = FrozenGraph(tf.function(lambda x: tf.matmul(x, w)).get_concrete_function(tf.TensorSpec([None, 16], tf.float32)))
r_cold = rss()
warm = engines.get(engine).build(tiny, (1, 1, 1)); warm.run([np.ones((1, 16), np.float32)]); warm.close(); del warm
r0 = rss()  # the engine's libraries loaded, its pools made: what follows is this model's copy
first = engines.get(engine).build(frozen, (1, 1, 1)); first.run(arrays)
r1 = rss()
second = engines.get(engine).build(frozen, (1, 2, 1)); second.run(arrays)
r2 = rss()
print("@@" + json.dumps({"constants": constants, "first_use": r0 - r_cold, "first_build": r1 - r0, "second_build": r2 - r1,
                         "first_estimate": first.bytes, "second_estimate": second.bytes}))
"""


def bench_memory(models: str) -> dict:
    out: dict = {}
    for name, batch in ROWS.items():
        for engine in ("openvino", "onnxruntime"):
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
            proc = subprocess.run(
                [sys.executable, "-c", MEMORY_CHILD, models, name, engine, HERE, str(batch)],
                capture_output=True,
                text=True,
                env=env,
            )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")]
            if not lines:
                out[f"{name}/{engine}"] = {"error": proc.stderr.strip().splitlines()[-1:] or f"rc {proc.returncode}"}
                continue
            row = json.loads(lines[-1][2:])
            c = row["constants"]
            row["first_factor"] = round(row["first_build"] / c, 3)
            row["second_factor"] = round(row["second_build"] / c, 3)
            out[f"{name}/{engine}"] = row
            print(name, engine, row, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="/work/user_models")
    ap.add_argument(
        "--rows", default=",".join(ROWS), help="models, each NAME or NAME:BATCH (batches otherwise: %s)" % ROWS
    )
    ap.add_argument("--configs", help="only these configurations (comma list; tf always)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--per", type=float, default=0.3, help="seconds per configuration per round")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--worker", nargs=4, metavar=("MODELS", "NAME", "BATCH", "CFGS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        models, name, batch, cfgs = args.worker
        worker(models, name, int(batch), cfgs.split(","))
        return
    import onnxruntime
    import openvino

    result: dict = {
        "processor": processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "openvino": openvino.__version__,
        "onnxruntime": onnxruntime.__version__,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_at_start": os.getloadavg(),
    }
    if args.memory:
        result["memory"] = bench_memory(args.models)
    else:
        result.update(setting=SETTING, rounds=args.rounds, per_s=args.per, rows={})
        only = {"tf", *args.configs.split(",")} if args.configs else None
        for spec in args.rows.split(","):
            name, _, given = spec.partition(":")
            batch = int(given) if given else {**ROWS, **EXTRA_ROWS}[name]
            row = bench_row(args.models, name, batch, args.rounds, args.per, only)
            result["rows"][f"{name} b{batch}"] = row
            print(
                name, batch, {c: (r.get("median_ms"), r.get("speedup_vs_tf"), r.get("error")) for c, r in row.items()}
            )
            if args.out:
                _write(args.out, result)
    result["load_average_at_end"] = os.getloadavg()
    if args.out:
        _write(args.out, result)


def _write(path: str, result: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
