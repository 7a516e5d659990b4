#!/usr/bin/env python
"""Per-workload step time and peak memory at paper size, each measurement in a fresh process.

For every workload: inference at batch 1, inference at the published batch, and training
steps at the published batch. Each (workload, configuration) runs as
``python -m tf_autopar.cli.main workloads run ... --json`` in its own process, so thread
pools, allocator state and the process-wide peak RSS belong to that measurement alone.
Configurations are interleaved across ``--rounds`` (round r runs every configuration once)
so that drift on a shared host spreads over all of them; the table reports the median over
rounds of each run's median step time, the pooled p10-p90 of all timed steps, and the
largest peak RSS.

    python benchmarks/bench_workloads.py                       # all 15, paper size
    python benchmarks/bench_workloads.py --workloads autoenc,deepq --steps 3 --rounds 1
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def configurations(workload: str, default_batch: int, args: argparse.Namespace) -> list[dict]:
    return [
        {
            "workload": workload,
            "label": "infer b1",
            "mode": "infer",
            "batch": 1,
            "steps": args.steps,
            "warmup": args.warmup,
        },
        {
            "workload": workload,
            "label": f"infer b{default_batch}",
            "mode": "infer",
            "batch": default_batch,
            "steps": args.steps,
            "warmup": args.warmup,
        },
        {
            "workload": workload,
            "label": f"train b{default_batch}",
            "mode": "train",
            "batch": default_batch,
            "steps": args.train_steps,
            "warmup": 1,
        },
    ]


def run_one(cfg: dict, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "tf_autopar.cli.main",
        "workloads",
        "run",
        cfg["workload"],
        "--mode",
        cfg["mode"],
        "--batch",
        str(cfg["batch"]),
        "--steps",
        str(cfg["steps"]),
        "--warmup",
        str(cfg["warmup"]),
        "--size",
        args.size,
        "--path",
        args.path,
        "--json",
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {args.timeout} s"}
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]}
    result = json.loads(proc.stdout)
    result["process_wall_s"] = wall
    return result


def aggregate(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[-1]["error"] if runs else "not run"}
    steps = sorted(t for r in ok for t in r["step_times_s"])

    def q(p: float) -> float:
        return steps[min(len(steps) - 1, int(round(p * (len(steps) - 1))))]

    return {
        "median_s": statistics.median(r["median_s"] for r in ok),
        "p10_s": q(0.10),
        "p90_s": q(0.90),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in ok),
        "build_s": statistics.median(r["build_s"] for r in ok),
        "rounds_ok": len(ok),
        "losses": ok[-1]["losses"],
    }


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def markdown(rows: list[dict]) -> str:
    lines = ["| workload | configuration | median step | p10-p90 | peak RSS |", "|---|---|---|---|---|"]
    for r in rows:
        a = r["result"]
        if "error" in a:
            lines.append(f"| {r['workload']} | {r['label']} | error: {a['error'][:60]} | | |")
        else:
            lines.append(
                f"| {r['workload']} | {r['label']} | {fmt_time(a['median_s'])} | "
                f"{fmt_time(a['p10_s'])} - {fmt_time(a['p90_s'])} | {a['peak_rss_mb']:.0f} MiB |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import tf_autopar_workloads as workloads

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="", help="comma-separated names (default: all)")
    p.add_argument("--size", choices=("tiny", "paper"), default="paper")
    p.add_argument("--path", choices=("function", "session"), default="function")
    p.add_argument("--steps", type=int, default=10, help="timed inference steps per process")
    p.add_argument("--train-steps", type=int, default=3, help="timed training steps per process")
    p.add_argument("--warmup", type=int, default=2, help="untimed inference steps first")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (fresh process each)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per process")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "workloads.json"))
    args = p.parse_args(argv)

    names = [n.strip() for n in args.workloads.split(",") if n.strip()] or workloads.names()
    cfgs = [c for n in names for c in configurations(n, workloads.get(n).default_batch, args)]
    runs: dict[int, list[dict]] = {i: [] for i in range(len(cfgs))}
    for rnd in range(args.rounds):
        for i, cfg in enumerate(cfgs):
            result = run_one(cfg, args)
            runs[i].append(result)
            status = result.get("error") or fmt_time(result["median_s"])
            print(f"[round {rnd + 1}/{args.rounds}] {cfg['workload']} {cfg['label']}: {status}", file=sys.stderr)
    rows = [{**cfg, "result": aggregate(runs[i]), "runs": runs[i]} for i, cfg in enumerate(cfgs)]
    report = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "size": args.size,
        "path": args.path,
        "rounds": args.rounds,
        "env": {k: os.environ[k] for k in ("TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS") if k in os.environ},
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(markdown(rows))
    print(f"\nwritten to {out}", file=sys.stderr)
    return 0 if all("error" not in r["result"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
