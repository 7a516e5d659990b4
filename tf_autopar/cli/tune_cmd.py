"""`tf-autopar tune MODEL`: measure the plan's neighbourhood on this host and remember the winner.

By default in one process, on the path a server runs (tuning/inprocess.py: enable()'s frozen
session tuned live on synthesised calls; the winner served by the next start from its first
call). ``--process-pools``: the fresh-process search of the process pools (tuning/tuner.py),
the only one for training steps and bundled workloads. ``--live-reset``: forget what was tuned
for MODEL on this host. This command never imports TensorFlow itself.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tf_autopar import tuning
from tf_autopar._numbers import add_batch_flag, count, seconds
from tf_autopar.cli.notes import sayer
from tf_autopar.models.options import add_model_flags, from_args
from tf_autopar.planning.modes import MODES
from tf_autopar.tuning.inprocess import live_reset
from tf_autopar.tuning.tuner import DEFAULT_REQUESTS


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "tune",
        help="measure the plan and its neighbours on this host for MODEL; the next start uses the winner",
        description="By default, in one process: enable() serves MODEL from its frozen graph in a session of its "
        "own and tunes that session's pools on synthesised calls (the plan's neighbours one at a time, "
        "paired with the incumbent's calls, a sequential stopping rule); the winner is stored where the "
        "next enable() start serves it from its first call. --process-pools: the fresh-process search "
        "of the process pools (one process per candidate, interleaved rounds). --live-reset: forget "
        "what was tuned for MODEL on this host.",
    )
    p.add_argument("model", metavar="MODEL", help="SavedModel directory, .keras file, or bundled workload name")
    p.add_argument(
        "--mode",
        choices=MODES,
        default="latency",
        help="latency: one request at a time; throughput: one caller per stream (in-process only); "
        "training: a bundled workload's training step (--process-pools)",
    )
    add_batch_flag(
        p,
        default=None,
        help="batch per request (a None batch dimension; default 1) or per training step "
        "(default: the workload's published batch)",
    )
    p.add_argument(
        "--budget",
        type=seconds(),
        default=tuning.DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help=f"machine time to spend, about (default {tuning.DEFAULT_BUDGET_S:g} s)",
    )
    p.add_argument(
        "--process-pools",
        action="store_true",
        help="the fresh-process search of the process pools (the eager path; bundled workloads, training)",
    )
    p.add_argument(
        "--live-reset",
        action="store_true",
        help="forget the settings tuned live or by tune for MODEL on this host, then exit",
    )
    p.add_argument(
        "--requests",
        type=count(),
        default=DEFAULT_REQUESTS,
        help="--process-pools: timed requests (or training steps) per run",
    )
    p.add_argument("--size", choices=("tiny", "paper"), default="tiny", help="bundled workloads only")
    p.add_argument("--dry-run", action="store_true", help="measure and report, store nothing")
    add_model_flags(p)
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tuning.check_batch(args.batch)  # before --live-reset too, as ever
    if args.live_reset:
        return _live_reset(args)
    outcome = tuning.tune(
        args.model,
        mode=args.mode,
        batch=args.batch,
        budget_s=args.budget,
        process_pools=args.process_pools,
        requests=args.requests,
        size=args.size,
        model_options=from_args(args),
        store=not args.dry_run,
        progress=sayer("tune", quiet=args.json),
    )
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2, default=str))
    else:
        print(outcome.text())
    return 0


def _live_reset(args: argparse.Namespace) -> int:
    res = live_reset(args.model)
    if args.json:
        print(json.dumps(res, indent=2))
    elif res["tuned"] or res["served_buckets"]:
        print(
            f"forgot what was tuned for {args.model} on this host: {res['served_buckets']} served batch "
            f"bucket(s), {res['tuned']} process-pool entr{'y' if res['tuned'] == 1 else 'ies'} ({res['cache']}); "
            "the next start serves the rule's plan and tunes again"
        )
    else:
        print(f"nothing tuned for {args.model} on this host ({res['cache']})")
    return 0
