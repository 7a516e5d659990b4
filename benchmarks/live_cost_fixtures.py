#!/usr/bin/env python
"""What live tuning would try on the recorded many-core hosts, and how long it would take.

Pure (no TensorFlow, nothing timed): for each recorded host fixture, a chain (width 1) and a
branchy (width 3) model, in latency mode (one session) and throughput mode (the plan's streams),
the candidates live tuning tries (runtime/fastpath/trials.py: tuning/search.py's stream_neighbourhood
around the plan's setting, the setting itself left out) and the expected time to try them all,
from the stopping rule's bounds (tuning/live.py) and two stated assumptions:

- one call takes ``--call-ms`` (default 10 ms) at the incumbent's and the candidate's setting
  alike; the candidate takes alternate blocks of 4 calls, the first of each untimed, so n pairs
  cost 8n/3 calls (``CALLS_PER_PAIR``);
- each candidate's session is built and warmed up off the request path in ``--build-s``
  (default 1 s: grappler's first run of a mid-size vision net here), while the incumbent serves.

Bounds per candidate: fastest, dropped after ``EARLY`` pairs (slower by over 10% in each); an
equal candidate, measured on synthetic streams at 8% noise, is dropped after 101 pairs on average
(docs/tuning.md); slowest, the last look: ``MAX_PAIRS``, or fewer where the pairs' calls reach
``MAX_SECONDS`` first (at 10 ms a call, 400 pairs).

Usage: python benchmarks/live_cost_fixtures.py [--call-ms 10] [--build-s 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tf_autopar.graph.profile import GraphProfile  # noqa: E402
from tf_autopar.planning import plan  # noqa: E402
from tf_autopar.topology import detect_topology  # noqa: E402
from tf_autopar.measure.live import CALLS_PER_PAIR, EARLY, LOOKS, MAX_PAIRS, MAX_SECONDS  # noqa: E402
from tf_autopar.measure.search import stream_neighbourhood  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "hosts")
EQUAL_PAIRS = 101  # an equal candidate's mean pairs before it loses (synthetic streams, 8% noise, 10 ms calls)


def rows(call_ms: float, build_s: float) -> list[dict]:
    out = []
    for name in sorted(os.listdir(FIXTURES)):
        if name == "garbled":
            continue
        t = detect_topology(os.path.join(FIXTURES, name))
        for width in (1, 3):
            profile = GraphProfile(
                heavy_ops=60, depth=60 // width, avg_width=width, max_width=width, typical_op_work=50_000_000
            )
            for mode in ("latency", "throughput"):
                p = plan(t, profile, mode, env={})
                streams = max(1, p.instances) if mode == "throughput" else 1
                key = (p.inter_op, p.intra_op, streams)
                cands = [k for k in stream_neighbourhood(*key, max(1, p.usable_cpus), width) if k != key]
                n = len(cands)

                def seconds(pairs: int) -> float:
                    pairs = min(pairs, max(LOOKS[0], math.ceil(MAX_SECONDS / (2 * call_ms / 1e3))))  # the time bound
                    return n * (CALLS_PER_PAIR * pairs * call_ms / 1e3 + build_s)  # noqa: B023

                out.append(
                    {
                        "host": name,
                        "logical_cpus": t.logical_cpus,
                        "width": width,
                        "mode": mode,
                        "setting": f"{key[0]}x{key[1]}" + (f" x{key[2]} streams" if key[2] > 1 else ""),
                        "candidates": n,
                        "seconds_all_dropped_early": round(seconds(EARLY), 1),
                        "seconds_all_equal": round(seconds(EQUAL_PAIRS), 1),
                        "seconds_worst": round(seconds(MAX_PAIRS), 1),
                    }
                )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--call-ms", type=float, default=10.0)
    ap.add_argument("--build-s", type=float, default=1.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    table = rows(args.call_ms, args.build_s)
    print(f"assumed: {args.call_ms:g} ms per call at every setting, {args.build_s:g} s to build a candidate")
    print("| host | CPUs | width | mode | plan's setting | candidates | all dropped early s | all equal s | worst s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(
            f"| {r['host']} | {r['logical_cpus']} | {r['width']} | {r['mode']} | {r['setting']} | {r['candidates']} | "
            f"{r['seconds_all_dropped_early']} | {r['seconds_all_equal']} | {r['seconds_worst']} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "call_ms": args.call_ms,
                    "build_s": args.build_s,
                    "early_pairs": EARLY,
                    "equal_pairs": EQUAL_PAIRS,
                    "max_pairs": MAX_PAIRS,
                    "rows": table,
                },
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
