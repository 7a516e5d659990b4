#!/usr/bin/env python
"""Two configurations of the same validation rows, compared across runs: is a gap noise?

For every row of every given validation JSON that measured both configurations A and B
(each in its own fresh processes, interleaved), prints the median over rounds of B's step
time divided by A's in the same round, then their geometric mean and how many rows had B
slower. docs/measurements.md uses it to show that TensorFlow's implicit default and an explicit 2x2
(the same thread counts on this host) differ only by noise.

    python benchmarks/compare_configs.py benchmarks/results/validate_paper_*.json --a tf-default --b 2x2
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path


def paired_ratios(row: dict, a: str, b: str) -> list[float]:
    """B/A per round, from each run's median step; [] if either was not run on its own."""
    configs = row["configs"]
    if a not in configs or b not in configs or configs[a].get("same_as") or configs[b].get("same_as"):
        return []
    by_round = {
        name: {r["round"]: r["median_s"] for r in configs[name]["runs"] if r.get("median_s")} for name in (a, b)
    }
    return [by_round[b][k] / by_round[a][k] for k in by_round[a] if k in by_round[b]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="validation JSON files")
    p.add_argument("--a", default="tf-default")
    p.add_argument("--b", default="2x2")
    args = p.parse_args(argv)
    medians = []
    for path in args.runs:
        doc = json.loads(Path(path).read_text())
        for row in doc["rows"]:
            ratios = paired_ratios(row, args.a, args.b)
            if ratios:
                m = statistics.median(ratios)
                medians.append(m)
                print(
                    f"{Path(path).name:45s} {row['workload']:13s} {row['mode']:7s} {args.b}/{args.a} {m:.3f} "
                    f"({min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)"
                )
    if not medians:
        print("no row measured both configurations")
        return 1
    geo = math.exp(statistics.fmean(math.log(m) for m in medians))
    print(
        f"{len(medians)} rows: geometric mean {geo:.3f}; {args.b} slower in {sum(m > 1 for m in medians)}; "
        f"per-row medians {min(medians):.2f}-{max(medians):.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
