"""`tf-autopar characterize [WORKLOAD ...] --out DIR`: Fathom's four analyses of the bundled
workloads (where the time goes, similarity, training vs inference, parallel scaling), each
measurement in a fresh process. The library's face is ``tf_autopar.characterize(...)``
(characterization/bundled.py); this module only parses and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tf_autopar._numbers import add_batch_flag, count, seconds
from tf_autopar.characterization.bundled import characterize
from tf_autopar.characterization.classes import OP_CLASSES


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _words(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


_HELP = "Fathom's characterization of the workloads: op-class time, similarity, train vs infer, scaling"
_DESCRIPTION = (
    "Trace each WORKLOAD (default: all fifteen) in inference and training, at each intra-op thread count and "
    "two inter-op pool sizes, each run in a fresh process, and write DIR/report.md, DIR/characterize.json and "
    "PNGs: kernel time by op class and the programmability tax, which workloads are alike (clustered cosine "
    "similarity), training vs inference, and speedup per workload and per op class. Files appear in DIR only "
    "when everything is done."
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("characterize", help=_HELP, description=_DESCRIPTION)
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="bundled workload names (default: all)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for report.md, characterize.json, PNGs")
    p.add_argument("--size", choices=("tiny", "paper"), default="tiny", help="model size (default tiny)")
    p.add_argument("--modes", type=_words, default=["infer", "train"], help="infer,train (default both)")
    p.add_argument(
        "--threads",
        type=_ints,
        default=None,
        help="intra-op thread counts, e.g. 1,2,4 (default 1, 2, 4, ... up to the CPU budget)",
    )
    p.add_argument(
        "--inter",
        type=_ints,
        default=[1, 2],
        help="inter-op pool sizes compared at the largest intra-op count (default 1,2)",
    )
    p.add_argument("--steps", type=count(), default=10, help="traced steps per run (default 10)")
    p.add_argument("--warmup", type=count(), default=2, help="untraced steps first (default 2)")
    p.add_argument(
        "--rounds", type=count(), default=1, help="repeat every run this many times, interleaved (default 1)"
    )
    add_batch_flag(p, default=None, help="batch size (default: each workload's published one)")
    p.add_argument(
        "--classes",
        type=_words,
        default=[],
        help="op classes for the per-class scaling table (default: those with 5%% or more); one of: "
        + ", ".join(OP_CLASSES),
    )
    p.add_argument("--timeout", type=seconds(), default=600.0, help="seconds per run before it is killed (default 600)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--json", action="store_true", help="print characterize.json's content on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = characterize(
        args.workloads,
        args.out,
        size=args.size,
        modes=args.modes,
        threads=args.threads,
        inter=args.inter,
        steps=args.steps,
        warmup=args.warmup,
        rounds=args.rounds,
        batch=args.batch,
        timeout_s=args.timeout,
        classes=args.classes,
        progress=not args.no_progress,
    )
    if args.json:
        from tf_autopar.characterization.report import result_json  # imports numpy: kept off the CLI's start

        json.dump(result_json(result), sys.stdout, indent=2)
        print()
    else:
        print(
            f"{len(result.runs)} runs in {result.wall_s:.0f} s ({len(result.failures)} failed); wrote "
            + ", ".join(os.path.join(args.out, f) for f in result.files)
        )
        for m, sim in result.analyses["similarity"].items():
            groups = [g for g in sim.groups if len(g) > 1]
            if groups:
                print(f"{m}: alike: " + "; ".join(", ".join(g) for g in groups))
    return 1 if result.failures else 0
