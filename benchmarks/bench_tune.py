"""Issue benchmark for `tune`: what it chooses, what it costs, against a full sweep of the pairs.

For each (model, batch) row, ``tf-autopar tune --dry-run --json`` runs (nothing stored), and
its choice is looked up in a full sweep measured by bench_user_models.py (every (inter, intra)
pair of the host, 3 interleaved rounds): the chosen pair's median over the best pair's, and the
tune's machine time over the sweep's (the sweep's pair runs' wall time).

Usage:
  python benchmarks/bench_tune.py /work/user_models --sweep benchmarks/results/user_models_rule.json \
      --rows bert_encoder:1,lstm_classifier:32 --out benchmarks/results/tune_user_models.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PAIRS = ("1x1", "1x2", "2x1", "2x2")


def sweep_rows(path: str) -> dict[tuple[str, int], dict]:
    with open(path, encoding="utf-8") as fh:
        rows = json.load(fh)["rows"]
    out = {}
    for data in rows:
        med, wall = {}, 0.0
        for c in PAIRS:
            runs = [r for r in data["configs"][c]["runs"] if r.get("median_s")]
            med[c] = statistics.median(r["median_s"] for r in runs)
            wall += sum(p["wall_s"] for r in data["configs"][c]["runs"] for p in r["processes"])
        out[(data["row"]["model"], data["row"]["batch"])] = {"medians_s": med, "sweep_wall_s": wall}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--sweep", required=True, help="a bench_user_models.py JSON with every pair measured")
    ap.add_argument("--rows", required=True, help="comma-separated MODEL:BATCH")
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sweep = sweep_rows(args.sweep)
    results = []
    for item in args.rows.split(","):
        name, batch = item.split(":")
        cache = tempfile.mkdtemp(prefix="tune-bench-")
        cmd = [
            sys.executable,
            "-m",
            "tf_autopar.cli.main",
            "tune",
            os.path.join(args.model_dir, name),
            "--batch",
            batch,
            "--budget",
            str(args.budget),
            "--dry-run",
            "--json",
        ]
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_AUTOPAR_CACHE_DIR": cache},
        )
        if out.returncode != 0:
            print(f"{item}: tune failed: {out.stderr[-1500:]}", file=sys.stderr)
            continue
        tuned = json.loads(out.stdout)
        ref = sweep[(name, int(batch))]
        best = min(ref["medians_s"], key=ref["medians_s"].get)
        row = {
            "model": name,
            "batch": int(batch),
            "rule": tuned["rule"],
            "tuned": tuned["tuned"],
            "tune_seconds": tuned["seconds"],
            "tune_runs": tuned["search"]["runs"],
            "sweep_best": best,
            "tuned_share_of_best_in_sweep": ref["medians_s"][best] / ref["medians_s"][tuned["tuned"]],
            "rule_share_of_best_in_sweep": ref["medians_s"][best] / ref["medians_s"][tuned["rule"]],
            "sweep_wall_s": round(ref["sweep_wall_s"], 1),
            "search": tuned["search"],
            "host": tuned["host"],
        }
        results.append(row)
        print(
            f"{name} batch {batch}: rule {row['rule']} ({row['rule_share_of_best_in_sweep']:.2f} of the sweep's best "
            f"{best}), tuned {row['tuned']} ({row['tuned_share_of_best_in_sweep']:.2f}); tune {row['tune_seconds']:.0f} s "
            f"in {row['tune_runs']} runs vs sweep {row['sweep_wall_s']:.0f} s",
            flush=True,
        )
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"rows": results, "command": " ".join(sys.argv)}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
