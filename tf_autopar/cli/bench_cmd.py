"""`tf-autopar bench MODEL`: latency and throughput of a model under several thread settings.

MODEL is a SavedModel directory, a .keras file or a bundled workload name. Every
configuration runs in fresh processes, interleaved round by round (tf_autopar/models/bench.py);
this command never imports TensorFlow itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tf_autopar._files import write_json_atomic
from tf_autopar._numbers import add_batch_flag, count, seconds
from tf_autopar.measure.progress import Progress
from tf_autopar.models import bench as b
from tf_autopar.models.bench import Bench, BenchOptions, parse_compare
from tf_autopar.models.bench_report import format_report
from tf_autopar.models.options import add_model_flags, from_args


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="latency/throughput of your model (SavedModel, .keras, workload) under TF's default, our plan, ...",
        description="Runs each configuration in fresh processes, interleaved round by round, on inputs "
        "synthesised from the model's signature (or --inputs), and reports the effective thread "
        "settings, p50/p90/p99 latency, throughput and the speedup over TensorFlow's default.",
    )
    p.add_argument("model", metavar="MODEL", help="SavedModel directory, .keras file, or bundled workload name")
    add_batch_flag(p, default=1, help="batch per request; a None batch dimension (default 1)")
    p.add_argument(
        "--mode",
        choices=b.MODES,
        default="latency",
        help="latency: one process, one request at a time; throughput: the plan's instances as "
        "that many concurrent processes for every configuration, throughput summed",
    )
    amount = p.add_mutually_exclusive_group()
    amount.add_argument(
        "--requests",
        type=count(),
        default=None,
        help=f"timed requests per process and run (default {b.DEFAULT_REQUESTS})",
    )
    amount.add_argument(
        "--time",
        type=seconds(),
        default=None,
        metavar="SECONDS",
        help="time requests for this long per process and run instead",
    )
    p.add_argument(
        "--warmup",
        type=count(),
        default=b.DEFAULT_WARMUP,
        help=f"untimed requests first (tracing, allocation; default {b.DEFAULT_WARMUP})",
    )
    p.add_argument(
        "--rounds", type=count(), default=b.DEFAULT_ROUNDS, help=f"interleaved rounds (default {b.DEFAULT_ROUNDS})"
    )
    p.add_argument(
        "--compare",
        default=",".join(b.DEFAULT_COMPARE),
        help="comma-separated configurations: default (TF's default), plan (tf_autopar's plan), "
        "enable (enable() with no model, empty cache: a first start), enable-cached (its second "
        "start), live (enable() once live tuning has settled), frozen (the frozen graph in a session "
        "with the plan's pools: the fast path; also tf-frozen), frozen:INTERxINTRA (the same with these pools), "
        "openvino, onnxruntime, openvino-bf16 (the frozen graph on that engine at the plan's CPUs; the "
        "engines extra), "
        "INTERxINTRA (e.g. 1x2), and on OpenMP builds INTERxINTRAxOMP[:btMS] (OpenMP "
        "threads apart from TF's intra-op pool, KMP_BLOCKTIME; e.g. 1x1x2:bt1); default "
        "'default,plan'. Speedups are over 'default'",
    )
    p.add_argument(
        "--streams", type=count(4096), default=None, help="throughput mode: instances to plan (default: planner)"
    )
    p.add_argument("--size", choices=("tiny", "paper"), default="tiny", help="bundled workloads only (default tiny)")
    p.add_argument(
        "--timeout",
        type=seconds(),
        default=b.DEFAULT_TIMEOUT_S,
        help=f"seconds per process before it is killed (default {b.DEFAULT_TIMEOUT_S:g})",
    )
    add_model_flags(p)
    p.add_argument(
        "--json", action="store_true", help="print every raw timing as JSON on stdout (the report goes to stderr)"
    )
    p.add_argument("--json-out", metavar="OUT.json", default=None, help="write every raw timing as JSON to OUT.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = BenchOptions(
        model=args.model,
        batch=args.batch,
        mode=args.mode,
        requests=args.requests,
        time_s=args.time,
        warmup=args.warmup,
        rounds=args.rounds,
        compare=parse_compare(args.compare),
        size=args.size,
        streams=args.streams,
        timeout_s=args.timeout,
        model_options=from_args(args),
    )
    out = sys.stderr if args.json else sys.stdout
    progress = Progress(0, enabled=not args.no_progress)
    with Bench(options, progress=progress) as bench:  # SIGTERM: cli/interrupt.py
        print(f"tf-autopar bench: loading and planning {bench.model} in a child process ...", file=out, flush=True)
        try:
            bench.prepare()
        except RuntimeError as exc:  # the child crashed (not bad input: that is a ValueError, exit 2)
            print(f"tf-autopar bench: error: {exc}", file=sys.stderr)
            return 1
        doc = bench.run()
    print(format_report(doc), file=out)
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
    if args.json_out:
        write_json_atomic(args.json_out, doc, indent=1, default=str)
        print(f"raw timings written to {args.json_out}", file=out)
    if doc.get("interrupted"):
        return 130
    failed = [n for n, s in doc["summary"].items() if s.get("rounds_ok", 0) == 0]
    return 1 if failed else 0
