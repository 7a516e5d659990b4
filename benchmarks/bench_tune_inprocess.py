#!/usr/bin/env python
"""`tune` in one process (the default) against the fresh-process search (`--process-pools`).

Per SavedModel of benchmarks/user_models.py at batch 1, each `tf-autopar tune` run in a fresh
process on an empty plan cache, the two kinds interleaved per round: the wall time of the whole
command (TensorFlow's starts included), the setting it chose, and what the next start does
with it. The two searches measure different things (the frozen session's per-session pools,
served by the next enable() start; the eager path's process pools), so their settings are
reported side by side, not compared for equality.

    python benchmarks/bench_tune_inprocess.py /work/models --only mobilenet_v2,dlrm --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import host  # noqa: E402

KINDS = {"in-process": [], "process-pools": ["--process-pools"]}


def run_tune(model: str, kind: str, budget: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    with tempfile.TemporaryDirectory(prefix="tfa_tune_") as cache:
        env.update(
            TF_CPP_MIN_LOG_LEVEL="3",
            TF_AUTOPAR_CACHE_DIR=cache,
            PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(HERE), env.get("PYTHONPATH", "")) if p),
        )
        cmd = [
            sys.executable,
            "-m",
            "tf_autopar.cli.main",
            "tune",
            model,
            "--batch",
            "1",
            "--budget",
            str(budget),
            "--json",
            *KINDS[kind],
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget + 900)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"kind": kind, "error": proc.stderr[-1200:], "wall_s": wall}
    out = json.loads(proc.stdout)
    chosen = out.get("chosen") or out.get("tuned")
    return {"kind": kind, "wall_s": round(wall, 1), "chosen": chosen, "outcome": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--only", default="mobilenet_v2,dlrm,bert_encoder")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune_inprocess.json"))
    args = ap.parse_args()
    data = {"host": host(), "command": " ".join(sys.argv), "rows": []}
    for name in args.only.split(","):
        row = {"model": name, "batch": 1, "runs": []}
        for rnd in range(args.rounds):
            kinds = list(KINDS) if rnd % 2 == 0 else list(KINDS)[::-1]
            for kind in kinds:
                res = run_tune(os.path.join(args.model_dir, name), kind, args.budget)
                res["round"] = rnd
                row["runs"].append(res)
                print(
                    f"{name} {kind}: {res.get('wall_s')} s, chose {res.get('chosen')} {res.get('error', '')[-200:]}",
                    flush=True,
                )
        walls = {k: [r["wall_s"] for r in row["runs"] if r["kind"] == k and "error" not in r] for k in KINDS}
        row["median_wall_s"] = {k: statistics.median(v) if v else None for k, v in walls.items()}
        data["rows"].append(row)
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
    for row in data["rows"]:
        m = row["median_wall_s"]
        ratio = (m["process-pools"] / m["in-process"]) if m["in-process"] and m["process-pools"] else float("nan")
        chosen = {r["kind"]: r.get("chosen") for r in row["runs"]}
        print(
            f"| {row['model']} | {m['in-process']} | {m['process-pools']} | {ratio:.2f}x | "
            f"{chosen.get('in-process')} | {chosen.get('process-pools')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
