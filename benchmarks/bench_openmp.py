#!/usr/bin/env python
"""Issue benchmark: thread settings on an OpenMP build of TensorFlow (intel-tensorflow 2.14).

On an OpenMP build, oneDNN's kernels (convolutions, matrix multiplies) run on OpenMP teams,
one per inter-op thread, while TensorFlow's own intra-op pool runs everything else. This
sweeps both, apart: for each model of benchmarks/user_models.py (not bundled workloads) at
batch 1 and its serving batch, ``tf-autopar bench`` runs, in fresh processes and interleaved
rounds, TensorFlow's default, the plan, and every inter-op x TF intra-op x OpenMP threads
setting of this host, each with the OpenMP variables left to the build and with compact
KMP_AFFINITY (``--extra bt1``: with KMP_BLOCKTIME 1 ms instead).

Run it with the OpenMP build's interpreter (a second virtual environment):

  python3 -m venv /work/venv-omp
  /work/venv-omp/bin/pip install 'intel-tensorflow==2.14.0' 'numpy<2' && /work/venv-omp/bin/pip install --no-deps -e .
  /work/venv-omp/bin/python benchmarks/bench_openmp.py /work/user_models --out benchmarks/results/openmp.json
  python benchmarks/bench_openmp.py --summarise benchmarks/results/openmp.json

The models are built once with TF 2.21 by benchmarks/user_models.py (SavedModels load on 2.14).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_user_models import _paired, _round_medians, config_medians_ms, run_row  # noqa: E402
from user_models import SERVING  # noqa: E402

DEFAULT_MODELS = ("mobilenet_v2", "bert_encoder", "dlrm", "lstm_classifier")


def sweep(cpus: int, extra: str = "compact") -> tuple[str, ...]:
    """Every inter x intra x OpenMP threads in 1..cpus, each as the build leaves the rest and with
    ``extra``: "compact" (KMP_AFFINITY compact pinning) or "bt1" (KMP_BLOCKTIME 1 ms)."""
    values = range(1, cpus + 1)
    return tuple(f"{i}x{j}x{o}{x}" for i, j, o in itertools.product(values, values, values) for x in ("", f":{extra}"))


def top_swept(path: str, n: int) -> dict[tuple[str, int], list[str]]:
    """(model, batch) -> the ``n`` fastest swept settings of an earlier sweep (medians over rounds)."""
    with open(path, encoding="utf-8") as fh:
        rows = json.load(fh)["rows"]
    out = {}
    for data in rows:
        med = {
            c: statistics.median(_round_medians(data, c).values())
            for c in data["configs"]
            if c not in ("default", "plan") and _round_medians(data, c)
        }
        out[(data["row"]["model"], data["row"]["batch"])] = sorted(med, key=med.get)[:n]
    return out


def plan_threads(model_dir: str, name: str, batch: int) -> str:
    """The plan's INTERxINTRAxOMP for one row, from `tf-autopar plan` (this interpreter's build)."""
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tf_autopar.cli.main",
            "plan",
            os.path.join(model_dir, name),
            "--batch",
            str(batch),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    if out.returncode != 0:
        raise SystemExit(f"planning {name} at batch {batch} failed: {out.stderr.strip()[-500:]}")
    plan = json.loads(out.stdout)
    return f"{plan['inter_op']}x{plan['intra_op']}x{plan['omp_threads']}"


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def effects(rows: list[dict]) -> str:
    """What each dimension is worth per row: the geometric mean, over every pair of swept settings
    that differ in that dimension only, of the median per-round ratio of their times (>1: the
    second value is slower)."""
    dims = (("TF intra-op 2 / 1", 1, "1", "2"), ("OpenMP threads 1 / 2", 2, "2", "1"), ("inter-op 2 / 1", 0, "1", "2"))
    head = "| model | batch | " + " | ".join(d[0] for d in dims) + " | compact / none | best swept |"
    lines = [head, "|" + "---|" * (4 + len(dims))]
    for data in rows:
        rm = {c: _round_medians(data, c) for c in data["configs"] if c not in ("default", "plan")}
        rm = {c: v for c, v in rm.items() if v}

        def ratio(a: str, b: str) -> float | None:
            if a not in rm or b not in rm:  # noqa: B023
                return None
            common = sorted(set(rm[a]) & set(rm[b]))  # noqa: B023
            return statistics.median(rm[b][r] / rm[a][r] for r in common) if common else None  # noqa: B023

        cells = []
        for _, pos, base, other in dims:
            xs = []
            for c in rm:
                spec, _, extra = c.partition(":")
                parts = spec.split("x")
                if parts[pos] != base:
                    continue
                parts[pos] = other
                r = ratio(c, "x".join(parts) + (":" + extra if extra else ""))
                if r:
                    xs.append(r)
            cells.append(f"{_geomean(xs):.2f}" if xs else "-")
        xs = [r for c in rm if not c.endswith(":compact") for r in [ratio(c, c + ":compact")] if r]
        cells.append(f"{_geomean(xs):.2f}" if xs else "-")
        best = min(rm, key=lambda c: statistics.median(rm[c].values()))
        lines.append(f"| {data['row']['model']} | {data['row']['batch']} | " + " | ".join(cells) + f" | {best} |")
    return "\n".join(lines)


def summarise(rows: list[dict]) -> str:
    host = rows[0]["host"] if rows else {}
    lines = [
        f"processor: {host.get('cpu_model', '?')}; TensorFlow {host.get('tf_version', '?')} "
        f"({host.get('threading_runtime', '?')}); {host.get('logical_cpus', '?')} CPUs",
        "p50 latency in ms (median over rounds); plan share = best's time / plan's time and default share = best's / "
        "default's, each the median of per-round ratios [min-max over rounds]; plan vs default = default's / plan's",
        "",
        "| model | batch | default | plan (setting) | best swept | 2nd best | plan share of best | default share of best "
        "| plan vs default |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for data in rows:
        med = config_medians_ms(data)
        swept = sorted((c for c in med if c not in ("default", "plan")), key=med.get)
        if not swept or "plan" not in med or "default" not in med:
            lines.append(f"| {data['row']['model']} | {data['row']['batch']} | incomplete | | | | | | |")
            continue
        best = swept[0]
        plan_env = data["configs"]["plan"].get("env") or {}
        setting = "x".join(
            plan_env.get(k, "-") for k in ("TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS")
        )
        if "KMP_BLOCKTIME" in plan_env:
            setting += f":bt{plan_env['KMP_BLOCKTIME']}"
        if "KMP_AFFINITY" in plan_env:
            setting += ":compact" if "compact" in plan_env["KMP_AFFINITY"] else f":{plan_env['KMP_AFFINITY']}"
        share, dshare, vs = (
            _paired(data, best, "plan"),
            _paired(data, best, "default"),
            _paired(data, "default", "plan"),
        )
        fmt = "{:.2f} [{:.2f}-{:.2f}]"
        lines.append(
            f"| {data['row']['model']} | {data['row']['batch']} | {med['default']:.1f} | {med['plan']:.1f} ({setting}) "
            f"| {med[best]:.1f} ({best}) | {med[swept[1]]:.1f} ({swept[1]}) | {fmt.format(*share)} "
            f"| {fmt.format(*dshare)} | {fmt.format(*vs)} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?", help="directory written by benchmarks/user_models.py")
    ap.add_argument("--only", default=",".join(DEFAULT_MODELS), help="comma-separated model names")
    ap.add_argument("--batches", default="batch1,serving", help="batch1, serving or both")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--extra",
        choices=("compact", "bt1"),
        default="compact",
        help="the variable each setting is also run with (default compact KMP_AFFINITY)",
    )
    ap.add_argument("--configs", default=None, help="comma-separated bench configurations instead of the sweep")
    ap.add_argument(
        "--with-copy",
        action="store_true",
        help="with --best-from: also run an explicit copy of the plan's settings (the same environment, "
        "a separate configuration), which shows how far two runs of one setting differ",
    )
    ap.add_argument(
        "--ab",
        choices=("affinity", "blocktime"),
        default=None,
        help="per row, only the plan's threads, in two settings: 'affinity': KMP_BLOCKTIME=1 without "
        "and with compact KMP_AFFINITY; 'blocktime': compact affinity with KMP_BLOCKTIME left to "
        "the build and set to 1 ms",
    )
    ap.add_argument(
        "--best-from",
        metavar="JSON",
        default=None,
        help="a confirmation run: default, the plan and the --top fastest settings of this earlier sweep",
    )
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "openmp.json"))
    ap.add_argument("--summarise", metavar="JSON", default=None, help="print the table of a finished run")
    ap.add_argument(
        "--effects",
        metavar="JSON",
        default=None,
        help="print what each dimension is worth per row, from a finished sweep",
    )
    args = ap.parse_args()
    for path, table in ((args.effects, effects), (args.summarise, summarise)):
        if path:  # a finished run: print its table
            with open(path, encoding="utf-8") as fh:
                print(table(json.load(fh)["rows"]))
            return 0
    if not (args.model_dir and os.path.isdir(args.model_dir)):
        ap.error("give the directory written by benchmarks/user_models.py")
    configs = (
        tuple(args.configs.split(","))
        if args.configs
        else ("default", "plan") + sweep(len(os.sched_getaffinity(0)), args.extra)
    )
    best = top_swept(args.best_from, args.top) if args.best_from else {}
    rows: list[dict] = []
    t0 = time.time()
    for name in args.only.split(","):
        for which in args.batches.split(","):
            batch = SERVING[name][which]
            row_configs = ("default", "plan", *best[(name, batch)]) if best else configs
            threads = plan_threads(args.model_dir, name, batch) if args.with_copy or args.ab else ""
            if args.with_copy:
                row_configs += (threads + ":bt1:compact",)
            if args.ab:
                row_configs = (
                    (f"{threads}:bt1", f"{threads}:bt1:compact")
                    if args.ab == "affinity"
                    else (f"{threads}:compact", f"{threads}:bt1:compact")
                )
            rows.append(run_row(args.model_dir, name, batch, args.rounds, args.requests, args.warmup, row_configs))
            with open(args.out, "w", encoding="utf-8") as fh:  # after every row: a stopped run keeps its rows
                json.dump(
                    {"rows": rows, "wall_s": round(time.time() - t0, 1), "command": " ".join(sys.argv)}, fh, indent=1
                )
    print(summarise(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
