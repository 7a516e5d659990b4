"""enable()'s own cost at process start in two source trees (before and after a refactor).

Fresh processes, the trees interleaved round by round (the order alternating), each timing
``import tf_autopar; tf_autopar.enable()`` (and then disable()) with perf_counter, before any
``import tensorflow``; a warmed plan cache and lease directory in a temporary directory and the
modules compiled, as on a second start. Reported per tree: median and p90 in ms, and the ratio of medians with its spread
(the ratio's range over rounds). Goal (docs/design.md, "Start-up cost"): enable() < 20 ms.

Usage: python benchmarks/bench_enable_trees.py --trees OLD_DIR,NEW_DIR [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _host import processor  # noqa: E402

SCRIPT = (
    "import time; t = time.perf_counter(); import tf_autopar; tf_autopar.enable(); "
    "e = (time.perf_counter() - t) * 1e3; t = time.perf_counter(); tf_autopar.disable(); "
    "d = (time.perf_counter() - t) * 1e3; print('MS', e, d)"
)


def once(tree: str, env: dict[str, str]) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**env, "PYTHONPATH": tree},
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("MS "))
    enable_ms, disable_ms = line.split()[1:]
    return float(enable_ms), float(disable_ms)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", required=True, help="two source trees, comma-separated: before,after")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--json", default=None, help="write the results to this path")
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    if len(trees) != 2 or not all(os.path.isdir(os.path.join(t, "tf_autopar")) for t in trees):
        ap.error("--trees takes two directories that each hold a tf_autopar package")
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # a real start reads compiled modules: the warm-up writes them
        env.update(
            TF_AUTOPAR_CACHE_DIR=os.path.join(tmp, "cache"),
            TF_AUTOPAR_LEASE_DIR=os.path.join(tmp, "lease"),
            TF_AUTOPAR_RENDEZVOUS_S="0",
        )
        os.mkdir(env["TF_AUTOPAR_LEASE_DIR"])
        for tree in trees:  # warm: the topology cache, the first .pyc
            once(tree, env)
        runs: dict[str, list[tuple[float, float]]] = {t: [] for t in trees}
        for r in range(args.rounds):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                runs[tree].append(once(tree, env))
    result = {"processor": processor(), "rounds": args.rounds, "trees": {}}
    for tree in trees:
        enable = sorted(e for e, _ in runs[tree])
        disable = sorted(d for _, d in runs[tree])
        result["trees"][tree] = {
            "enable_ms_median": round(statistics.median(enable), 3),
            "enable_ms_p90": round(enable[int(0.9 * (len(enable) - 1))], 3),
            "disable_ms_median": round(statistics.median(disable), 3),
            "enable_ms": [round(e, 3) for e, _ in runs[tree]],
        }
    old, new = trees
    ratios = sorted(n[0] / o[0] for o, n in zip(runs[old], runs[new]))
    result["ratio_after_over_before"] = {
        "median": round(statistics.median(ratios), 3),
        "min": round(ratios[0], 3),
        "max": round(ratios[-1], 3),
    }
    print(f"processor: {result['processor']}; {args.rounds} rounds, interleaved")
    for tree, row in result["trees"].items():
        print(
            f"  {tree}: enable() median {row['enable_ms_median']} ms (p90 {row['enable_ms_p90']}), "
            f"disable() median {row['disable_ms_median']} ms"
        )
    r = result["ratio_after_over_before"]
    print(f"  after/before, per round: median {r['median']}x (range {r['min']}-{r['max']}x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
