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
``--seconds``, default against ``enable()``: peak RSS (ru_maxrss) and the group's peak, in a group
whose limit is the host's RAM (``--multi-limit-mb``): the fast path reads that as no limit, so its
own bound (twice the process's memory without it, runtime/fastpath/memory.py) is what holds.

``--gunicorn``: the example app (benchmarks/memory_app.py: examples/serving/app.py plus GET
/builds) under gunicorn with ``--workers`` workers, the master and its workers in one memory group
(a pod's limit): the default path's peak measured first, then ``--factors`` times it, default and
enable() interleaved, ``--clients`` threads sending POST /predict at batch 1 for ``--seconds``:
the group's peak and OOM kills, requests answered and failed, the path each worker serves, and
whether two workers ever held the build lock at the same moment.

    python benchmarks/user_models.py /work/user_models --only xception
    python benchmarks/bench_memory.py /work/user_models --only xception --seconds 30 \\
        --out benchmarks/results/memory_before_xeon.json
    python benchmarks/bench_memory.py /work/user_models --multi --only mobilenet_v2,nasnet_mobile \\
        --seconds 60 --out /tmp/memory_multi.json
    python benchmarks/bench_memory.py /work/user_models --gunicorn --only xception --factors 1.5,2 \
        --seconds 60 --out /tmp/memory_gunicorn.json
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
sys.path.insert(0, REPO)  # examples.serving, for --gunicorn
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
    if BUILD_NICE:
        env["TF_AUTOPAR_BUILD_NICE"] = BUILD_NICE
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


#: --build-nice: TF_AUTOPAR_BUILD_NICE for the enabled runs ("" leaves the library's default, 10)
BUILD_NICE = ""


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


# ------------------------------------------------------------------------------ a gunicorn pod


def gunicorn_run(cfg: str, model: str, name: str, workers: int, seconds: float, limit: int, clients: int) -> dict:
    """The example app (benchmarks/memory_app.py) under gunicorn with ``workers`` workers, all of
    them (and the master) in one memory group limited to ``limit`` (a pod's limit), on an empty plan
    cache; ``clients`` threads send POST /predict at batch 1 back to back for ``seconds``. Every
    request's fate is counted (an OOM-killed worker's requests fail; gunicorn starts another)."""
    import threading

    from examples.serving.harness import Server
    from examples.serving.tensors import encode
    from user_models import make_inputs

    body = {"inputs": {k: encode(v) for k, v in make_inputs(name, 1).items()}}
    with tempfile.TemporaryDirectory(prefix="tfa_memory_") as cache, MemoryCgroup(limit) as group:
        env = child_env(cache)
        server = Server(
            model,
            workers,
            env=env,
            app="memory_app:app",
            default=cfg == "default",
            preexec=group._join,
            pythonpath=[HERE],
            log_path=os.path.join(cache, "server.log"),
        )
        row: dict = {"config": cfg, "limit_mb": round(limit / MB, 1), "workers": workers, "clients": clients}
        t0 = time.perf_counter()
        try:
            server.start(timeout_s=300)
        except Exception as exc:  # the workers did not come up: killed while loading, say
            row.update(started=False, error=f"{type(exc).__name__}: {str(exc)[-600:]}")
            server.stop()
            return _gunicorn_row(row, group, [], [], 0, t0)
        row["start_s"] = round(time.perf_counter() - t0, 1)
        ok: list[tuple[float, float]] = []  # (when, ms) of answered requests
        failed: list[str] = []
        lock = threading.Lock()
        start = time.perf_counter()

        def client() -> None:
            while time.perf_counter() - start < seconds:
                t = time.perf_counter()
                try:
                    code, out = server.request("POST", "/predict", body, timeout_s=120)
                    good = code == 200 and isinstance(out, dict) and "outputs" in out
                    why = "" if good else f"HTTP {code}"
                except Exception as exc:
                    good, why = False, type(exc).__name__
                with lock:
                    if good:
                        ok.append((t - start, (time.perf_counter() - t) * 1e3))
                    else:
                        failed.append(why)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        try:
            statuses = server.statuses(workers, timeout_s=60)
            builds = _per_worker(server, "/builds", workers)
        except Exception as exc:
            statuses, builds = {}, {}
            row["status_error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
        row["paths_at_end"] = {
            str(pid): "; ".join(
                f"batch {b['batch']}: {b['path']}" + (f" ({b['reason']})" if b.get("reason") else "")
                for s in st.get("served", [])
                for b in s["buckets"]
            )
            for pid, st in statuses.items()
        }
        row["workers_cpu"] = {
            str(pid): {k: st.get(k) for k in ("affinity", "share", "planned", "phase", "bound_cpus")}
            for pid, st in statuses.items()
        }
        row["worker_pids"] = server.worker_pids()
        server.stop()
        windows = [(pid, w) for pid, d in builds.items() for w in d.get("builds", [])]
        return _gunicorn_row(row, group, ok, failed, len(windows), t0, windows)


def _per_worker(server: object, path: str, n: int, timeout_s: float = 60.0) -> dict[int, dict]:
    """``GET path`` from ``n`` distinct workers (a new connection lands on any of them)."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout_s
    while len(seen) < n and time.monotonic() < deadline:
        code, out = server.request("GET", path, timeout_s=10)  # type: ignore[attr-defined]
        if code == 200:
            seen[out["pid"]] = out
    return seen


def _gunicorn_row(
    row: dict, group: MemoryCgroup, ok: list, failed: list, builds: int, t0: float, windows: list | None = None
) -> dict:
    """The run's figures: the group's peak and OOM kills, requests answered and failed, latency,
    and whether two workers ever held the build lock at the same moment."""
    windows = windows or []
    peak = group.peak()
    ms = [m for _, m in ok]
    late = [m for t, m in ok if t >= (max(t for t, _ in ok) * 2 / 3 if ok else 0)]
    overlaps = [
        (a[1][0], b[1][0])
        for i, a in enumerate(windows)
        for b in windows[i + 1 :]
        if a[0] != b[0] and a[1][1] < b[1][2] and b[1][1] < a[1][2]
    ]
    row.update(
        peak_mb=round(peak / MB, 1),
        peak_of_limit=round(peak / group.limit_bytes, 3),
        oom_kills=group.oom_kills(),
        failcnt=group.failcnt(),
        requests=len(ok),
        failed=len(failed),
        failures=sorted(set(failed))[:5],
        median_ms=round(statistics.median(ms), 2) if ms else None,
        median_last_ms=round(statistics.median(late), 2) if late else None,
        builds=builds,
        build_windows=[{"pid": pid, "what": w[0], "taken": w[1], "released": w[2]} for pid, w in windows],
        builds_overlapped=len(overlaps),
        seconds_total=round(time.perf_counter() - t0, 1),
    )
    return row


def _gunicorn_line(row: dict) -> str:
    med = f"{row['median_last_ms']:.0f} ms" if row.get("median_last_ms") is not None else "-"
    paths = " | ".join(f"{k}: {v}" for k, v in (row.get("paths_at_end") or {}).items())
    return (
        f"{row['config']:<8} limit {row['limit_mb']:>6.0f} MB  peak {row['peak_mb']:>6.0f} MB "
        f"({row['peak_of_limit']:.2f})  OOM kills {row['oom_kills']}  {row['requests']} answered, "
        f"{row['failed']} failed, median (last third) {med}; builds {row['builds']}, overlapping "
        f"{row['builds_overlapped']}"
        + (f"  [{paths}]" if paths else "")
        + (f"  {row['error']}" if row.get("error") else "")
    )


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
    if data.get("gunicorn"):
        g = data["gunicorn"]
        lines.append(
            f"\ngunicorn, {g['workers']} workers of {g['model']} in one memory group, {g['clients']} clients, "
            f"{data['seconds']:g} s of HTTP traffic; the default path's peak {g['default_peak_mb']:.0f} MB"
        )
        for row in g["rows"]:
            lines.append(f"  x{row.get('factor', 0):<4g} {_gunicorn_line(row)}")
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
    ap.add_argument(
        "--multi-limit-mb",
        type=float,
        default=None,
        help="--multi's group limit (default: the host's RAM, which the fast path reads as no limit, so "
        "that its own bound of 2x the process's memory applies)",
    )
    ap.add_argument("--gunicorn", action="store_true", help="the example app under gunicorn instead (pod limit)")
    ap.add_argument("--workers", type=int, default=2, help="--gunicorn's workers (default 2)")
    ap.add_argument("--clients", type=int, default=2, help="--gunicorn's client threads (default 2)")
    ap.add_argument(
        "--build-nice",
        default="",
        help="TF_AUTOPAR_BUILD_NICE for enable() (default: the library's 10; 0 on a host so loaded by "
        "other jobs that niced builds starve: about memory, not latency)",
    )
    ap.add_argument("--timeout", type=float, default=600, help="kill a run after this many seconds")
    ap.add_argument("--out", default=None, help="write the results here (JSON)")
    ap.add_argument("--summarise", metavar="JSON", help="print the summary of an earlier run")
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise, encoding="utf-8") as fh:
            print(summarise(json.load(fh)))
        return 0
    global BUILD_NICE
    BUILD_NICE = args.build_nice
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
    data["host"]["load_average_at_start"] = os.getloadavg()[0]
    measure = int(args.measure_limit_mb * MB)

    def save() -> None:
        if args.out:
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1)

    if args.gunicorn:
        name = names[0]
        model = os.path.join(args.model_dir, name)
        g: dict = {"model": name, "workers": args.workers, "clients": args.clients, "rows": []}
        data["gunicorn"] = g
        if args.default_peak_mb:
            peak = int(args.default_peak_mb * MB)
        else:
            ref = gunicorn_run("default", model, name, args.workers, args.seconds, measure, args.clients)
            g["measure"] = ref
            print(f"{name}: measuring the default path: {_gunicorn_line(ref)}", flush=True)
            peak = int(ref["peak_mb"] * MB)
        g["default_peak_mb"] = round(peak / MB, 1)
        for factor in (float(f) for f in args.factors.split(",")):
            for cfg in configs:
                row = gunicorn_run(cfg, model, name, args.workers, args.seconds, int(peak * factor), args.clients)
                row["factor"] = factor
                g["rows"].append(row)
                print(f"{name} x{factor:g} {_gunicorn_line(row)}", flush=True)
                save()
        save()
        print(summarise(data))
        return 0
    if args.multi:
        picked = [(os.path.join(args.model_dir, n), n) for n in (names * 8)[:8]]
        limit_mb = args.multi_limit_mb or (info["ram_mb"] + 1 if info["ram_mb"] else args.measure_limit_mb)
        rows = []
        for cfg in configs:
            rows.append(run(cfg, picked, args.seconds, int(limit_mb * MB), timeout))
            print("  " + _line(rows[-1]), flush=True)
        data["multi"] = {"models": [n for _, n in picked], "limit_mb": limit_mb, "rows": rows}
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
