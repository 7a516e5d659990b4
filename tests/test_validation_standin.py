"""A stand-in for `tf-autopar workloads run` used by the validation tests (no tests here).

Run as a script it accepts the workloads runner's arguments, does a tiny pure-Python
busy loop per step (no TensorFlow: the tests exercise the harness, not TF) and prints the
runner's JSON object. Environment knobs make it misbehave on purpose:

- STANDIN_LOG=path     append one JSON line per run: workload, mode, batch, thread env seen, pid, affinity
- STANDIN_CRASH=IxJ    exit 3 when started with TF_NUM_INTEROP_THREADS=I, TF_NUM_INTRAOP_THREADS=J
- STANDIN_HANG=IxJ     sleep for an hour in that configuration (timeouts)
- STANDIN_HANG_ALL=1   every run sleeps for an hour (Ctrl-C tests)
- STANDIN_HANG_AFTER=N every run after the N-th logged one sleeps for an hour (Ctrl-C tests)
- STANDIN_BADJSON=IxJ  print something that is not JSON in that configuration
- STANDIN_BURN_S=S     two processes burn CPU for S seconds before the steps (throttling under a quota)
- STANDIN_FAST=IxJ     steps in that configuration do a quarter of the work (a setting to be found)
- STANDIN_EXPORT_FAIL=1 the export (``--out DIR``) exits 3

The IxJ of the knobs is the process's TF_NUM_* pools, ``frozen:IxJ`` for a frozen session
(``--frozen IxJ``, the model child's flag) and ``live`` for ``--enable MODE --until-tuned``,
whose output reports one frozen session served (STANDIN_LIVE_SERVES, default 1x1) and its engine
(STANDIN_LIVE_ENGINE, default "tensorflow"); with ``--sweep IxJ,...`` it also times each
setting as ``frozen:IxJ`` would be (the payload's ``sweep``). With
``--out DIR`` it stands in for the export child: empty files and the export's JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _threads() -> str:
    return f"{os.environ.get('TF_NUM_INTEROP_THREADS', '0')}x{os.environ.get('TF_NUM_INTRAOP_THREADS', '0')}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--mode")
    p.add_argument("--batch", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--size")
    p.add_argument("--warmup", type=int)
    p.add_argument("--json", action="store_true")
    p.add_argument("--inputs")
    p.add_argument("--int-max")  # a model file's input flag (validate's tests pass this one)
    p.add_argument("--frozen")
    p.add_argument("--enable")
    p.add_argument("--until-tuned", action="store_true")
    p.add_argument("--sweep")
    p.add_argument("--out")
    a = p.parse_args()
    if a.out is not None:
        return export(a)
    threads = f"frozen:{a.frozen}" if a.frozen else "live" if a.enable else _threads()
    log = os.environ.get("STANDIN_LOG")
    previous = 0
    if log:
        if os.path.exists(log):
            with open(log) as f:
                previous = sum(1 for _ in f)
        with open(log, "a") as f:
            f.write(
                json.dumps(
                    {
                        "workload": a.name,
                        "mode": a.mode,
                        "batch": a.batch,
                        "threads": threads,
                        "omp": os.environ.get("OMP_NUM_THREADS"),
                        "pid": os.getpid(),
                        "affinity": sorted(os.sched_getaffinity(0)),
                        "inputs": a.inputs,
                        "env": {
                            k: v
                            for k, v in os.environ.items()
                            if k.startswith(("TF_OVERRIDE", "TF_AUTOPAR_CACHE", "TF_AUTOPAR_LEASE"))
                        },
                    }
                )
                + "\n"
            )
    hang_after = os.environ.get("STANDIN_HANG_AFTER")
    if hang_after is not None and previous >= int(hang_after):
        time.sleep(3600)
    if os.environ.get("STANDIN_HANG_ALL") or os.environ.get("STANDIN_HANG") == threads:
        time.sleep(3600)
    if os.environ.get("STANDIN_CRASH") == threads:
        print("stand-in: simulated crash", file=sys.stderr)
        return 3
    if os.environ.get("STANDIN_BADJSON") == threads:
        print("this is not json")
        return 0
    burn = float(os.environ.get("STANDIN_BURN_S", "0"))
    if burn > 0:  # two busy processes, like a multi-threaded runtime would be
        pid = os.fork()
        end = time.monotonic() + burn
        while time.monotonic() < end:
            pass
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    times = _steps(a, threads)
    s = sorted(times)
    extra: dict = {}
    if a.sweep:
        extra["sweep"] = {x: {"step_times_s": _steps(a, f"frozen:{x}")} for x in a.sweep.split(",")}
    if a.frozen:
        extra["settings"] = {"frozen_session": a.frozen}
    if a.enable:
        inter, intra = os.environ.get("STANDIN_LIVE_SERVES", "1x1").split("x")
        bucket = {"path": "frozen session", "inter_op": int(inter), "intra_op": int(intra), "calls": 9, "tuned": True}
        bucket["engine"] = os.environ.get("STANDIN_LIVE_ENGINE", "tensorflow")
        extra["tf_autopar"] = {"served": [{"buckets": [bucket]}], "tuned_s": 0.01, "switch_s": 0.01}
    print(
        json.dumps(
            {
                **extra,
                "workload": a.name,
                "mode": a.mode,
                "size": a.size,
                "batch": a.batch,
                "steps": a.steps,
                "path": "function",
                "step_times_s": times,
                "median_s": s[len(s) // 2],
                "p10_s": s[0],
                "p90_s": s[-1],
                "losses": [],
                "peak_rss_mb": 10.0,
                "build_s": 0.0,
            }
        )
    )
    return 0


def _steps(a: argparse.Namespace, threads: str) -> list[float]:
    """Step times of a pure-Python busy loop (a quarter of the work where STANDIN_FAST names ``threads``)."""
    times = []
    work = 2000 * a.batch // (4 if os.environ.get("STANDIN_FAST") == threads else 1)
    for _ in range(a.warmup + a.steps):
        t = time.perf_counter()
        sum(i * i for i in range(work))
        times.append(time.perf_counter() - t)
    return times[a.warmup :]


def export(a: argparse.Namespace) -> int:
    """The export child's stand-in: a SavedModel directory and an inputs file in ``a.out``."""
    if os.environ.get("STANDIN_EXPORT_FAIL"):
        print("stand-in: simulated export failure", file=sys.stderr)
        return 3
    path, inputs = os.path.join(a.out, "saved_model"), os.path.join(a.out, "inputs.npz")
    os.makedirs(path)
    open(os.path.join(path, "saved_model.pb"), "w").close()
    open(inputs, "w").close()
    print(json.dumps({"ok": True, "path": path, "inputs": inputs, "signature": "serving_default", "export_s": 0.0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
