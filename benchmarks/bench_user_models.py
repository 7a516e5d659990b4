"""Issue benchmark: the plan on models that are NOT bundled workloads, served as SavedModels.

For each model of benchmarks/user_models.py (real architectures, saved with a free batch
dimension) at batch 1 and at its serving batch, ``tf-autopar bench`` runs, in fresh processes
and interleaved rounds: TensorFlow's default, the plan (``tf-autopar plan PATH --batch N``'s
variables), ``enable()`` with no argument on its first start (empty plan cache) and on its
second start (cache filled by the first), and every (inter, intra) pair of this host. The
summary row per model and batch: medians, the plan's share of the best pair, enable()'s
speedup over the default, each with the spread of its per-round ratios.

Usage:
  python benchmarks/user_models.py /work/user_models          # build the models once (not committed)
  python benchmarks/bench_user_models.py /work/user_models --out benchmarks/results/user_models.json
  python benchmarks/bench_user_models.py --summarise benchmarks/results/user_models.json
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
from user_models import SERVING  # noqa: E402  (the models and their serving batches)

PAIRS = ("1x1", "1x2", "2x1", "2x2")  # every (inter, intra) pair of a 2-CPU host
CONFIGS = ("default", "plan", "enable", "enable-cached") + PAIRS


def run_row(
    model_dir: str, name: str, batch: int, rounds: int, requests: int, warmup: int, configs: tuple[str, ...] = CONFIGS
) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    cmd = [
        sys.executable,
        "-m",
        "tf_autopar.cli.main",
        "bench",
        os.path.join(model_dir, name),
        "--batch",
        str(batch),
        "--compare",
        ",".join(configs),
        "--rounds",
        str(rounds),
        "--requests",
        str(requests),
        "--warmup",
        str(warmup),
        "--json-out",
        out,
        "--no-progress",
    ]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if proc.returncode != 0:
        raise RuntimeError(f"{name} batch {batch}: bench failed: {proc.stderr[-2000:]}")
    with open(out, encoding="utf-8") as fh:
        data = json.load(fh)
    os.unlink(out)
    data["row"] = {"model": name, "batch": batch, "wall_s": round(time.time() - t0, 1)}
    print(proc.stdout, flush=True)
    return data


def _round_medians(data: dict, config: str) -> dict[int, float]:
    """round -> median request latency of that round's run (latency mode: one process)."""
    out = {}
    for run in data["configs"][config]["runs"]:
        if run.get("status") == "ok" and run.get("step_times_s"):
            out[run["round"]] = statistics.median(run["step_times_s"])
    return out


def config_medians_ms(data: dict) -> dict[str, float]:
    """config -> median over rounds of its per-round median latency, in ms (configs that ran)."""
    return {
        c: statistics.median(_round_medians(data, c).values()) * 1e3 for c in data["configs"] if _round_medians(data, c)
    }


def _paired(data: dict, num: str, den: str) -> tuple[float, float, float]:
    """Per-round ratios median(num) / median(den) (>1: den is faster): median, min, max."""
    a, b = _round_medians(data, num), _round_medians(data, den)
    ratios = [a[r] / b[r] for r in sorted(set(a) & set(b))]
    if not ratios:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(ratios), min(ratios), max(ratios)


def best_pairs(path: str) -> dict[tuple[str, int], str]:
    """(model, batch) -> the fastest (inter, intra) pair of an earlier full run."""
    with open(path, encoding="utf-8") as fh:
        rows = json.load(fh)["rows"]
    out = {}
    for data in rows:
        med = {c: statistics.median(_round_medians(data, c).values()) for c in PAIRS if _round_medians(data, c)}
        out[(data["row"]["model"], data["row"]["batch"])] = min(med, key=med.get)
    return out


def summarise(rows: list[dict]) -> str:
    cpu = rows[0]["host"].get("cpu_model", "?") if rows else "?"
    lines = [
        f"processor: {cpu}; TensorFlow {rows[0]['host'].get('tf_version', '?') if rows else '?'}",
        "p50 latency in ms (median over rounds); share = best pair's time / plan's time (1.00 = at the optimum); "
        "enable x = default's time / enable()'s time; [min-max] over rounds",
        "",
        "| model | batch | default | plan | enable() 1st | enable() 2nd | best pair | plan setting | "
        "plan share of best | enable() 1st vs default | enable() 2nd vs default |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for data in rows:
        med = config_medians_ms(data)
        if not any(c in med for c in PAIRS) or "plan" not in med:
            lines.append(
                f"| {data['row']['model']} | {data['row']['batch']} | {med.get('default', 0):.1f} | - | "
                f"{med.get('enable', 0):.1f} | {med.get('enable-cached', 0):.1f} | - | - | - | "
                + " | ".join(
                    "{:.2f} [{:.2f}-{:.2f}]".format(*_paired(data, "default", c)) for c in ("enable", "enable-cached")
                )
                + " |"
            )
            continue
        best = min((c for c in PAIRS if c in med), key=lambda c: med[c])
        share = _paired(data, best, "plan")
        first = _paired(data, "default", "enable")
        second = _paired(data, "default", "enable-cached")
        setting = data["summary"]["plan"]["settings"]
        row = data["row"]
        lines.append(
            f"| {row['model']} | {row['batch']} | {med['default']:.1f} | {med['plan']:.1f} | {med['enable']:.1f} | "
            f"{med['enable-cached']:.1f} | {med[best]:.1f} ({best}) | {setting['inter_op']}x{setting['intra_op']} | "
            f"{share[0]:.2f} [{share[1]:.2f}-{share[2]:.2f}] | {first[0]:.2f} [{first[1]:.2f}-{first[2]:.2f}] | "
            f"{second[0]:.2f} [{second[1]:.2f}-{second[2]:.2f}] |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?", help="directory written by benchmarks/user_models.py")
    ap.add_argument("--only", default=None, help="comma-separated model names (default: all)")
    ap.add_argument("--batches", default="batch1,serving", help="batch1, serving or both")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "user_models.json"))
    ap.add_argument("--summarise", metavar="JSON", default=None, help="print the table of a finished run")
    ap.add_argument(
        "--configs",
        default=None,
        help="comma-separated bench configurations instead (e.g. default,enable,enable-cached)",
    )
    ap.add_argument(
        "--best-from",
        metavar="JSON",
        default=None,
        help="a shorter confirmation run: default, plan, enable(), and only the pair that was fastest "
        "for the row in this earlier full run (instead of every pair)",
    )
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise, encoding="utf-8") as fh:
            print(summarise(json.load(fh)["rows"]))
        return 0
    if not args.model_dir or not os.path.isdir(args.model_dir):
        ap.error("give the directory written by benchmarks/user_models.py")
    names = args.only.split(",") if args.only else list(SERVING)
    best = best_pairs(args.best_from) if args.best_from else {}
    rows: list[dict] = []
    t0 = time.time()
    for name in names:
        for which in args.batches.split(","):
            batch = SERVING[name][which]
            configs = CONFIGS
            if args.configs:
                configs = tuple(args.configs.split(","))
            elif args.best_from:
                configs = ("default", "plan", "enable", "enable-cached", best[(name, batch)])
            rows.append(run_row(args.model_dir, name, batch, args.rounds, args.requests, args.warmup, configs))
            with open(args.out, "w", encoding="utf-8") as fh:  # after every row: a stopped run keeps its rows
                json.dump(
                    {"rows": rows, "wall_s": round(time.time() - t0, 1), "command": " ".join(sys.argv)}, fh, indent=1
                )
    print(summarise(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
