#!/usr/bin/env python
"""Does a live trial against ONNX Runtime measure the engines, or what one leaves behind for the
other? One process, one model: TensorFlow's frozen session at a setting (the incumbent) and ONNX
Runtime at (1, 2, 1) in three variants (``nospin``: threads sleep between steps; ``spin``: they
spin, ONNX Runtime's default; ``spin-stop``: they spin inside a call and stop when it returns,
``session.force_spinning_stop``), and OpenVINO f32 at (1, 2, 1) (``openvino``: its own thread
pool, TBB's). Each, in interleaved rounds:

- ``trial``: the incumbent and the variant alternating in blocks of ``measure.live.BLOCK`` calls,
  the first of each untimed, each later call paired with the other's at the same place of the
  block before (as the fast path's trial pairs them); the median ratio incumbent / variant of
  ``--pairs`` pairs; ``trial_washout``: the same with the calls in the first ``linger_s`` of each
  block untimed as well (the runner's own figure: what the fast path's trial does);
- ``alone``: a long block of each (``--alone`` seconds, its first fifth dropped); the ratio of
  their medians: what each serves when it serves every call;
- ``after``: the incumbent's ms at each place of a ``--long``-call block that follows the
  variant's block: how long what the variant leaves behind slows the other;
- ``cpu_after``: the process's CPU time in each 25 ms while the calling thread sleeps after a
  call (each runner, the incumbent too): a runner whose threads spin on shows there.

A trial ratio above the alone ratio favours the variant: it won calls the other lost to it.

    python benchmarks/bench_trial_carryover.py --rows gru_tagger:32:2x1,mobilenet_v2:1:2x2,youtube_dnn:1:1x1 \\
        --rounds 3 --out benchmarks/results/trial_carryover_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402

VARIANTS = {"nospin": (False, False), "spin": (True, False), "spin-stop": (True, True)}


def _timed(runner, arrays: list) -> float:
    t = time.perf_counter()
    runner.run(arrays)
    return time.perf_counter() - t


def _trial(a, b, arrays: list, pairs: int, washout: float) -> list[float]:
    """``pairs`` ratios a / b, in the turns a live trial takes (measure.live.Turns, Pairer)."""
    from tf_autopar.measure.live import Pairer, Turns

    turns, pairer, ratios = Turns(washout=washout), Pairer(), []
    while len(ratios) < pairs:
        candidate, place = turns.take(time.monotonic())
        s = _timed(b if candidate else a, arrays)
        if place == 0:
            continue
        if not candidate:
            pairer.incumbent(0, s, place)
        elif (pair := pairer.candidate(0, s, place)) is not None:
            ratios.append(pair[0] / pair[1])
    return ratios


def _alone(runner, arrays: list, seconds: float) -> float:
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 10:
        times.append(_timed(runner, arrays))
    return statistics.median(times[len(times) // 5 :])


def _cpu_after(runner, arrays: list, windows: int = 8) -> list[float]:
    """The process's CPU ms in consecutive 25 ms sleeps right after a call returned."""
    runner.run(arrays)
    out = []
    for _ in range(windows):
        before = time.process_time()
        time.sleep(0.025)
        out.append((time.process_time() - before) * 1e3)
    return out


