#!/usr/bin/env python
"""A server under a container's memory limit: TensorFlow's default path against ``enable()``.

For each SavedModel (built by benchmarks/user_models.py; none a bundled workload), a server-style
program in a fresh process inside a real cgroup-v1 memory group (tests/cgroup_memory.py: hard
limit, swap limited alike, the child joins before exec): load with ``tf.saved_model.load``, call
``signatures["serving_default"]`` by keyword at batch 1, read the outputs back as numpy, for
``--seconds``. First the default path's peak is measured in a group with a generous limit
(``--measure-limit-mb``); then every configuration runs under limits of ``--factors`` times that
peak (1.5x, 2x, 3x). Configurations:

- ``default``: TensorFlow alone;
- ``enable``: ``tf_autopar.enable()`` at the top, on an empty plan cache (a first start: the fast
  path builds its frozen copy in the background while the original path serves).

Per run: exit status (137 and the group's oom_kill count = OOM-killed), the group's peak
(memory.max_usage_in_bytes: what the limit counts, page cache included) against the limit,
requests answered, median latency, which path served batch 1 at the end (tf_autopar.status(),
enabled runs), and when the process died. The child prints a progress line every second, so a
killed run still says how far it got.

``--multi``: eight models (the names given, repeated to eight) in one process, round-robin, for
``--seconds``, default against ``enable()``: peak RSS (ru_maxrss) and the group's peak, under the
generous limit.

    python benchmarks/user_models.py /work/user_models --only xception
    python benchmarks/bench_memory.py /work/user_models --only xception --seconds 30 \\
        --out benchmarks/results/memory_before_xeon.json
    python benchmarks/bench_memory.py /work/user_models --multi --only mobilenet_v2,nasnet_mobile \\
        --seconds 60 --out /tmp/memory_multi.json
    python benchmarks/bench_memory.py --summarise benchmarks/results/memory_before_xeon.json

Needs root and a writable cgroup-v1 memory controller (exits with the reason otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
from _host import processor  # noqa: E402
from cgroup_memory import MemoryCgroup, MemoryCgroupUnavailable, own_memory_group  # noqa: E402

MB = 1 << 20
CONFIGS = ("default", "enable")

# ------------------------------------------------------------------------------ the child (a server)

CHILD = r"""
import json, os, resource, sys, time
cfg, seconds, here = sys.argv[1], float(sys.argv[2]), sys.argv[3]
models = [(p, n) for p, n in (x.split("=", 1) for x in sys.argv[4:])]
sys.path.insert(0, here)
t_proc = time.perf_counter()
if cfg == "enable":
    import tf_autopar
    tf_autopar.enable()
import numpy as np, tensorflow as tf
import user_models

def inputs_for(name, sig, batch=1):
    if name in user_models.INPUTS:
        return user_models.make_inputs(name, batch)
    out = {}
    for key, spec in sig.structured_input_signature[1].items():
        shape = [batch if d is None else d for d in spec.shape]
        out[key] = np.zeros(shape, dtype=spec.dtype.as_numpy_dtype)
    return out

def paths():
    if cfg != "enable":
        return {}
    out = {}
    for s in tf_autopar.status().served:
        if s.function == "signatures['serving_default']":
            b = [x for x in s.buckets if x.bucket == 1]
            out[s.model] = (b[0].path + (": " + b[0].reason if b[0].reason else "")) if b else (s.stopped or "no bucket")
    return out

