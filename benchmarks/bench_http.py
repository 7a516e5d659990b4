#!/usr/bin/env python
"""The example HTTP server (examples/serving/app.py) under real load: TensorFlow's default vs enable().

gunicorn with uvicorn workers at 1, 2 and 4 workers, with and without a real cgroup CPU quota
(``--quota 1.5``), each worker either with ``tf_autopar.enable()`` at the top of the app or
without (``TF_AUTOPAR_EXAMPLE_DEFAULT=1``), on a vision model (MobileNetV2) and a recommender
(DLRM) of benchmarks/user_models.py at batch 1. Load: ``wrk`` (installed with apt-get when
missing and this runs as root), 2 connections per worker for ``--duration`` seconds, after a
warm-up that, for enable(), lasts until every worker's fast path has switched (or kept the
original path), then ``--settle`` seconds of unmeasured wrk load for every configuration alike
(measured: a worker's first seconds of traffic after the switch run up to 1.4x slower than
steady state). Throughput and p50/p99 are wrk's; each worker's busy CPUs in the window are read
from /proc (connections stuck to one worker show as one busy worker and one idle one).

The solo ceiling (as bench_serving.py defines it): ONE worker bound to one core (enable(), so
1 x 1 pools and the fast path: the best a worker does per CPU), its rate r1; the ceiling at N
workers is r1 x usable CPUs (min(N, CPUs, quota)). Note on this 2-core host: wrk and gunicorn's
master share the two cores with the workers; in the solo run wrk has the other core to itself.

The HTTP-charged ceiling (``--http-ceiling``): the solo ceiling charges every request the HTTP
cost of one worker on a core of its own; N workers on fewer cores pay more per request (more
processes and connections per core). So the same server runs the same rows with the model call
left out (benchmarks/http_echo_app.py: body parsed, tensors decoded, a kept output serialized), and
the workers' CPU per request is read from /proc in both: the model's own CPU per request m = solo
minus the echo's solo, the HTTP path's h_N = the echo's at N workers. wrk runs on the same
cores (outside the workers' quota) and costs w CPU-ms per request (the echo's wrk CPUs over its
rate); the ceiling is min(usable CPUs / (m + h_N), host CPUs / (m + h_N + w)). It is an upper
bound as long as the costs add (a request costs the workers at least its model run and its HTTP
handling, and wrk its side of the request); it says how much of a gap to the solo ceiling is the
HTTP path's and the load generator's, which no thread setting can win back.

Two more per row: the busy workers' ceiling (under keep-alive gunicorn gives some workers every
connection: the solo rate x the CPUs the workers that got connections could use, per round) and
how much of those CPUs the workers kept busy. ``--shared-ceiling`` runs two workers bound to one
core beside the solo run; their rate over the solo's, per round, x the solo ceiling bounds the
rows with more workers than cores. ``--summarise FILE[,FILE]`` prints the table of saved runs
(each row's ceilings from its own file; the two-per-core ratio from any).

Ray (``--ray``): a local 2-node cluster (``ray.cluster_utils.Cluster``, 1 CPU per node), the
Ray Serve example (examples/serving/ray_serve_app.py) with 4 replicas of ``num_cpus=0.5`` (2 per
node), wrk against Serve's HTTP proxy; ceiling r1 x 2.

Every configuration runs in fresh processes; rounds interleave the configurations (the order
alternates per round). Reported: the median over rounds with [min, max], enable/default ratios,
and the share of the solo ceiling.

    python benchmarks/bench_http.py --rounds 2 --quota 1.5 --ray --json benchmarks/results/http.json
    python benchmarks/bench_http.py --quick      # smoke run: 1 round, 1 and 2 workers, DLRM only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _host import cpu_seconds, processor  # noqa: E402

from examples.serving.harness import APP, Server, warm_until_served  # noqa: E402

MODELS = ("mobilenet_v2", "dlrm")
CONFIGS = ("default", "enable")
ECHO = "echo"  # --ray-ceiling / --http-ceiling: the server with the model call left out
ECHO_SOLO = "echo-solo"  # --http-ceiling: one echo worker bound to one core
ECHO_APP = "http_echo_app:app"  # benchmarks/http_echo_app.py
SHARED = "solo-shared"  # --shared-ceiling: two workers bound to one core
ALT = "enable-alt"  # --alt DIR: enable() with the tf_autopar of another checkout, interleaved (an A/B of a rule)
IDLE_CPUS = 0.1  # a worker this busy or less while wrk ran got (almost) no connection
GUNICORN, CLOSE = "gunicorn", "gunicorn-close"  # kinds of rows: keep-alive connections, or one per request
LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
%s
wrk.body = io.open("%s"):read("*a")
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, ' ..
    '"errors": %%d, "non2xx": %%d}\\n', summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def ensure_wrk() -> str:
    """wrk from the system's packages (Debian: apt-get install wrk); installed here when root."""
    path = shutil.which("wrk")
    if path:
        return path
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=False, capture_output=True)
        path = shutil.which("wrk")
    if not path:
        raise SystemExit("wrk not found: install it (Debian/Ubuntu: apt-get install wrk)")
    return path


