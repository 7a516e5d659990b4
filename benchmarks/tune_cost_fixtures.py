"""How much `tune` would measure on the recorded many-core hosts, against validate's sweep.

Pure (no TensorFlow, nothing timed): for each recorded host fixture and a chain (width 1)
and a branchy (width 3) model, the rule's latency plan, the tuner's candidates
(tuning/search.py's neighbourhood, at most 12) and the most runs its successive halving can
make (every round run to the end, nothing stopping early), against the sweep `validate`
runs on that host (its search space x 5 rounds, the paper-size default).

Usage: python benchmarks/tune_cost_fixtures.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tf_autopar.graph.profile import GraphProfile  # noqa: E402
from tf_autopar.planning import plan  # noqa: E402
from tf_autopar.topology import detect_topology  # noqa: E402
from tf_autopar.measure.search import neighbourhood, search  # noqa: E402
from tf_autopar.validation.space import search_space  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "hosts")
SWEEP_ROUNDS = 5


def worst_case_runs(candidates: list) -> int:
    """Runs of a search that never stops early: one neighbour beats the plan by 10% in every
    round, beyond the noise (3%) but short of a clear win (15%); the others are slower."""
    rank = {c: i for i, c in enumerate(candidates)}

    def measure(live, rnd):
        return {c: 1.10 if rank[c] == 0 else 1.0 if rank[c] == 1 else 1.2 + rank[c] * 0.1 for c in live}

    return search(candidates, measure, max_runs=10_000).runs


def rows() -> list[dict]:
    out = []
    for name in sorted(os.listdir(FIXTURES)):
        if name == "garbled":
            continue
        t = detect_topology(os.path.join(FIXTURES, name))
        space = search_space(t)
        for width in (1, 3):
            profile = GraphProfile(
                heavy_ops=60, depth=60 // width, avg_width=width, max_width=width, typical_op_work=50_000_000
            )
            p = plan(t, profile, "latency", env={})
            cands = neighbourhood(p.inter_op, p.intra_op, p.usable_cpus, width)
            runs = worst_case_runs(cands) if len(cands) > 1 else 0
            sweep_runs = len(space.configs) * SWEEP_ROUNDS
            out.append(
                {
                    "host": name,
                    "logical_cpus": t.logical_cpus,
                    "width": width,
                    "plan": f"{p.inter_op}x{p.intra_op}",
                    "candidates": len(cands),
                    "tune_runs_worst": runs,
                    "sweep_configs": len(space.configs),
                    "exhaustive_configs": space.full_size,
                    "sweep_runs": sweep_runs,
                    "share_of_sweep": runs / sweep_runs,
                }
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    table = rows()
    print(
        "| host | CPUs | width | plan | candidates | tune runs (worst) | sweep configs (of all) | sweep runs | tune/sweep |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(
            f"| {r['host']} | {r['logical_cpus']} | {r['width']} | {r['plan']} | {r['candidates']} | "
            f"{r['tune_runs_worst']} | {r['sweep_configs']} (of {r['exhaustive_configs']}) | {r['sweep_runs']} | "
            f"{r['share_of_sweep']:.1%} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"sweep_rounds": SWEEP_ROUNDS, "rows": table}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
