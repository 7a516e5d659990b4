#!/usr/bin/env python
"""What the fast path does, and what the requests pay for it, over the first seconds of traffic.

One process: ``tf_autopar.enable()``, a SavedModel of ``benchmarks/user_models.py`` loaded and its
``serving_default`` called back to back for ``--seconds`` (an empty plan cache and fast-path
directory of its own). Every ``--every`` seconds: the median ms of the calls in that window, and
the bucket's state, the candidate on trial, the candidates left and the verdicts so far; at the
end the tried list. How much a build in the background (a conversion child, a compilation)
slows the requests shows as the windows it spans against those before it.

    python benchmarks/fastpath_timeline.py /work/user_models/xception --seconds 70 \\
        --out benchmarks/results/fastpath_timeline_xception_epyc.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402
from user_models import make_inputs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a SavedModel directory of benchmarks/user_models.py (its name picks the inputs)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=70.0)
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--out")
    args = ap.parse_args()

    scratch = tempfile.mkdtemp(prefix="tfa-timeline-")
    os.environ.setdefault("TF_AUTOPAR_CACHE_DIR", os.path.join(scratch, "cache"))
    os.environ.setdefault("TF_AUTOPAR_FAST_PATH_DIR", os.path.join(scratch, "fastpath"))
    import tf_autopar

    tf_autopar.enable()
    paced: list[str] = []  # each conversion's pace, as the library logs it at its end

    class Paced(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "conversion took" in record.getMessage():
                paced.append(record.getMessage())
                print(record.getMessage(), flush=True)

    logger = logging.getLogger("tf_autopar.runtime")
    logger.addHandler(Paced(logging.INFO))
    logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
    import tensorflow as tf

    from tf_autopar.runtime.fastpath import converting
    from tf_autopar.runtime.fastpath.routing.base import ATTR

    name = os.path.basename(os.path.normpath(args.model))
    sig = tf.saved_model.load(args.model).signatures["serving_default"]
    inputs = make_inputs(name, args.batch)
    windows, calls, start = [], [], time.monotonic()
    next_look = args.every
    while (now := time.monotonic() - start) < args.seconds:
        t = time.perf_counter()
        [v.numpy() for v in sig(**inputs).values()]
        calls.append((now, (time.perf_counter() - t) * 1e3))
        if now >= next_look:
            served = sig.__dict__.get(ATTR)
            b = next(iter(served.buckets.values()), None) if served is not None else None
            ms = [m for s, m in calls if next_look - args.every <= s < next_look]
            windows.append(
                {
                    "until_s": round(next_look, 1),
                    "median_ms": round(statistics.median(ms), 3) if ms else None,
                    "p90_ms": round(statistics.quantiles(ms, n=10)[-1], 3) if len(ms) > 1 else None,
                    "calls": len(ms),
                    "converting": converting.under_way(),
                    "state": b.state.value if b is not None else "no bucket yet",
                    "on_trial": str(b.trial.key) if b is not None and b.trial is not None else None,
                    "candidates_left": len(b.candidates) if b is not None else None,
                    "tried": list(b.tried) if b is not None else [],
                }
            )
            w = windows[-1]
            print(
                f"{w['until_s']:6.1f} s  {w['median_ms']} ms (p90 {w['p90_ms']}, {w['calls']} calls)  {w['state']}"
                f"  on trial: {w['on_trial']}  left: {w['candidates_left']}  tried: {len(w['tried'])}"
                + (f"\n         {w['converting']}" if w["converting"] else ""),
                flush=True,
            )
            next_look += args.every
    status = tf_autopar.status()
    result = {
        "processor": processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "model": name,
        "batch": args.batch,
        "seconds": args.seconds,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_at_end": os.getloadavg(),
        "conversion_budget": os.environ.get("TF_AUTOPAR_CONVERSION_BUDGET", "default"),
        "calls": len(calls),
        "conversions": paced,
        "windows": windows,
        "tried_at_end": windows[-1]["tried"] if windows else [],
        "status": status.text(),
    }
    for line in result["tried_at_end"]:
        print("  tried:", line)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