def build_models(directory: Path) -> dict[str, str]:
    missing = [m for m in MODELS if not (directory / m / "saved_model.pb").exists()]
    if missing:
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "user_models.py"), str(directory), "--only", ",".join(missing)],
            check=True,
        )
    return {m: str(directory / m) for m in MODELS}


def request_body(model: str) -> dict:
    from examples.serving.tensors import encode
    from user_models import make_inputs

    return {"inputs": {k: encode(v) for k, v in make_inputs(model, 1).items()}}


def run_wrk(wrk: str, url: str, lua: Path, connections: int, duration: float) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [wrk, "-t1", f"-c{connections}", f"-d{duration:g}s", "--timeout", "10s", "-s", str(lua), url],
        capture_output=True,
        text=True,
        timeout=duration + 60,
    )
    m = re.search(r"^WRK (\{.*\})$", out.stdout, re.M)
    if not m:
        raise RuntimeError(f"wrk printed no summary: {out.stdout[-1500:]} {out.stderr[-1500:]}")
    r = json.loads(m.group(1))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wrk_cpus": wrk_cpu / (r["duration_us"] / 1e6),  # CPUs the load generator itself kept busy
        "throughput": r["requests"] / (r["duration_us"] / 1e6),
        "p50_ms": r["p50_us"] / 1e3,
        "p99_ms": r["p99_us"] / 1e3,
        "requests": r["requests"],
        "errors": r["errors"],
        "non2xx": r["non2xx"],
    }


def worker_use(pids: list[int], before: dict[int, float | None], wall_s: float, requests: int) -> dict:
    """Where the CPUs went while wrk ran: each worker's busy CPUs (a worker near 0 while another is
    near 1 is connections stuck to one worker, not a slow plan) and the workers' CPU per request."""
    used = []
    for pid in pids:
        a, b = before.get(pid), cpu_seconds(pid)
        used.append(None if a is None or b is None else (b - a) / wall_s)
    total = sum(u for u in used if u is not None)
    return {
        "worker_cpus": [None if u is None else round(u, 3) for u in used],
        "workers_cpus": round(total, 3),
        "cpu_ms_per_request": round(1e3 * total * wall_s / requests, 3) if requests else None,
    }


def worker_words(res: dict) -> list[str]:
    """Each worker's plan, CPUs, serving path and busy CPUs in the window, for the progress lines."""
    return [
        f"{s['planned']}@{s['affinity']} {','.join(s.get('paths', []))} busy {s.get('busy_cpus')}"
        for s in res["workers_seen"]
    ]