def line(kind, **kw):
    kw.update(t=round(time.perf_counter() - t_proc, 2), rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(kind + " " + json.dumps(kw), flush=True)

served = []
t0 = time.perf_counter()
for path, name in models:
    loaded = tf.saved_model.load(path)
    sig = loaded.signatures["serving_default"]
    served.append((name, loaded, sig, inputs_for(name, sig)))
line("LOADED", load_s=round(time.perf_counter() - t0, 2))
times, last, k = [], time.perf_counter(), 0
start = time.perf_counter()
while time.perf_counter() - start < seconds:
    name, _, sig, inputs = served[k % len(served)]
    k += 1
    t = time.perf_counter()
    result = {key: v.numpy() for key, v in sig(**inputs).items()}
    times.append((time.perf_counter() - t) * 1e3)
    if time.perf_counter() - last >= 1.0:
        last = time.perf_counter()
        line("PROGRESS", n=len(times), ms=times[-50:], paths=paths())
line("RESULT", n=len(times), ms=times, paths=paths(),
     status=tf_autopar.status().text() if cfg == "enable" else "")
"""


def child_env(cache: str) -> dict[str, str]:
    """This environment without thread or tf_autopar settings, quiet, the repository importable,
    an empty plan cache of its own (each enabled run is a first start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["TF_AUTOPAR_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    return env


def parse_output(stdout: str) -> dict:
    """The child's last progress (or its result): requests, latencies, paths, peak RSS, when."""
    out: dict = {"n": 0, "ms": [], "paths": {}, "finished": False}
    samples: list[float] = []
    for raw in stdout.splitlines():
        kind, _, body = raw.partition(" ")
        if kind not in ("LOADED", "PROGRESS", "RESULT"):
            continue
        try:
            d = json.loads(body)
        except ValueError:
            continue  # a line cut by the kill
        out["last_t_s"], out["rss_mb"] = d["t"], d["rss_mb"]
        if kind == "LOADED":
            out["load_s"], out["loaded_at_s"] = d["load_s"], d["t"]
        elif kind == "PROGRESS":
            out["n"], out["paths"] = d["n"], d["paths"]
            samples.extend(d["ms"])  # the last 50 per second: enough for a median of a killed run
        else:
            out.update(n=d["n"], paths=d["paths"], status=d.get("status", ""), finished=True)
            samples = d["ms"]
    out["ms"] = samples
    return out


def run(cfg: str, models: list[tuple[str, str]], seconds: float, limit: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="tfa_memory_") as cache, MemoryCgroup(limit) as group:
        args = [sys.executable, "-c", CHILD, cfg, str(seconds), HERE] + [f"{p}={n}" for p, n in models]
        res = group.run(args, timeout=timeout, env=child_env(cache))
    child = parse_output(res.stdout)
    ms = child.pop("ms")
    row = {"config": cfg, "limit_mb": round(limit / MB, 1), **res.to_dict()}
    row.update(
        peak_mb=round(res.peak_bytes / MB, 1),
        requests=child["n"],
        median_ms=round(statistics.median(ms), 2) if ms else None,
        median_last_ms=round(statistics.median(ms[-max(1, len(ms) // 3) :]), 2) if ms else None,
        paths_at_end=child["paths"],
        finished=child["finished"],
        died_at_s=None if child["finished"] else child.get("last_t_s"),
        peak_rss_mb=child.get("rss_mb"),
        load_s=child.get("load_s"),
    )
    if child.get("status"):
        row["status"] = child["status"]
    if not child["finished"] and not res.oom_killed:
        row["stderr_tail"] = _tail(res.stderr)
    return row


def _tail(text: str, n: int = 800) -> str:
    lines = [x for x in text.splitlines() if x.strip() and not re.match(r"^[IW]\d{4} ", x)]
    return "\n".join(lines)[-n:]


def host() -> dict:
    import importlib.metadata as md

    tf_version = "?"
    for dist in ("tensorflow-cpu", "tensorflow", "intel-tensorflow"):
        try:
            tf_version = md.version(dist)
            break
        except md.PackageNotFoundError:
            continue
    from tf_autopar.topology.memory import MemoryReader

    mem = MemoryReader().read()
    return {
        "cpu_model": processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "ram_mb": round(mem.host_bytes / MB) if mem and mem.host_bytes else None,
        "kernel": platform.release(),
        "tf_version": tf_version,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "memory_parent": own_memory_group(),
    }


def _line(row: dict) -> str:
    fate = (
        "OOM-killed"
        if row["oom_killed"]
        else (
            "finished" if row["finished"] else f"exit {row['exit_status']}" + (" (timeout)" if row["timed_out"] else "")
        )
    )
    died = f" at {row['died_at_s']:.0f} s" if row.get("died_at_s") is not None else ""
    med = f"{row['median_ms']:.1f} ms" if row.get("median_ms") is not None else "-"
    paths = "; ".join(f"{k}: {v}" for k, v in (row.get("paths_at_end") or {}).items())
    return (
        f"{row['config']:<8} limit {row['limit_mb']:>7.0f} MB  peak {row['peak_mb']:>7.0f} MB "
        f"({row['peak_of_limit']:.2f})  exit {row['exit_status']:>3}  {fate}{died}  "
        f"{row['requests']} requests, median {med}" + (f"  [{paths}]" if paths else "")
    )


def summarise(data: dict) -> str:
    h = data["host"]
    lines = [f"processor: {h['cpu_model']} ({h['cpus']} CPUs, {h.get('ram_mb')} MB RAM), TF {h['tf_version']}"]
    for model in data.get("models", []):
        lines.append(
            f"\n{model['model']}: default path's peak {model['default_peak_mb']:.0f} MB "
            f"(under {model['measure_limit_mb']:.0f} MB), {data['seconds']:g} s per run, batch 1"
        )
        for row in model["rows"]:
            lines.append(f"  x{row['factor']:<4g} {_line(row)}")
        longer = model.get("longer")
        if longer:
            lines.append(f"  run again for {longer['seconds']:g} s: {longer.get('note', '')}")
            for row in longer["rows"]:
                lines.append(f"  x{row['factor']:<4g} {_line(row)}")
    if data.get("note"):
        lines.append(f"\n{data['note']}")
    if data.get("multi"):
        m = data["multi"]
        lines.append(f"\nmulti-model ({', '.join(m['models'])}), round-robin, {data['seconds']:g} s:")
        for row in m["rows"]:
            lines.append(f"  {_line(row)}  peak RSS {row.get('peak_rss_mb') or 0:.0f} MB")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?", help="the directory written by benchmarks/user_models.py")
    ap.add_argument("--only", default="xception", help="comma-separated model names (default: xception)")
    ap.add_argument("--seconds", type=float, default=30.0, help="traffic per run (default 30)")
    ap.add_argument("--factors", default="1.5,2,3", help="limits, as multiples of the default path's peak")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="default,enable")
    ap.add_argument(
        "--measure-limit-mb",
        type=float,
        default=6144,
        help="the generous limit the default path's peak is measured under",
    )
    ap.add_argument("--default-peak-mb", type=float, default=None, help="skip the measurement: use this peak")
    ap.add_argument("--multi", action="store_true", help="eight models in one process instead (peak RSS)")
    ap.add_argument("--timeout", type=float, default=600, help="kill a run after this many seconds")
    ap.add_argument("--out", default=None, help="write the results here (JSON)")
    ap.add_argument("--summarise", metavar="JSON", help="print the summary of an earlier run")
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise, encoding="utf-8") as fh:
            print(summarise(json.load(fh)))
        return 0
    if not args.model_dir or not os.path.isdir(args.model_dir):
        ap.error("give the directory written by benchmarks/user_models.py")
    try:
        info = host()
    except MemoryCgroupUnavailable as exc:
        print(f"bench_memory: {exc}", file=sys.stderr)
        return 2
    names = args.only.split(",")
    configs = args.configs.split(",")
    timeout = args.seconds + args.timeout
    data: dict = {"host": info, "seconds": args.seconds, "command": " ".join(sys.argv), "models": []}
    measure = int(args.measure_limit_mb * MB)

    def save() -> None:
        if args.out:
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1)

    if args.multi:
        picked = [(os.path.join(args.model_dir, n), n) for n in (names * 8)[:8]]
        rows = []
        for cfg in configs:
            rows.append(run(cfg, picked, args.seconds, measure, timeout))
            print("  " + _line(rows[-1]), flush=True)
        data["multi"] = {"models": [n for _, n in picked], "limit_mb": args.measure_limit_mb, "rows": rows}
        save()
        print(summarise(data))
        return 0
    for name in names:
        model = [(os.path.join(args.model_dir, name), name)]
        entry: dict = {"model": name, "measure_limit_mb": args.measure_limit_mb, "rows": []}
        data["models"].append(entry)
        if args.default_peak_mb:
            peak = int(args.default_peak_mb * MB)
        else:
            ref = run("default", model, args.seconds, measure, timeout)
            entry["measure"] = ref
            print(f"{name}: measuring the default path: {_line(ref)}", flush=True)
            if ref["oom_killed"] or not ref["finished"]:
                print(f"{name}: the default path did not finish under {args.measure_limit_mb:.0f} MB; skipped")
                continue
            peak = ref["peak_bytes"]
        entry["default_peak_mb"] = round(peak / MB, 1)
        for factor in (float(f) for f in args.factors.split(",")):
            for cfg in configs:
                row = run(cfg, model, args.seconds, int(peak * factor), timeout)
                row["factor"] = factor
                entry["rows"].append(row)
                print(f"{name} x{factor:g} {_line(row)}", flush=True)
                save()
    save()
    print(summarise(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
