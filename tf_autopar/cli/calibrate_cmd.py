"""`tf-autopar calibrate`: measure from which op size a second intra-op thread pays on this host.

The planner's small-op threshold was fitted on another processor; this measures this host's
in fresh processes (about a minute on 2 cores) and stores it in the plan cache for every plan
made here (tf_autopar/tuning/calibrate.py). This command never imports TensorFlow itself.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tf_autopar._numbers import count
from tf_autopar.cli.notes import sayer
from tf_autopar.tuning.calibrate import calibrate


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure this host's small-op threshold (one intra-op thread vs all) and remember it",
        description="Times a ladder of convolutions (0.6 M to 150 M multiply-adds) with one intra-op thread and "
        "with every CPU of the budget, in fresh processes and interleaved rounds, and stores the op "
        "size from which the CPUs pay as this host's small-op threshold.",
    )
    p.add_argument("--rounds", type=count(), default=3, help="interleaved rounds (default 3)")
    p.add_argument("--dry-run", action="store_true", help="measure and report, store nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {args.rounds}")
    say = sayer("calibrate", quiet=args.json)
    entry = calibrate(args.rounds, store=not args.dry_run, progress=say)
    if args.json:
        print(json.dumps(entry, indent=2))
        return 0 if entry["small_op_work"] else 1
    print(f"processor: {entry['cpu_model']}; budget {entry['budget']} CPUs; {entry['rounds']} rounds")
    print(f"{'multiply-adds':>14}  {'1 thread':>10}  {str(entry['budget']) + ' threads':>10}  ratio")
    for work, t in entry["per_op_s"].items():
        one, many = t.get("1"), t.get(str(entry["budget"]))
        ratio = f"{one / many:.2f}" if one and many else "-"
        print(f"{int(work) / 1e6:>12.1f} M  {(one or 0) * 1e6:>8.0f} us  {(many or 0) * 1e6:>8.0f} us  {ratio}")
    if entry["small_op_work"] is None:
        print(f"no threshold: {entry['why']}; the planner keeps its default")
        return 1
    stored = "" if args.dry_run else "; stored for every plan made on this host"
    print(f"small-op threshold: {entry['small_op_work'] / 1e6:.1f} M multiply-adds ({entry['why']}){stored}")
    return 0
