"""`tf-autopar trace MODEL`: per-op-type time profile of a model's steps (a bundled workload's, or
a SavedModel's / .keras file's inference on inputs synthesised from its signature, as ``bench``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import tf_autopar
import tf_autopar_workloads as workloads
from tf_autopar._model_path import looks_like_model
from tf_autopar._numbers import add_batch_flag, count
from tf_autopar.cli.notes import say
from tf_autopar.models.load import model_kind, prepare_model
from tf_autopar.models.options import add_model_flags, from_args
from tf_autopar.tracing.build import FAILED_MARKER, NativeBuildError, build, make_plan


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trace",
        help="per-op-type time profile of a workload, SavedModel or .keras file (native op tracer)",
        description=(
            "Run a bundled workload, or a SavedModel / .keras file's inference on synthesised inputs, for a "
            "few steps under tf_autopar.trace() and print where the time "
            "goes by op type, and the share of heavy ops (conv, matmul, embedding, recurrent) versus the "
            "rest. The native tracer is built on first use (about 10 s, cached per TF version); without "
            "a compiler the slower tf.profiler fallback runs (TF_AUTOPAR_NO_NATIVE=1 forces it)."
        ),
    )
    p.add_argument(
        "workload",
        nargs="?",
        metavar="MODEL",
        help="bundled workload name (see `tf-autopar workloads list`), SavedModel directory or .keras file",
    )
    p.add_argument(
        "--mode",
        choices=("infer", "train"),
        default="infer",
        help="inference or training steps (a model file: inference)",
    )
    p.add_argument("--size", choices=("tiny", "paper"), default="tiny", help="model size (default tiny)")
    add_batch_flag(
        p, default=None, help="batch size (default: the workload's published one; a model file's None batch: 1)"
    )
    p.add_argument(
        "--path",
        choices=("function", "session"),
        default="function",
        help="run as a tf.function (default) or in a TF1 Session",
    )
    p.add_argument("--steps", type=count(), default=10, help="traced steps (default 10)")
    p.add_argument("--warmup", type=count(), default=2, help="untraced steps first (default 2)")
    p.add_argument("--cheap-ops", action="store_true", help="also record cheap inlined kernels (slower)")
    p.add_argument("--backend", choices=("auto", "native", "profiler"), default="auto", help="tracer backend")
    p.add_argument("--top", type=int, default=15, help="op types to list (default 15)")
    p.add_argument("--ops", type=int, default=0, metavar="N", help="also list the N most expensive ops")
    p.add_argument("--chrome", metavar="OUT_JSON", help="write a Perfetto / chrome://tracing timeline")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.add_argument(
        "--build",
        action="store_true",
        help="(re)build the native tracer for the installed TensorFlow and exit (no MODEL)",
    )
    add_model_flags(p)
    p.set_defaults(func=run)


def _build(args: argparse.Namespace) -> int:
    try:
        path = build(force=True)
    except NativeBuildError as exc:
        if args.json:
            print(json.dumps({"built": False, "error": str(exc)}))
        else:
            say("trace", f"native tracer not built: {exc}")
        return 1
    print(json.dumps({"built": True, "library": str(path)}) if args.json else f"native tracer built: {path}")
    return 0


def _native_needs_building() -> bool:
    """True when tracing will first compile the native tracer (a wait worth announcing)."""
    from tf_autopar.tracing.tracer import native_disabled  # imports numpy: kept off the CLI's start

    if native_disabled() or os.environ.get("TF_AUTOPAR_NATIVE_LIB"):
        return False
    try:
        plan = make_plan()
    except (NativeBuildError, OSError):
        return False  # no compiler: the fallback says so itself
    return not plan.library.is_file() and not (plan.cache_dir / FAILED_MARKER).is_file()


def _step_fn(built: Any, mode: str, path: str) -> tuple[Any, Any, Any]:
    """(step callable, closer, GraphDef whose node names the trace will show)."""
    import tensorflow as tf

    if path == "session":
        sess = built.session(mode)
        graph = getattr(sess, "graph_def", None)
        if graph is None and hasattr(sess, "graph"):
            graph = sess.graph.as_graph_def()
        return sess.run, sess.close, graph
    if mode == "infer":
        fn = built.infer_function()
        xs = [tf.constant(a) for a in built._flat_inputs]
        return (lambda: [o.numpy() for o in fn(*xs)]), None, built.graph_def("infer")
    fn = built.train_function()
    xs = [tf.constant(a) for a in built._flat_inputs + built._flat_targets]
    return (lambda: fn(*xs).numpy()), None, built.graph_def("train")


def _workload_step(args: argparse.Namespace) -> tuple[Any, Any, Any, int]:
    if from_args(args).given:
        raise ValueError(
            "--signature, --input-shape, --int-max and --inputs apply to model files (SavedModel "
            f"directories, .keras files), not to the bundled workload {args.workload!r}"
        )
    from tf_autopar_workloads import runner  # imports numpy: kept off the CLI's start

    workloads.module_path(args.workload)  # ValueError listing the bundled names
    built = runner.build(args.workload, size=args.size, batch=args.batch)
    return (*_step_fn(built, args.mode, args.path), built.batch)


def _model_step(args: argparse.Namespace) -> tuple[Any, Any, Any, int]:
    """A model file's inference step on inputs synthesised from its signature (models/load.py)."""
    model_kind(args.workload)  # missing path, not a model: a clear error
    if args.mode != "infer":
        raise ValueError(f"a model file is traced for inference (--mode infer), got --mode {args.mode}")
    if args.path != "function":
        raise ValueError("a model file runs its own functions: --path session applies to bundled workloads")
    prepared = prepare_model(args.workload, args.batch or 1, from_args(args))
    return prepared.model.step(prepared.arrays), None, prepared.model.concrete_function(prepared.arrays), prepared.batch