def row(models: str, name: str, batch: int, setting: tuple[int, int, int], args: argparse.Namespace) -> dict:
    import numpy as np

    from bench_engine_settings import _arrays, _frozen
    from tf_autopar.runtime.fastpath import engines
    from tf_autopar.runtime.fastpath.engines.onnxruntime_engine import OnnxRuntimeRunner

    frozen, _loaded = _frozen(models, name)
    arrays = _arrays(frozen, name, batch)
    tf_runner = engines.get("tensorflow").build(frozen, setting)
    variants = {v: OnnxRuntimeRunner(frozen, (1, 2, 1), spin=s, stop=stop) for v, (s, stop) in VARIANTS.items()}
    variants["openvino"] = engines.get("openvino").build(frozen, (1, 2, 1))
    for r in (tf_runner, *variants.values()):
        for _ in range(5):
            r.run(arrays)
    out: dict = {v: {"trial": [], "washout": [], "alone": [], "after": []} for v in variants}
    for rnd in range(args.rounds):
        order = list(variants)[rnd % len(variants) :] + list(variants)[: rnd % len(variants)]
        for v in order:
            ratios = _trial(tf_runner, variants[v], arrays, args.pairs, 0.0)
            washed = _trial(tf_runner, variants[v], arrays, args.pairs, getattr(variants[v], "linger_s", 0.0))
            tf_ms, v_ms = _alone(tf_runner, arrays, args.alone), _alone(variants[v], arrays, args.alone)
            _alone(variants[v], arrays, 0.05)
            after = [_timed(tf_runner, arrays) for _ in range(args.long)]
            out[v]["trial"].append(statistics.median(ratios))
            out[v]["washout"].append(statistics.median(washed))
            out[v]["alone"].append(tf_ms / v_ms)
            out[v]["after"].append(after)
    result: dict = {
        "cpu_after_ms_per_25ms": {
            v: [round(float(x), 1) for x in np.median([_cpu_after(r, arrays) for _ in range(3)], axis=0)]
            for v, r in {"incumbent": tf_runner, **variants}.items()
        }
    }
    for v, got in out.items():
        after = np.median(np.array(got["after"]), axis=0) * 1e3
        result[v] = {
            "trial_ratio": round(statistics.median(got["trial"]), 3),
            "trial_washout_ratio": round(statistics.median(got["washout"]), 3),
            "linger_s": getattr(variants[v], "linger_s", 0.0),
            "alone_ratio": round(statistics.median(got["alone"]), 3),
            "trial_over_alone": round(statistics.median(t / a for t, a in zip(got["trial"], got["alone"])), 3),
            "trial_ratios": [round(x, 3) for x in got["trial"]],
            "trial_washout_ratios": [round(x, 3) for x in got["washout"]],
            "alone_ratios": [round(x, 3) for x in got["alone"]],
            "incumbent_after_ms_by_place": [round(float(x), 3) for x in after],
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="/work/user_models")
    ap.add_argument(
        "--rows", default="gru_tagger:32:2x1,mobilenet_v2:1:2x2,youtube_dnn:1:1x1", help="MODEL:BATCH:INTERxINTRA,..."
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=60, help="paired calls per trial")
    ap.add_argument("--alone", type=float, default=1.0, help="seconds of each alone per round")
    ap.add_argument("--long", type=int, default=16, help="incumbent calls timed after the variant's block")
    ap.add_argument("--out")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        name, batch, setting = args.worker
        inter, intra = (int(v) for v in setting.split("x"))
        print("@@" + json.dumps(row(args.models, name, int(batch), (inter, intra, 1), args)), flush=True)
        return
    import onnxruntime

    result: dict = {
        "processor": processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "onnxruntime": onnxruntime.__version__,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_at_start": os.getloadavg(),
        "command": " ".join(sys.argv),
        "rows": {},
    }
    for spec in args.rows.split(","):
        name, batch, setting = spec.split(":")
        argv = [sys.executable, os.path.abspath(__file__), "--worker", name, batch, setting]
        argv += ["--models", args.models, "--rounds", str(args.rounds), "--pairs", str(args.pairs)]
        argv += ["--alone", str(args.alone), "--long", str(args.long)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("@@")]
        got = json.loads(lines[-1][2:]) if lines else {"error": done.stderr[-2000:]}
        result["rows"][f"{name} b{batch} TF {setting}"] = got
        for v, r in got.items():
            if v in ("error", "cpu_after_ms_per_25ms"):
                print(name, batch, setting, v, r)
                continue
            print(name, batch, setting, v, {k: r[k] for k in ("trial_ratio", "trial_washout_ratio", "alone_ratio")})
            print("   incumbent after it, ms by place:", r["incumbent_after_ms_by_place"])
    result["load_average_at_end"] = os.getloadavg()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
