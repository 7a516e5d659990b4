"""`tf-autopar plan`: print a thread plan (or a baseline) for this host and a model width.

Detection (topology, the user's environment) happens here; the numbers come from the pure
``tf_autopar.planning.plan``. ``build_plan`` is the testable core: arguments + topology +
environment -> ThreadPlan.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Any, Mapping

import tf_autopar_workloads as workloads
from tf_autopar._model_path import looks_like_model
from tf_autopar._numbers import add_batch_flag, count
from tf_autopar.cli.notes import say
from tf_autopar.graph import analyze
from tf_autopar.graph.dims import for_unknown_batch, parse_input_shape, typical_batch
from tf_autopar.graph.named import not_a_model
from tf_autopar.planning import FORMATS, MODES, ThreadPlan, baseline_names, baseline_plan, plan
from tf_autopar.planning.modes import INFERENCE_MODES
from tf_autopar.runtime.plans import calibration_for, tuned_for
from tf_autopar.topology import detect_topology
from tf_autopar.topology.model import Topology

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile

log = logging.getLogger("tf_autopar.cli")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="plan inter-op/intra-op/OpenMP threads for this host and a model",
        description="Plan TensorFlow CPU threads from the host topology and the model's width. "
        "Explicit settings in your environment (TF_NUM_*, OMP_NUM_THREADS, KMP_*) are kept.",
    )
    # MODEL: extended by the graph analysis issue. A SavedModel path is analysed with
    # tf_autopar.graph.analyze(path); a bundled workload name via workloads.get(name).
    p.add_argument(
        "model",
        nargs="?",
        default=None,
        help="SavedModel directory or bundled workload name to take the width from (imports TensorFlow)",
    )
    p.add_argument(
        "--width", type=count(1 << 20), default=None, help="the model's average width, if known (instead of MODEL)"
    )
    add_size_argument(p)
    add_shape_arguments(p)
    p.add_argument(
        "--mode",
        choices=MODES,
        default="latency",
        help="latency: one request at a time; throughput: many concurrent requests; training",
    )
    p.add_argument("--streams", type=count(4096), default=None, help="throughput mode: number of streams/instances")
    p.add_argument("--hyperthreads", action="store_true", help="count SMT siblings as CPUs (default: physical cores)")
    p.add_argument(
        "--tf-data", action="store_true", help="the program runs tf.data pipelines (plans >= 2 inter-op threads)"
    )
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default text: the explanation)")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--root", default="/", help="read /sys and /proc under this directory (recorded fixtures)")
    p.add_argument("--baseline", choices=baseline_names(), default=None, help="print a published baseline instead")
    p.add_argument(
        "--no-tuned", action="store_true", help="ignore what `tf-autopar tune` and `calibrate` measured on this host"
    )
    p.set_defaults(func=run)


def add_shape_arguments(p: argparse.ArgumentParser) -> None:
    """--batch, --batching-file, --input-shape, --signature: what a model's free dimensions are read as."""
    add_batch_flag(
        p,
        default=None,
        help="batch size a None batch dimension is read as (default: 1 for latency; throughput: "
        "--batching-file's max_batch_size, else 1); a bundled workload is built at it",
    )
    p.add_argument(
        "--batching-file",
        metavar="PATH",
        default=None,
        help="TF Serving batching parameters file: its max_batch_size is the throughput batch; "
        "with `plan --format tfserving` a PATH that does not exist is written from the plan",
    )
    p.add_argument(
        "--input-shape",
        metavar="NAME=DIMS",
        action="append",
        default=[],
        help="full shape of an input, batch first (e.g. input_ids=1,128): fixes other None dimensions "
        "such as a sequence length (default 128); repeatable",
    )
    p.add_argument("--signature", default=None, help="SavedModel signature to follow (default serving_default)")


def add_size_argument(p: argparse.ArgumentParser) -> None:
    """--size: which of a bundled workload's two sizes a command builds."""
    p.add_argument(
        "--size",
        choices=("tiny", "paper"),
        default="tiny",
        help="bundled workloads only: tiny (default; the same structure shrunk) or paper "
        "(the published hyperparameters and input shapes)",
    )


def shape_options(args: argparse.Namespace, mode: str = "latency") -> dict[str, Any]:
    """analyze() keyword arguments from the options of add_shape_arguments."""
    batch = args.batch
    if batch is not None or args.batching_file or mode in INFERENCE_MODES:
        batch = typical_batch(mode, batch, args.batching_file)
    shapes = dict(parse_input_shape(t) for t in args.input_shape)
    return {
        "batch": batch,
        "input_shapes": shapes,
        "signature": args.signature,
        "batch_given": args.batch is not None or bool(args.batching_file) or bool(shapes),
    }