def run(args: argparse.Namespace) -> int:
    if args.build:
        return _build(args)
    if not args.workload:
        raise ValueError("name a WORKLOAD to trace (or pass --build)")
    if args.steps < 1:
        raise ValueError(f"--steps must be a positive integer, got {args.steps}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be zero or more, got {args.warmup}")
    if args.batch is not None and args.batch < 1:
        raise ValueError(f"--batch must be a positive integer, got {args.batch}")
    model = looks_like_model(args.workload)
    if not args.json:
        what = f"loading {args.workload}" if model else f"building workload {args.workload} at size {args.size}"
        say("trace", f"{what} (imports TensorFlow: a few seconds)")
    step, closer, graph, batch = _model_step(args) if model else _workload_step(args)
    if args.backend != "profiler" and not args.json and _native_needs_building():
        say("trace", "compiling the native op tracer for this TensorFlow (once per version: about 10 s)")
    try:
        for _ in range(args.warmup):
            step()
        with tf_autopar.trace(cheap_ops=args.cheap_ops, backend=args.backend) as t:
            for _ in range(args.steps):
                step()
    finally:
        if closer is not None:
            closer()
    if graph is not None:
        t.use_graph(graph)  # which gathers are embedding look-ups (heavy in recommendation models)
    if args.chrome:
        t.save_chrome_trace(args.chrome)
    if args.json:
        data = {
            "workload": args.workload,
            "mode": args.mode,
            "size": args.size,
            "batch": batch,
            "path": args.path,
            **t.to_dict(steps=args.steps),
        }
        if args.chrome:
            data["chrome_trace"] = args.chrome
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        print(render(t, args.workload, args.mode, args.size, batch, args.steps, args.top, args.ops))
        if args.chrome:
            print(f"chrome trace: {args.chrome} (open in ui.perfetto.dev or chrome://tracing)")
    return 0


def render(t: Any, workload: str, mode: str, size: str, batch: int, steps: int, top: int = 15, n_ops: int = 0) -> str:
    """The op-type table and the heavy-op share as text."""
    hs = t.heavy_share()
    types = t.by_type()
    lines = [
        f"{workload} ({mode}, {size}, batch {batch}): {steps} steps, {t.wall_s / steps * 1e3:.2f} ms/step wall, "
        f"tracer: {t.backend}",
        "",
        f"{'op type':<28} {'ms/step':>9} {'share':>7} {'calls/step':>10} {'median us':>10}  heavy",
    ]
    for r in types[:top]:
        lines.append(
            f"{r.type[:28]:<28} {r.total_s / steps * 1e3:9.3f} {r.share * 100:6.1f}% {r.count / steps:10.1f} "
            f"{r.median_s * 1e6:10.1f}  {r.heavy or ''}"
        )
    if len(types) > top:
        rest = types[top:]
        lines.append(
            f"{'(' + str(len(rest)) + ' more types)':<28} {sum(r.total_s for r in rest) / steps * 1e3:9.3f} "
            f"{sum(r.share for r in rest) * 100:6.1f}%"
        )
    lines += [
        "",
        f"heavy ops: {hs.heavy_s / steps * 1e3:.3f} ms/step = {hs.heavy_fraction * 100:.1f}% of traced op time"
        f" ({', '.join(f'{k} {v / steps * 1e3:.2f} ms' for k, v in hs.by_class.items()) or 'none'})",
        f"programmability tax: {hs.tax_fraction * 100:.1f}% of wall time runs no heavy op "
        f"(wall {hs.wall_s / steps * 1e3:.3f} ms/step, heavy busy {hs.heavy_busy_s / steps * 1e3:.3f} ms/step)",
    ]
    if n_ops:
        lines += ["", f"{'op':<48} {'type':<20} {'ms/step':>9} {'median us':>10}  thread"]
        for r in t.ops()[:n_ops]:
            lines.append(
                f"{r.name[-48:]:<48} {r.type[:20]:<20} {r.total_s / steps * 1e3:9.3f} "
                f"{r.median_s * 1e6:10.1f}  {r.thread}"
            )
    return "\n".join(lines)