def clean_env(lease: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "OMP_", "KMP_"))}
    for var in ("WEB_CONCURRENCY", "TF_AUTOPAR_INSTANCES", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TF_AUTOPAR_DISABLE"):
        env.pop(var, None)
    env["TF_AUTOPAR_LEASE_DIR"] = str(lease)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def one_server(
    model_path: str,
    body: dict,
    lua: Path,
    workers: int,
    config: str,
    quota: float | None,
    args: argparse.Namespace,
    tmp: Path,
    pin: bool = False,
) -> dict:
    """Start the example server, warm it, load it with wrk, stop it; the row's figures."""
    from tf_autopar.measure.cgroup import QuotaGroup, find_cpu_controller

    lease = Path(tempfile.mkdtemp(prefix="lease_", dir=tmp))
    env = clean_env(lease)
    env["TF_AUTOPAR_CACHE_DIR"] = str(tmp / f"cache_{time.monotonic_ns()}")  # every start as a first start
    env["TF_AUTOPAR_FAST_PATH_DIR"] = str(tmp / f"fast_{time.monotonic_ns()}")
    group = QuotaGroup(find_cpu_controller(), quota, tag="http").create() if quota else None

    def preexec() -> None:
        if group is not None:
            group.join()
        if pin:
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    echo = config in (ECHO, ECHO_SOLO)
    server = Server(
        model_path,
        workers,
        env=env,
        default=config == "default" or echo,
        preexec=preexec,
        log_path=str(tmp / "server.log"),
        app=ECHO_APP if echo else APP,
        pythonpath=[args.alt] if config == ALT else [str(ROOT / "benchmarks")] if echo else (),
    )
    try:
        server.start(timeout_s=300)
        t0 = time.monotonic()
        if config in ("enable", ALT):
            st = warm_until_served(server, body, timeout_s=args.warm_s)
        else:  # the same amount of traffic before the measurement
            for _ in range(args.warm_requests * workers):
                server.request("POST", "/predict", body)
            st = server.statuses(workers)
        warm_s = time.monotonic() - t0
        if args.settle > 0:  # steady state before the window: the first seconds of traffic run slower
            run_wrk(args.wrk, f"http://127.0.0.1:{server.port}/predict", lua, 2 * workers, args.settle)
        throttled0 = group.stat().nr_throttled if group else None
        pids = server.worker_pids()
        cpu0, t_wrk = {pid: cpu_seconds(pid) for pid in pids}, time.monotonic()
        res = run_wrk(args.wrk, f"http://127.0.0.1:{server.port}/predict", lua, 2 * workers, args.duration)
        res.update(worker_use(pids, cpu0, time.monotonic() - t_wrk, res["requests"]))
        res["nr_throttled"] = group.stat().nr_throttled - throttled0 if group else None
        res["warm_s"] = warm_s
        res["workers_seen"] = [
            {
                "pid": s["pid"],
                "busy_cpus": res["worker_cpus"][pids.index(s["pid"])] if s["pid"] in pids else None,
                "affinity": s["affinity"],
                "planned": s.get("planned", "tf-default"),
                "paths": [
                    b["path"] + (" " + b["pools"] if b["path"] == "frozen session" else "")
                    for x in s.get("served", [])
                    for b in x["buckets"]
                ],
                "tuning": [b.get("tuning", "") for x in s.get("served", []) for b in x["buckets"]],
            }
            for s in st.values()
        ]
        return res
    finally:
        server.stop()
        if group is not None:
            group.remove()
        shutil.rmtree(lease, ignore_errors=True)


# ------------------------------------------------------------------------------ Ray

RAY_CHILD = r"""
import json, os, sys, time
import ray
from ray import serve
from ray.cluster_utils import Cluster
sys.path.insert(0, ROOT)
from examples.serving.ray_serve_app import SavedModelServer
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
cluster.add_node(num_cpus=1)
env = {k: v for k, v in os.environ.items() if k in ("TF_AUTOPAR_LEASE_DIR", "TF_CPP_MIN_LOG_LEVEL",
       "TF_AUTOPAR_CACHE_DIR", "TF_AUTOPAR_FAST_PATH_DIR")}
ray.init(address=cluster.address, runtime_env={"env_vars": dict(env, PYTHONPATH=ROOT)})
cluster.wait_for_nodes()
serve.start(http_options={"host": "127.0.0.1", "port": PORT})
if ECHO:  # the ceiling of Serve itself here: same replicas and body, the body parsed and no model run
    @serve.deployment
    class Echo:
        async def __call__(self, request):
            if request.url.path.rstrip("/").endswith("status"):
                return {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0))}
            body = await request.json()
            return {"outputs": {k: 0 for k in body["inputs"]}}
    app = Echo.options(num_replicas=4, ray_actor_options={"num_cpus": 0.5}).bind()
else:
    app = SavedModelServer.options(num_replicas=4, ray_actor_options={"num_cpus": 0.5}).bind(MODEL, default=DEFAULT)
serve.run(app, route_prefix="/predict")
print("READY", flush=True)
sys.stdin.readline()  # the parent says when to stop
serve.shutdown(); ray.shutdown(); cluster.shutdown()
"""


def one_ray(model_path: str, body: dict, lua: Path, config: str, args: argparse.Namespace, tmp: Path) -> dict:
    from examples.serving.harness import free_port
    import http.client

    port = free_port()
    lease = Path(tempfile.mkdtemp(prefix="lease_", dir=tmp))
    env = clean_env(lease)
    env["TF_AUTOPAR_CACHE_DIR"] = str(tmp / f"cache_{time.monotonic_ns()}")
    env["TF_AUTOPAR_FAST_PATH_DIR"] = str(tmp / f"fast_{time.monotonic_ns()}")
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    code = f"ROOT = {str(ROOT)!r}\nPORT = {port}\nMODEL = {model_path!r}\nDEFAULT = {config == 'default'}\n"
    code += f"ECHO = {config == ECHO}\n" + RAY_CHILD
    log = open(tmp / "ray.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        if "READY" not in line:
            raise RuntimeError(f"Ray Serve did not start: {line} {(tmp / 'ray.log').read_text()[-2000:]}")

        def post(path: str, payload: dict | None) -> dict:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("POST", path, json.dumps(payload or {}), {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            c.close()
            if r.status != 200:
                raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
            return json.loads(data)

        t0 = time.monotonic()
        replicas: dict[int, dict] = {}
        while time.monotonic() - t0 < args.warm_s:
            for _ in range(16):
                post("/predict", body)
            for _ in range(8):
                s = post("/predict/status", None)
                replicas[s["pid"]] = s
            paths = [[b["path"] for f in s.get("served", []) for b in f["buckets"]] for s in replicas.values()]
            if len(replicas) >= 4 and (
                config in ("default", ECHO) or all(p and p[0] in ("frozen session", "original") for p in paths)
            ):
                break
        warm_s = time.monotonic() - t0
        if args.settle > 0:
            run_wrk(args.wrk, f"http://127.0.0.1:{port}/predict", lua, 8, args.settle)
        res = run_wrk(args.wrk, f"http://127.0.0.1:{port}/predict", lua, 8, args.duration)
        res["warm_s"] = warm_s
        res["workers_seen"] = [
            {
                "affinity": s["affinity"],
                "planned": s.get("planned", "tf-default"),
                "share": (s.get("share") or {}).get("note", ""),
            }
            for s in replicas.values()
        ]
        return res
    finally:
        try:
            proc.stdin.write("stop\n")
            proc.stdin.flush()
            proc.wait(60)
        except Exception:
            os.killpg(proc.pid, 9)
            proc.wait(10)
        log.close()
        shutil.rmtree(lease, ignore_errors=True)


# ------------------------------------------------------------------------------ report


def _same(r: dict, model: str, kind: str, workers: int, quota: float) -> bool:
    return (r["model"], r["kind"], r["workers"], r["quota"] or 0.0) == (model, kind, workers, quota)


def _paired(runs: list[dict], a: str, b: str) -> list[float]:
    """Per-round throughput ratios a / b over one row's runs (one run of each configuration per round
    of one benchmark run); empty without a pair."""
    by_round = {(r.get("source", 0), r["round"]): r["throughput"] for r in runs if r["config"] == b}
    ratios = [
        r["throughput"] / by_round[r.get("source", 0), r["round"]]
        for r in runs
        if r["config"] == a and (r.get("source", 0), r["round"]) in by_round
    ]
    return med(ratios) if ratios else []


def _busy_workers(run: dict) -> int:
    """Workers that were busy while wrk ran (gunicorn hands out the connections)."""
    return sum(1 for u in run["worker_cpus"] if u is not None and u >= IDLE_CPUS)


def _busy_cpus(run: dict, cpus: int, quota: float) -> float:
    """CPUs the workers that were busy while wrk ran could use."""
    return min(max(1, _busy_workers(run)), cpus, quota or cpus)


def med(values: list[float]) -> list[float]:
    return [statistics.median(values), min(values), max(values)]


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    cpus = len(os.sched_getaffinity(0))
    keys = sorted(
        {
            (r["model"], r["kind"], r["workers"], r["quota"] or 0.0)
            for r in runs
            if r["config"] not in ("solo", ECHO_SOLO, SHARED)
        }
    )
    # the two-per-core ratio from rounds where both workers got connections: a round where one did
    # not measured one worker alone, not two on a core
    both_busy = [r for r in runs if r["config"] != SHARED or _busy_workers(r) == len(r["worker_cpus"])]
    for model, kind, workers, quota in keys:
        row: dict = {"model": model, "kind": kind, "workers": workers, "quota": quota or None}
        mine = [r for r in runs if _same(r, model, kind, workers, quota)]
        for c in (*CONFIGS, ALT):
            rs = [r for r in mine if r["config"] == c]
            if rs:
                row[c] = {m: med([r[m] for r in rs]) for m in ("throughput", "p50_ms", "p99_ms")}
                row[c]["rounds"] = len(rs)
                row[c]["errors"] = sum(r["errors"] + r["non2xx"] for r in rs)
                # per round, the workers that stayed idle while wrk ran (under a tenth of a CPU busy)
                row[c]["idle_workers"] = [
                    sum(1 for u in r["worker_cpus"] if u is not None and u < IDLE_CPUS)
                    for r in rs
                    if "worker_cpus" in r
                ]

        if "default" in row and "enable" in row:
            row["enable_vs_default"] = _paired(mine, "enable", "default")
        if "enable" in row and ALT in row:  # the two enable() trees
            row["alt_vs_enable"] = _paired(mine, ALT, "enable")
        # the row's ceilings from the row's own run (a 1-worker row's key also matches the solo runs)
        sources = {r.get("source", 0) for r in mine if r["config"] not in ("solo", ECHO_SOLO, SHARED)}
        own = [r for r in runs if r.get("source", 0) in sources and r["model"] == model]
        solo_kind = kind if any(r["config"] == "solo" and r["kind"] == kind for r in own) else GUNICORN
        solo = [r["throughput"] for r in own if r["config"] == "solo" and r["kind"] == solo_kind]
        if solo:
            usable = min(workers, cpus, quota or workers) if kind in (GUNICORN, CLOSE) else min(cpus, 2)
            r1 = statistics.median(solo)
            row["ceiling"] = {"solo_rps": r1, "cpus": usable, "throughput": r1 * usable}
            echo = [r for r in runs if r["config"] == ECHO and _same(r, model, kind, workers, quota)]
            if echo and kind == "ray":  # Serve itself, with no model run, is the lower ceiling
                row["ceiling"]["serve_rps"] = statistics.median(r["throughput"] for r in echo)
                row["ceiling"]["throughput"] = min(r1 * usable, row["ceiling"]["serve_rps"])
            echo_solo = [r for r in own if r["config"] == ECHO_SOLO and r["kind"] == kind]
            solo_cpu = [r["cpu_ms_per_request"] for r in own if r["config"] == "solo" and r["kind"] == kind]
            if echo and echo_solo and solo_cpu and kind != "ray":
                row["http_ceiling"] = http_ceiling(solo_cpu, echo_solo, echo, usable, cpus)
            shared = _paired([r for r in both_busy if r["model"] == model and r["kind"] == kind], SHARED, "solo")
            if shared and kind != "ray" and workers > cpus:
                row["shared_ceiling"] = {"per_core_ratio": shared, "throughput": r1 * shared[0] * usable}
            for c in (*CONFIGS, ALT):
                if c in row:
                    for name, of in (
                        ("ceiling", "of_ceiling"),
                        ("http_ceiling", "of_http_ceiling"),
                        ("shared_ceiling", "of_shared_ceiling"),
                    ):
                        if name in row:
                            row[c][of] = row[c]["throughput"][0] / row[name]["throughput"]
                    busy = [r for r in mine if r["config"] == c and "worker_cpus" in r and kind != "ray"]
                    if busy:  # the solo ceiling of the workers that got connections, per round
                        row[c]["of_busy_ceiling"] = med(
                            [r["throughput"] / (r1 * _busy_cpus(r, cpus, quota)) for r in busy]
                        )
                        # how much of what those workers could use they did use: below 1, CPU was left idle
                        row[c]["busy_of_usable"] = med(
                            [sum(u or 0.0 for u in r["worker_cpus"]) / _busy_cpus(r, cpus, quota) for r in busy]
                        )
        rows.append(row)
    return rows


def http_ceiling(solo_cpu: list[float], echo_solo: list[dict], echo: list[dict], usable: float, cpus: int) -> dict:
    """The rate at which the workers' CPUs, or the host's, run out, from medians.

    Each request costs the workers the model's CPU-ms (solo minus the echo's solo) and this row's
    HTTP CPU-ms (the echo at this row), and costs wrk its own (the echo's wrk CPUs per request),
    which shares this host's CPUs but not the workers' quota.
    """
    model_ms = statistics.median(solo_cpu) - statistics.median(r["cpu_ms_per_request"] for r in echo_solo)
    http_ms = statistics.median(r["cpu_ms_per_request"] for r in echo)
    wrk_ms = statistics.median(1e3 * r["wrk_cpus"] / r["throughput"] for r in echo)
    return {
        "model_cpu_ms": model_ms,
        "http_cpu_ms": http_ms,
        "wrk_cpu_ms": wrk_ms,
        "echo_rps": statistics.median(r["throughput"] for r in echo),
        "cpus": usable,
        "throughput": 1e3 * min(usable / (model_ms + http_ms), cpus / (model_ms + http_ms + wrk_ms)),
    }


def table(rows: list[dict]) -> str:
    out = [
        "| server | model | workers | quota | default req/s | enable() req/s | enable/default | "
        "default p50 / p99 ms | enable() p50 / p99 ms | ceiling req/s | enable() of ceiling | "
        "HTTP-charged ceiling req/s (model + HTTP + wrk CPU-ms) | enable() of it | "
        "two-per-core ceiling req/s (per-core rate / solo) | enable() of it | idle workers per round, enable() |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(v: list[float], f: str = "{:.1f}") -> str:
        return f"{f.format(v[0])} [{f.format(v[1])}-{f.format(v[2])}]"

    def lat(x: dict | None) -> str:
        return f"{x['p50_ms'][0]:.1f} / {x['p99_ms'][0]:.1f}" if x else "-"

    for r in rows:
        d, e, cl = r.get("default"), r.get("enable"), r.get("ceiling")
        ratio = cell(r["enable_vs_default"], "{:.2f}") if "enable_vs_default" in r else "-"
        ceiling = f"{cl['throughput']:.1f} ({cl['cpus']:g} x {cl['solo_rps']:.1f})" if cl else "-"
        if cl and "serve_rps" in cl:
            ceiling += f"; Serve alone {cl['serve_rps']:.1f}"
        share = f"{e['of_ceiling']:.2f}" if e and "of_ceiling" in e else "-"
        h = r.get("http_ceiling")
        charged = (
            f"{h['throughput']:.1f} ({h['model_cpu_ms']:.2f} + {h['http_cpu_ms']:.2f} + {h['wrk_cpu_ms']:.2f})"
            if h
            else "-"
        )
        charged_share = f"{e['of_http_ceiling']:.2f}" if e and "of_http_ceiling" in e else "-"
        sh = r.get("shared_ceiling")
        shared = f"{sh['throughput']:.1f} ({sh['per_core_ratio'][0]:.2f})" if sh else "-"
        shared_share = f"{e['of_shared_ceiling']:.2f}" if e and "of_shared_ceiling" in e else "-"
        out.append(
            f"| {r['kind']} | {r['model']} | {r['workers']} | {r['quota'] or '-'} | "
            f"{cell(d['throughput']) if d else '-'} | {cell(e['throughput']) if e else '-'} | {ratio} | "
            f"{lat(d)} | {lat(e)} | {ceiling} | {share} | {charged} | {charged_share} | {shared} | {shared_share} | "
            f"{', '.join(map(str, e.get('idle_workers', []))) or '-' if e else '-'} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models-dir",
        default="/tmp/tf_autopar_bench_http_models",
        help="where the SavedModels are built (once) and read",
    )
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--quota", type=float, default=None, help="also run every row under this CPU quota (root)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=float, default=5.0, help="seconds of wrk load per row")
    p.add_argument("--warm-s", type=float, default=60.0, help="at most this long waiting for the fast path")
    p.add_argument(
        "--settle",
        type=float,
        default=10.0,
        help="seconds of unmeasured wrk load after the warm-up, every configuration alike (0: none)",
    )
    p.add_argument("--warm-requests", type=int, default=30, help="requests per worker warming the default")
    p.add_argument(
        "--conn",
        default="keep-alive",
        help="wrk's connections, comma-separated: keep-alive (a few persistent ones: the kernel hands them to "
        "whichever workers accept first) and/or close (a new one per request: an idle worker accepts it)",
    )
    p.add_argument("--ray", action="store_true", help="also the 2-node local Ray cluster")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--alt", metavar="DIR", help=f"also {ALT!r}: enable() with the tf_autopar of checkout DIR")
    p.add_argument("--no-ceiling", action="store_true", help="skip the solo ceiling run")
    p.add_argument("--ray-ceiling", action="store_true", help="with --ray: also Serve's own ceiling (no model run)")
    p.add_argument(
        "--http-ceiling",
        action="store_true",
        help="also every gunicorn row with the model call left out: the HTTP-charged ceiling",
    )
    p.add_argument("--no-quota-free", action="store_true", help="with --quota: only the rows under the quota")
    p.add_argument("--json", default=None)
    p.add_argument(
        "--shared-ceiling",
        action="store_true",
        help=f"also {SHARED!r}: two workers bound to one core, beside the solo run (the ceiling of two per core)",
    )
    p.add_argument("--ceilings-only", action="store_true", help="only the ceiling runs: no rows, no Ray")
    p.add_argument(
        "--summarise",
        metavar="JSON[,JSON]",
        help="print the table of saved runs (summarised anew, ratios paired within each file) and exit",
    )
    args = p.parse_args()
    if args.summarise:
        files = [json.loads(Path(f).read_text())["runs"] for f in args.summarise.split(",") if f]
        print(table(summarize([dict(r, source=i) for i, runs in enumerate(files) for r in runs])))
        return 0
    if args.quick:
        args.models, args.workers, args.rounds, args.duration = "dlrm", "1,2", 1, 3.0
    args.wrk = ensure_wrk()
    models = build_models(Path(args.models_dir))
    names = [m for m in args.models.split(",") if m]
    workers = [int(w) for w in args.workers.split(",")]
    quotas = ([] if args.no_quota_free and args.quota else [None]) + ([args.quota] if args.quota else [])
    configs = (*CONFIGS, ALT) if args.alt else CONFIGS
    tmp = Path(tempfile.mkdtemp(prefix="tf_autopar_bench_http_"))
    kinds = [{"keep-alive": GUNICORN, "close": CLOSE}[k] for k in args.conn.split(",") if k]
    luas = {}
    for m in names:
        (tmp / f"{m}.json").write_text(json.dumps(request_body(m)))
        for kind in (GUNICORN, CLOSE):
            luas[m, kind] = tmp / f"{m}-{kind}.lua"
            close = 'wrk.headers["Connection"] = "close"' if kind == CLOSE else ""
            luas[m, kind].write_text(LUA % (close, tmp / f"{m}.json"))
    runs: list[dict] = []
    t_start = time.time()
    solos = [] if args.no_ceiling else ["solo", *[ECHO_SOLO] * args.http_ceiling, *[SHARED] * args.shared_ceiling]
    for rnd in range(args.rounds):
        order = configs if rnd % 2 == 0 else configs[::-1]
        row_configs = order + ((ECHO,) if args.http_ceiling else ())
        for m in names:
            body = json.loads((tmp / f"{m}.json").read_text())
            for kind, solo in ((k, c) for k in kinds for c in solos):
                served, n = {"solo": ("enable", 1), ECHO_SOLO: (ECHO_SOLO, 1), SHARED: ("enable", 2)}[solo]
                res = one_server(models[m], body, luas[m, kind], n, served, None, args, tmp, pin=True)
                runs.append(dict(res, model=m, kind=kind, workers=n, quota=None, config=solo, round=rnd))
                print(
                    f"round {rnd + 1} {m} {kind} {solo} ({n} worker(s) on 1 core): {res['throughput']:.1f} req/s, "
                    f"{res['worker_cpus']} CPUs, {res['cpu_ms_per_request']} CPU-ms/request",
                    flush=True,
                )
            for kind in [] if args.ceilings_only else kinds:
                for q, w, c in ((q, w, c) for q in quotas for w in workers for c in row_configs):
                    res = one_server(models[m], body, luas[m, kind], w, c, q, args, tmp)
                    runs.append(dict(res, model=m, kind=kind, workers=w, quota=q, config=c, round=rnd))
                    print(
                        f"round {rnd + 1} {m} {kind} {w} workers quota {q or '-'} {c}: {res['throughput']:.1f} req/s "
                        f"p50 {res['p50_ms']:.1f} p99 {res['p99_ms']:.1f} ms; wrk {res['wrk_cpus']:.2f} CPUs; "
                        f"{res['cpu_ms_per_request']} CPU-ms/request; {worker_words(res)}",
                        flush=True,
                    )
            if args.ray and not args.ceilings_only:
                for c in [o for o in order if o != ALT] + ([ECHO] if args.ray_ceiling else []):
                    res = one_ray(models[m], body, luas[m, GUNICORN], c, args, tmp)
                    runs.append(dict(res, model=m, kind="ray", workers=4, quota=None, config=c, round=rnd))
                    print(
                        f"round {rnd + 1} {m} ray 2 nodes x 2 replicas {c}: {res['throughput']:.1f} req/s "
                        f"p50 {res['p50_ms']:.1f} p99 {res['p99_ms']:.1f} ms",
                        flush=True,
                    )
        save(runs, args, t_start)  # after every round: a run cut short keeps its complete rounds
    rows = summarize(runs)
    print(table(rows))
    for r in rows:
        if "alt_vs_enable" in r:
            v = r["alt_vs_enable"]
            print(
                f"{r['model']} {r['workers']} workers quota {r['quota'] or '-'}: {ALT} ({args.alt}) / enable() "
                f"throughput {v[0]:.2f} [{v[1]:.2f}-{v[2]:.2f}]; p99 {r[ALT]['p99_ms'][0]:.1f} vs "
                f"{r['enable']['p99_ms'][0]:.1f} ms"
            )
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def save(runs: list[dict], args: argparse.Namespace, t_start: float) -> None:
    if args.json:
        doc = {
            "processor": processor(),
            "cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
            "args": {k: v for k, v in vars(args).items() if k != "wrk"},
            "wall_s": time.time() - t_start,
            "rounds_done": 1 + max(r["round"] for r in runs),
            "rows": summarize(runs),
            "runs": runs,
        }
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
