#!/usr/bin/env python
"""How fast any paired comparison could tune a row live, on this host's own noise (issue 28's
60-second goal).

Live tuning must tell the served setting from every other per-session setting to within 3%
(the goal: at least 0.97 of the best) from paired calls. However good the stopping rule, each
pair costs one call of each setting, and the pairs a test needs grow with the noise of a pair's
ratio. This reads a ``bench_live.py`` result and, per row, computes a lower bound on the traffic
that comparison takes, from figures measured in that run:

- ``sigma``: the robust spread (1.4826 x the median absolute deviation) of log(t_i / t_j) for
  calls i, j of the one session that served after tuning ended, j the call a block later
  (``measure/live.py``'s BLOCK) or the next call, whichever spread is smaller: the noise of a
  pair of equal settings, as generous as the run allows;
- ``gaps``: each other setting's log time ratio to the best, from the in-process sweep;
- ``pairs``: for each other setting, ``(Z * sigma / d)^2`` with Z = 2 (the rule's loss side,
  about 98% one-sided) and ``d = ln(1/0.97) + gap``: the pairs to rule out, at two standard
  errors, that it is 3% faster than the best, were the best served from the first call (the
  most favourable start: a plan that is not the best costs a win on top);
- ``floor s``: those pairs at two calls each (ideal alternation, no untimed calls), at the
  median call time, summed over the other settings; ``+ switch s`` adds the measured time from
  the first request to the first frozen session serving (one build must precede any pair).

A row whose floor plus switch exceeds 60 s cannot reach the goal within 60 s of traffic on this
host at this noise by any paired test at two standard errors; a row below it that took longer
is the stopping rule's or the builds' cost.

    python benchmarks/live_ceiling.py benchmarks/results/live_epyc_all.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from tf_autopar.measure.live import BLOCK, Z_LOSE  # noqa: E402

GOAL = 0.97
TOLERANCE = math.log(1 / GOAL)
SETTINGS = ("1x1", "1x2", "2x1", "2x2")


def robust_sigma(values: list[float]) -> float:
    """1.4826 x the median absolute deviation: a standard deviation that one stall does not own."""
    if len(values) < 5:
        return math.nan
    med = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - med) for v in values)


def pair_sigma(times_ms: list[float]) -> tuple[float, int]:
    """(sigma, pairs) of log-ratios of one session's calls, a block apart or adjacent (the smaller)."""
    best = (math.nan, 0)
    for lag in (1, BLOCK):
        logs = [math.log(a / b) for a, b in zip(times_ms[lag:], times_ms) if a > 0 and b > 0]
        s = robust_sigma(logs)
        if math.isfinite(s) and not (math.isfinite(best[0]) and best[0] <= s):
            best = (s, len(logs))
    return best


def switch_seconds(status: str) -> float:
    m = re.search(r"switched after ([0-9.]+) s", status or "")
    return float(m.group(1)) if m else math.nan


def row_ceiling(row: dict) -> dict:
    live, sweep = row.get("live", {}), row.get("sweep", {})
    out = {"model": row["model"], "batch": row["batch"]}
    if "error" in live or "error" in sweep or "sweep_ms" not in sweep:
        out["error"] = "no live run or sweep"
        return out
    served = [t for t, ph in zip(live["times_ms"], live["phases"]) if ph == "tuned"]
    ms = {k: v for k, v in sweep["sweep_ms"].items() if k in SETTINGS}
    best = min(ms, key=ms.get)
    sigma, n_sigma = pair_sigma(served)
    call_ms = statistics.median(served) if served else ms[best]
    pairs = {}
    for name, t in ms.items():
        if name == best:
            continue
        d = TOLERANCE + math.log(t / ms[best])
        pairs[name] = max(1, math.ceil((Z_LOSE * sigma / d) ** 2)) if math.isfinite(sigma) else math.nan
    floor = sum(n * 2 * call_ms / 1e3 for n in pairs.values())
    switch = switch_seconds(live.get("status", ""))
    out.update(
        best=best,
        call_ms=call_ms,
        sigma=sigma,
        sigma_pairs=n_sigma,
        gaps={k: ms[k] / ms[best] - 1 for k in pairs},
        pairs=pairs,
        floor_s=floor,
        switch_s=switch,
        done_s=live.get("done_s"),
    )
    return out


def summarise(data: dict) -> str:
    h = data["host"]
    lines = [
        f"processor: {h['cpu_model']} ({h['cpus']} CPUs); TensorFlow {h['tf_version']}; run of {h['date']}",
        f"pairs per other setting to rule out a {1 - GOAL:.0%} gain at {Z_LOSE:g} standard errors, were the best served"
        " from the first call; floor = those pairs at 2 calls each at the median call time",
        "",
        "| model | batch | call ms | sigma [pairs] | other settings: slower than the best by, pairs | floor s"
        " | + switch s | tuned after s (measured) | 60 s reachable |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in (row_ceiling(x) for x in data["rows"]):
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['error']} | | | | | | |")
            continue
        others = ", ".join(f"{k} {r['gaps'][k]:+.0%} {r['pairs'][k]}" for k in sorted(r["pairs"]))
        total = r["floor_s"] + (r["switch_s"] if math.isfinite(r["switch_s"]) else 0.0)
        done = f"{r['done_s']:.1f}" if r.get("done_s") is not None else "not within the run"
        if not math.isfinite(total):
            verdict = "unknown: no calls after tuning to measure the noise on"
        else:
            verdict = "no: beyond this host's noise" if total > 60 else "yes"
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['call_ms']:.1f} | {r['sigma']:.3f} [{r['sigma_pairs']}] | {others} |"
            f" {r['floor_s']:.1f} | {total:.1f} | {done} | {verdict} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="bench_live.py result files")
    ap.add_argument("--json", action="store_true", help="print the per-row figures as JSON")
    args = ap.parse_args()
    for path in args.results:
        with open(path) as fh:
            data = json.load(fh)
        if args.json:
            print(json.dumps([row_ceiling(r) for r in data["rows"]], indent=1))
        else:
            print(summarise(data))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
