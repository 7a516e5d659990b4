"""`tf-autopar workloads list|run`: the bundled workloads and a per-step timer for them.

``run --json`` prints only one JSON object on stdout: the object the validation harness's
workload runner (tf_autopar.models.child:steps, the same function) returns; TensorFlow's own
logging goes to stderr and is quietened unless the user set TF_CPP_MIN_LOG_LEVEL.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

import tf_autopar_workloads as workloads
from tf_autopar._text import table
from tf_autopar.cli.notes import say
from tf_autopar.graph import analyze
from tf_autopar.measure.child import emit
from tf_autopar.models.child import add_steps_flags, run_steps

log = logging.getLogger("tf_autopar.cli")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("workloads", help="list or run the bundled benchmark workloads")
    sub = p.add_subparsers(dest="workloads_command", metavar="ACTION", required=True)

    lp = sub.add_parser("list", help="name, family, task, batch, parameters, heavy ops, width")
    lp.add_argument(
        "--size",
        choices=("tiny", "paper"),
        default="tiny",
        help="size whose graph is built for parameters/heavy ops/width (default tiny: fast)",
    )
    lp.add_argument("--no-build", action="store_true", help="do not build models: registry facts only")
    lp.add_argument("--json", action="store_true", help="print JSON")
    lp.set_defaults(func=_list)

    rp = sub.add_parser("run", help="time a workload's steps (tf.function or TF1 Session path)")
    add_steps_flags(rp)
    rp.set_defaults(func=_run)


def _quiet_tf() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _describe(name: str, size: str, build: bool) -> dict[str, Any]:
    w = workloads.get(name)
    row: dict[str, Any] = {
        "name": name,
        "family": w.family,
        "task": w.task,
        "default_batch": w.default_batch,
        "description": w.description,
        "size": size,
        "parameters": None,
        "heavy_ops": None,
        "depth": None,
        "width": None,
    }
    if not build:
        return row
    from tf_autopar_workloads import runner  # imports numpy: kept off the CLI's start

    try:
        built = runner.build(w, size=size)
    except Exception as exc:  # one broken model must not hide the others
        log.warning("building %s (%s) failed: %s", name, size, exc)
        return row
    row["parameters"] = int(built.model.count_params())
    try:
        profile = analyze(built.infer_concrete())
        row.update(heavy_ops=profile.heavy_ops, depth=profile.depth, width=profile.avg_width)
    except Exception as exc:  # analysis is a bonus column; never fail the listing for it
        log.warning("graph analysis of %s failed: %s", name, exc)
    return row


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) and value >= 1_000_000:
        return f"{value / 1e6:.1f}M"
    if isinstance(value, int) and value >= 10_000:
        return f"{value / 1e3:.0f}K"
    return str(value)


def _list(args: argparse.Namespace) -> int:
    _quiet_tf()
    names = workloads.names()
    rows = []
    for i, name in enumerate(names, 1):
        if not args.no_build and not args.json:  # each build takes a second or more
            say("workloads", f"building {name} ({i} of {len(names)}, size {args.size}; --no-build skips this)")
        rows.append(_describe(name, args.size, not args.no_build))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ("name", "family", "task", "default_batch", "parameters", "heavy_ops", "depth", "width")
    heads = ("NAME", "FAMILY", "TASK", "BATCH", f"PARAMS({args.size})", "HEAVY", "DEPTH", "WIDTH")
    print("\n".join(table(heads, [tuple(_fmt(r[c]) for c in cols) for r in rows], rule=False)))
    return 0


def _run(args: argparse.Namespace) -> int:
    _quiet_tf()
    result = run_steps(args)
    if args.json:
        emit(result)
        return 0
    ms = 1e3
    print(
        f"{result['workload']} {result['mode']} size={result['size']} batch={result['batch']} "
        f"path={result['path']} steps={result['steps']} (build {result['build_s']:.2f} s)"
    )
    print(
        f"step time: median {result['median_s'] * ms:.2f} ms, p10 {result['p10_s'] * ms:.2f} ms, "
        f"p90 {result['p90_s'] * ms:.2f} ms"
    )
    if result["losses"]:
        print("loss per step: " + " ".join(f"{x:.4g}" for x in result["losses"]))
    print(f"peak RSS {result['peak_rss_mb']:.0f} MiB (process-wide)")
    return 0
