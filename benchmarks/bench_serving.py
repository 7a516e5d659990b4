#!/usr/bin/env python
"""Concurrent inference servers on one host: TensorFlow's defaults vs cooperative tf_autopar.

N server processes (``--procs 2,4``) start together, each builds a bundled workload
(``--workload resnet50 --size paper``, batch 1) and warms it up; then a barrier (a go file)
releases them all at once and each serves ``--requests`` requests one after another, timing
each. Build and warm-up are excluded. Configurations:

- ``default``: no settings at all (each process sizes its pools for the whole host).
- ``solo`` (reference, once per round): ONE server bound to one core with 1x1 pools, alone on
  the host. Its mean service time t1 gives the ceiling for N >= C servers on C usable CPUs,
  C / t1 requests per second (C = the quota when there is one): what no thread setting can
  beat unless a single request gets faster. Reported next to both configurations.
- ``enable``: each process calls ``tf_autopar.enable()`` (``--via enable``, the default), which
  claims its share (count from TF_AUTOPAR_INSTANCES=N, as gunicorn workers get from
  WEB_CONCURRENCY; index from the host-wide lease), binds to it and plans for it before
  TensorFlow starts. ``--via coordination`` does the same steps by hand (claim_share,
  apply_affinity, plan, TF_NUM_*), to tell the library's mechanism from enable()'s glue.

Rounds interleave the configurations (default, enable, default, enable, ...; the order
alternates per round), every run in fresh processes. ``--cpu-quota Q`` runs every round a
second time with all N processes inside one real cgroup with a CFS quota of Q CPUs (v1
``cpu`` controller or v2 ``cpu.max``; needs root; removed afterwards) and reports the
group's ``nr_throttled`` periods.

Reported per (procs, quota, config): total throughput (all requests / span from the first
start to the last end), p50 and p99 latency over every request of every process, each the
median over rounds with [min, max]; and enable/default ratios (goal: >= 1.2x throughput with
2 processes, >= 1.3x with 4, and a lower p99).

    python benchmarks/bench_serving.py                          # paper size, 2 and 4 procs, 5 rounds
    python benchmarks/bench_serving.py --cpu-quota 1.5          # also under a 1.5-CPU quota
    python benchmarks/bench_serving.py --quick                  # smoke run: tiny size, few requests
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CONFIGS = ("default", "enable")
REFERENCE = "solo"


# ------------------------------------------------------------------------------ server (child)


def serve(args: argparse.Namespace) -> int:
    """One server process: settle threads, build, warm up, say ready, wait, serve, report."""
    info: dict = {"pid": os.getpid(), "config": args.config}
    if args.config == "solo":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        os.environ.update(TF_NUM_INTEROP_THREADS="1", TF_NUM_INTRAOP_THREADS="1")
        info["plan"] = "1x1"
    elif args.config == "enable":
        if args.via == "enable":
            import tf_autopar

            proc = tf_autopar.enable().process
            info["share"], info["bound"] = proc.share, bool(proc.bound_cpus)
            info["plan"] = f"{proc.planned_inter}x{proc.planned_intra}"
        else:
            from tf_autopar.coordination import apply_affinity, claim_share
            from tf_autopar.planning import plan
            from tf_autopar.topology import detect_topology

            topo = detect_topology()
            share = claim_share(topo)
            info["share"] = share.to_dict()
            info["bound"] = apply_affinity(share)
            p = plan(share.topology(topo), None, "latency", env=os.environ)
            for k, v in p.to_env().items():
                os.environ.setdefault(k, v)
            info["plan"] = f"{p.inter_op}x{p.intra_op}"
    import numpy as np

    from tf_autopar_workloads.runner import build

    built = build(args.workload, size=args.size, batch=1)
    fn = built.infer_function()
    flat = built._flat_inputs
    for _ in range(args.warmup):
        [o.numpy() for o in fn(*flat)]
    info["affinity"] = sorted(os.sched_getaffinity(0))
    print("ready", flush=True)
    while not os.path.exists(args.go):
        time.sleep(0.0005)
    lat = []
    start = time.time()
    for _ in range(args.requests):
        t0 = time.perf_counter()
        [o.numpy() for o in fn(*flat)]
        lat.append(time.perf_counter() - t0)
    info.update(start=start, end=time.time(), latencies=lat, mean_s=float(np.mean(lat)))
    print(json.dumps(info), flush=True)
    return 0


# ------------------------------------------------------------------------------ cgroup


class Quota:
    """A real CFS-quota cgroup (v1 cpu controller or v2) holding the servers; removed on close."""

    def __init__(self, cpus: float) -> None:
        name = f"tf_autopar_bench_{os.getpid()}"
        v1 = Path("/sys/fs/cgroup/cpu")
        v2 = Path("/sys/fs/cgroup")
        period = 100000
        if (v1 / "cpu.cfs_quota_us").exists():
            self.path = v1 / name
            self.path.mkdir()
            (self.path / "cpu.cfs_period_us").write_text(str(period))
            (self.path / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
        elif (v2 / "cgroup.controllers").exists():
            self.path = v2 / name
            self.path.mkdir()
            (self.path / "cpu.max").write_text(f"{int(cpus * period)} {period}")
        else:
            raise RuntimeError("no writable cgroup cpu controller (need root and cgroup v1 cpu or v2)")
        self.procs = str(self.path / "cgroup.procs")

    def enter(self) -> None:  # runs in the child before exec: every thread TF starts is inside
        with open(self.procs, "w") as fh:
            fh.write(str(os.getpid()))

    def nr_throttled(self) -> int:
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "nr_throttled":
                return int(value)
        return -1

    def close(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


# ------------------------------------------------------------------------------ one run (parent)


def run_group(config: str, n: int, quota_cpus: float | None, args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="tf_autopar_bench_"))
    go = tmp / "go"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for var in (
        "TF_NUM_INTEROP_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "OMP_NUM_THREADS",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "TF_CONFIG",
        "WEB_CONCURRENCY",
        "TF_AUTOPAR_INSTANCE",
    ):
        env.pop(var, None)
    env["TF_AUTOPAR_INSTANCES"] = str(n)  # what a server's worker count tells each worker
    env["TF_AUTOPAR_LEASE_DIR"] = str(tmp / "lease")
    env["TF_AUTOPAR_GROUP"] = "bench_serving"
    quota = Quota(quota_cpus) if quota_cpus else None
    procs: list[subprocess.Popen] = []
    try:
        for i in range(n):  # noqa: B007
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--serve",
                "--config",
                config,
                "--via",
                args.via,
                "--workload",
                args.workload,
                "--size",
                args.size,
                "--requests",
                str(args.requests),
                "--warmup",
                str(args.warmup),
                "--go",
                str(go),
            ]
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    preexec_fn=quota.enter if quota else None,
                )
            )
        sel = selectors.DefaultSelector()
        for p in procs:
            sel.register(p.stdout, selectors.EVENT_READ, p)
        ready, deadline = 0, time.time() + args.timeout
        while ready < n:
            events = sel.select(max(0.1, deadline - time.time()))
            if not events or time.time() > deadline:
                raise RuntimeError(f"servers not ready within {args.timeout} s")
            for key, _ in events:
                line = key.fileobj.readline()
                if not line:
                    raise RuntimeError(f"server exited before ready: {key.data.stderr.read()[-2000:]}")
                if line.strip() == "ready":
                    ready += 1
                    sel.unregister(key.fileobj)
        throttled0 = quota.nr_throttled() if quota else None
        go.touch()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=args.timeout)
            if p.returncode != 0:
                raise RuntimeError(f"server failed ({p.returncode}): {err[-2000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        throttled = quota.nr_throttled() - throttled0 if quota else None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
        if quota:
            quota.close()
        shutil.rmtree(tmp, ignore_errors=True)
    import numpy as np

    lat = np.concatenate([r["latencies"] for r in results])
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "config": config,
        "procs": n,
        "quota": quota_cpus,
        "throughput": len(lat) / span,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "nr_throttled": throttled,
        "servers": [{k: r.get(k) for k in ("pid", "share", "plan", "bound", "affinity", "mean_s")} for r in results],
    }


# ------------------------------------------------------------------------------ report


def med(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def summarize(runs: list[dict]) -> list[dict]:
    rows = []
    keys = sorted({(r["procs"], r["quota"] or 0.0) for r in runs if r["config"] != REFERENCE})
    for procs, quota in keys:
        by = {
            c: [r for r in runs if r["procs"] == procs and (r["quota"] or 0.0) == quota and r["config"] == c]
            for c in CONFIGS
        }
        row = {"procs": procs, "quota": quota or None}
        for c, rs in by.items():
            if not rs:
                continue
            row[c] = {m: med([r[m] for r in rs]) for m in ("throughput", "p50_ms", "p99_ms")}
            if rs[0]["nr_throttled"] is not None:
                row[c]["nr_throttled"] = med([r["nr_throttled"] for r in rs])
            row[c]["plans"] = sorted(
                {str(s.get("plan") or "tf-default") + "@" + str(s.get("affinity")) for s in rs[0]["servers"]}
            )
        solo = [r["servers"][0]["mean_s"] for r in runs if r["config"] == REFERENCE]
        if solo:
            usable = min(procs, _cpus(), quota or procs)
            t1 = statistics.median(solo)
            row["ceiling"] = {"t1_ms": t1 * 1e3, "throughput": usable / t1, "cpus": usable}
            for c in CONFIGS:
                if c in row:
                    row[c]["of_ceiling"] = row[c]["throughput"][0] / row["ceiling"]["throughput"]
        if all(c in row for c in CONFIGS):
            d, e = row["default"], row["enable"]
            row["ratio"] = {
                "throughput": e["throughput"][0] / d["throughput"][0],
                "p50": e["p50_ms"][0] / d["p50_ms"][0],
                "p99": e["p99_ms"][0] / d["p99_ms"][0],
            }
        rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    def cell(t: tuple[float, float, float], fmt: str = "{:.1f}") -> str:
        return f"{fmt.format(t[0])} [{fmt.format(t[1])}-{fmt.format(t[2])}]"

    out = [
        "| procs | quota | config | total req/s | of ceiling | p50 ms | p99 ms | throttled periods | plan@cpus |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        for c in CONFIGS:
            if c not in row:
                continue
            r = row[c]
            thr = cell(r["nr_throttled"], "{:.0f}") if "nr_throttled" in r else "-"
            ceiling = f"{r['of_ceiling']:.2f}" if "of_ceiling" in r else "-"
            out.append(
                f"| {row['procs']} | {row['quota'] or '-'} | {c} | {cell(r['throughput'], '{:.2f}')} | {ceiling} | "
                f"{cell(r['p50_ms'])} | {cell(r['p99_ms'])} | {thr} | {', '.join(r['plans'])} |"
            )
        if "ratio" in row:
            q = row["ratio"]
            out.append(
                f"| {row['procs']} | {row['quota'] or '-'} | **enable/default** | **{q['throughput']:.2f}x** | | "
                f"{q['p50']:.2f}x | {q['p99']:.2f}x | | |"
            )
        if "ceiling" in row:
            cl = row["ceiling"]
            out.append(
                f"| {row['procs']} | {row['quota'] or '-'} | ceiling ({cl['cpus']:g} CPU / solo {cl['t1_ms']:.1f} ms) | "
                f"{cl['throughput']:.2f} | 1.00 | | | | |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", default="2,4", help="comma-separated server counts")
    p.add_argument("--workload", default="resnet50")
    p.add_argument("--size", choices=("tiny", "paper"), default="paper")
    p.add_argument("--requests", type=int, default=100, help="requests per server (batch 1, sequential)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cpu-quota", type=float, default=None, help="also run under one cgroup with this CPU quota")
    p.add_argument("--via", choices=("coordination", "enable"), default="enable")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--no-ceiling", action="store_true", help="skip the single-server reference run")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny size, 20 requests, 1 round")
    p.add_argument("--json", action="store_true", help="print the raw runs and summary as JSON")
    p.add_argument("--out", default="", help="also write the JSON here")
    # child mode
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", choices=CONFIGS + (REFERENCE,), help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        return serve(args)
    if args.quick:
        args.size, args.requests, args.rounds, args.warmup = "tiny", 20, 1, 2
    counts = [int(x) for x in args.procs.split(",") if x.strip()]
    quotas: list[float | None] = [None] + ([args.cpu_quota] if args.cpu_quota else [])
    runs = []
    for r in range(args.rounds):
        order = CONFIGS if r % 2 == 0 else CONFIGS[::-1]
        if not args.no_ceiling:
            res = run_group(REFERENCE, 1, None, args)
            runs.append(res)
            print(
                f"round {r + 1}/{args.rounds} solo (1 server, 1 core, 1x1) {res['servers'][0]['mean_s'] * 1e3:.1f} ms "
                "per request",
                file=sys.stderr,
                flush=True,
            )
        for n in counts:
            for q in quotas:
                for c in order:
                    res = run_group(c, n, q, args)
                    runs.append(res)
                    print(
                        f"round {r + 1}/{args.rounds} procs={n} quota={q or '-'} {c:8s} "
                        f"{res['throughput']:.2f} req/s p50 {res['p50_ms']:.1f} ms p99 {res['p99_ms']:.1f} ms"
                        + (f" throttled {res['nr_throttled']}" if q else ""),
                        file=sys.stderr,
                        flush=True,
                    )
    rows = summarize(runs)
    meta = {
        "host": platform.node(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "workload": args.workload,
        "size": args.size,
        "requests": args.requests,
        "rounds": args.rounds,
        "via": args.via,
    }
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=1))
    if args.json:
        print(json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=1))
    else:
        print(
            f"{args.workload} ({args.size}, batch 1), {args.requests} requests per server, "
            f"median [min-max] of {args.rounds} round(s); CPUs {meta['cpus']}"
        )
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
