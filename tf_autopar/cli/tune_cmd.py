"""`tf-autopar tune MODEL`: measure the plan's neighbourhood on this host and remember the winner.

A few fresh processes (tf_autopar/tuning/), never the whole search space; this command never
imports TensorFlow itself. The winner is stored in the plan cache for enable(),
`plan` and `run --model` on this host.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tf_autopar._numbers import count, seconds
from tf_autopar.graph.dims import MAX_BATCH
from tf_autopar.models.options import add_model_flags, from_args


def add_parser(subparsers: Any) -> None:
    from tf_autopar.tuning import tuner as t

    p = subparsers.add_parser(
        "tune",
        help="measure the plan and its neighbours on this host for MODEL; the next start uses the winner",
        description="Runs the rule's plan and its neighbours (inter-op p-1..p+1, intra-op budget, budget/p, 1) in "
                    "fresh processes, interleaved, dropping the slower half each round, and stores the winner in "
                    "the plan cache when it beats the plan beyond the noise.",
    )
    p.add_argument("model", metavar="MODEL", help="SavedModel directory, .keras file, or bundled workload name")
    p.add_argument("--mode", choices=t.TUNE_MODES, default="latency",
                   help="latency: one request at a time (any model); training: a bundled workload's training step")
    p.add_argument("--batch", type=count(MAX_BATCH, "the largest batch tf-autopar synthesises inputs for"), default=None,
                   help="batch per request (a None batch dimension; default 1) or per training step "
                        "(default: the workload's published batch)")
    p.add_argument("--budget", type=seconds(), default=t.DEFAULT_BUDGET_S, metavar="SECONDS",
                   help=f"machine time to spend, about (default {t.DEFAULT_BUDGET_S:g} s)")
    p.add_argument("--requests", type=count(), default=t.DEFAULT_REQUESTS, help="timed requests (or training steps) per run")
    p.add_argument("--size", choices=("tiny", "paper"), default="tiny", help="bundled workloads only")
    p.add_argument("--dry-run", action="store_true", help="measure and report, store nothing")
    add_model_flags(p)
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tf_autopar.tuning.tuner import tune

    if args.batch is not None and args.batch < 1:
        raise ValueError(f"--batch must be a positive integer, got {args.batch}")
    say = (lambda text: None) if args.json else (lambda text: print(f"tf-autopar tune: {text}", file=sys.stderr))
    outcome = tune(args.model, mode=args.mode, batch=args.batch, budget_s=args.budget, requests=args.requests,
                   size=args.size, model_options=from_args(args), store=not args.dry_run, progress=say)
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2, default=str))
    else:
        print(outcome.text())
    return 0