def load_profile(model: str, mode: str = "latency", **options: Any) -> GraphProfile:
    """GraphProfile for a SavedModel/graph/.keras path or a bundled workload name (imports
    TensorFlow); ``options``: analyze()'s batch, input_shapes, signature."""
    batch_given = options.pop("batch_given", True)
    if os.path.exists(model):
        if batch_given:
            return analyze(model, **options)
        return for_unknown_batch(analyze(model, **options))  # as enable() without a batch
    if looks_like_model(model):
        raise FileNotFoundError(f"no such file or directory: {model!r} (a SavedModel directory, .keras or graph file)")
    if model not in workloads.names():
        raise FileNotFoundError(not_a_model(model))
    # A training plan is for the training graph (forward + backward heavy ops).
    options.pop("input_shapes", None)
    options.pop("signature", None)
    return analyze(model, workload_mode="train" if mode == "training" else "infer", **options)


def workload_names() -> list[str]:
    """The bundled workloads' names."""
    return workloads.names()


def measured_for(profile: GraphProfile | None, mode: str, topology: Topology, batch: int | None) -> tuple[Any, Any]:
    """(tuned setting, calibration) that `tune` and `calibrate` measured on this host for the model."""
    if profile is None:
        return None, None
    return tuned_for(getattr(profile, "fingerprint", ""), mode, topology, batch), calibration_for(topology)


def build_plan(args: argparse.Namespace, topology: Topology, env: Mapping[str, str] | None) -> ThreadPlan:
    """The plan the arguments ask for, on ``topology`` with the user's ``env``."""
    if args.baseline is not None:
        return baseline_plan(args.baseline, topology, env=env, mode=args.mode)
    if args.model is not None and args.width is not None:
        raise ValueError("give MODEL or --width, not both")
    options = shape_options(args, args.mode)
    if args.model is not None and not os.path.exists(args.model):
        options["workload_size"] = getattr(args, "size", "tiny")
        if args.model in workload_names():
            say(
                "plan",
                f"building workload {args.model} at size {options['workload_size']} to analyse it "
                "(imports TensorFlow: a few seconds)",
            )
    profile = load_profile(args.model, args.mode, **options) if args.model is not None else None
    ignore = getattr(args, "no_tuned", False)
    tuned, calibration = (None, None) if ignore else measured_for(profile, args.mode, topology, options["batch"])
    return plan(
        topology,
        profile,
        args.mode,
        width=args.width,
        env=env,
        streams=args.streams,
        use_hyperthreads=args.hyperthreads,
        tf_data=True if args.tf_data else None,
        tuned=tuned,
        calibration=calibration,
    )


def run(args: argparse.Namespace) -> int:
    fmt = "json" if args.json else args.format
    # `--format tfserving --batching-file NEW` writes the file from the plan instead of reading it.
    write_to = None
    if fmt == "tfserving" and args.batching_file and not os.path.exists(args.batching_file):
        if args.mode != "throughput":
            raise ValueError(
                f"--batching-file {args.batching_file!r} does not exist, and only a throughput plan "
                "batches (--mode throughput writes it)"
            )
        write_to, args = args.batching_file, argparse.Namespace(**{**vars(args), "batching_file": None})
    topology = detect_topology(root=args.root)
    result = build_plan(args, topology, os.environ)
    if fmt != "tfserving":
        print(result.format(fmt), end="")
    else:
        batch = args.batch or 32
        if write_to is not None:
            with open(write_to, "w", encoding="utf-8") as fh:
                fh.write(result.batching_parameters(max_batch_size=batch))
            say("plan", f"wrote {write_to} (max_batch_size {batch}, num_batch_threads {result.instances})")
        elif args.batching_file:
            say(
                "plan",
                f"kept {args.batching_file} as it is (its max_batch_size is the batch planned for); the plan's "
                f"num_batch_threads is {result.instances}, max_enqueued_batches {2 * result.instances}",
            )
        print(
            result.tfserving_text(
                batching_file=args.batching_file or write_to or "batching_parameters.txt",
                max_batch_size=batch,
                batching_written=bool(write_to or args.batching_file),
            ),
            end="",
        )
    if fmt == "env" and result.instances > 1:
        n = result.instances
        say(
            "plan",
            f"{n} instances: start {n} processes with these variables, each bound to its CPU list in "
            f"TF_AUTOPAR_CPUS (taskset -c LIST), or let `tf-autopar run --mode throughput --instances {n} "
            "-- COMMAND` start and bind them; processes that call tf_autopar.enable() take their own CPUs "
            "from TF_AUTOPAR_INSTANCES",
        )
    return 0
