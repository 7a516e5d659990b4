"""`tf-autopar validate`: compare our plan with the baselines and the searched optimum.

Every configuration runs in a fresh process (TF fixes its pools at start), interleaved
round by round; see tf_autopar/validation/harness.py. This command never imports
TensorFlow itself. Rows may be bundled workloads or users' model files (SavedModel
directories, .keras files: inference rows at --batch, see tf_autopar/models/).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any

import tf_autopar_workloads as workloads
from tf_autopar._model_path import looks_like_model
from tf_autopar._numbers import add_batch_flag, count, seconds
from tf_autopar.measure.configs import parse_config
from tf_autopar.measure.progress import Progress
from tf_autopar.models.bench import prepare_in_child
from tf_autopar.models.load import model_kind
from tf_autopar.models.options import add_model_flags, from_args
from tf_autopar.models.plan_child import ROW_MODES
from tf_autopar.topology import detect_topology

if TYPE_CHECKING:
    from tf_autopar.validation.harness import Harness, Options

# tf_autopar.validation (its harness, results and report: 25-50 ms) is imported by the steps of
# `run` that use it, not here: every subcommand's module is imported to build the CLI's parser.

# --quick (the README default): a wide vision model with parallel branches (Inception v3,
# inference at its published batch 16, where compute, not the per-call overhead, dominates, and
# training), a wide recommender at batch 1 (Wide&Deep: the latency-bound case) and a sequential
# conv net (AlexNet, training), at tiny size. Measured first (issue 47, 2-core AMD EPYC): one
# tiny inference row took 249 s of fresh processes with the frozen sessions a process each and
# the pools searched too. Now an inference row's frozen sessions are timed inside its live run
# (one process a round) and its process pools are TF's default, the recommendations and our
# plan (the sweep covers the path enable() serves); training rows keep every setting, a fresh
# process each. 2 rounds.
QUICK_ROWS = (("inception_v3", "infer"), ("inception_v3", "train"), ("wide_deep", "infer1"), ("alexnet", "train"))
QUICK_WORKLOADS = tuple(dict.fromkeys(w for w, _ in QUICK_ROWS))
QUICK_MODES = ("infer", "infer1", "train")
QUICK = {"size": "tiny", "rounds": 2, "steps": 10, "warmup": 2}
FULL = {"size": "paper", "rounds": 5, "steps": 20, "warmup": 3}
QUICK_OUT_DIR = "tf-autopar-validate"  # --quick writes its files here unless told otherwise
OUT_FILES = ("validate.json", "validate.md", "validate.png")
DEFAULT_TIMEOUT_S = {"tiny": 180.0, "paper": 1800.0}
DEFAULT_TUNE_RUNS = 12  # the tuner's neighbourhood is at most 12 candidates; halving measures fewer


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="measure our plan against TF's default, TF/Intel recommendations and a searched optimum",
        description="Runs every configuration in fresh processes, interleaved round by round, and reports "
        "medians, our speedup over each baseline and our share of the optimum.",
    )
    p.add_argument(
        "workloads",
        nargs="*",
        metavar="WORKLOAD_OR_PATH",
        help="workloads to validate (default: all; --quick: " + ", ".join(QUICK_WORKLOADS) + "), "
        "and/or SavedModel directories and .keras files (inference rows at --batch)",
    )
    p.add_argument(
        "--modes",
        default=None,
        help="comma-separated rows per workload: infer1 (inference, batch 1), infer (published batch), "
        "train (default: all three; --quick: " + ", ".join(f"{w}/{m}" for w, m in QUICK_ROWS) + ")",
    )
    p.add_argument(
        "--size", choices=("tiny", "paper"), default=None, help="workload size (default paper; --quick: tiny)"
    )
    add_batch_flag(
        p,
        default=None,
        help="batch of a model file's rows (its None batch dimension; default 1) and of workloads' "
        "infer rows (default: the published batch)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="representative subset at tiny size, 2 rounds: 4 rows, at most 46 fresh processes; writes its JSON, markdown report and chart",
    )
    p.add_argument("--rounds", type=count(), default=None, help="interleaved rounds (default 5; --quick 2)")
    p.add_argument("--steps", type=count(), default=None, help="timed steps per run (default 20; --quick 10)")
    p.add_argument("--warmup", type=count(), default=None, help="untimed steps per run first (default 3; --quick 2)")
    p.add_argument(
        "--space",
        choices=("auto", "full", "grid", "none"),
        default="auto",
        help="search space: auto = full up to 4 CPUs, bounded grid above; none = baselines and plan only",
    )
    p.add_argument(
        "--cpu-quota",
        type=float,
        default=None,
        metavar="Q",
        help="run every configuration inside a real cgroup CPU quota of Q CPUs (needs root)",
    )
    p.add_argument(
        "--timeout",
        type=seconds(),
        default=None,
        help="seconds per run before it is killed and recorded as a timeout (default 180 tiny, 1800 paper)",
    )
    _add_output_flags(p)
    p.add_argument(
        "--details",
        action="store_true",
        help="every column (the baselines, our plan's pools, each path, ranges) and every configuration",
    )
    p.add_argument(
        "--runner",
        default=None,
        help="command prefix that runs one workload and prints its JSON (default: "
        "'python -m tf_autopar.cli.main workloads run'); receives NAME --mode --batch --steps "
        "--size --warmup --json",
    )
    p.add_argument(
        "--plan-threads",
        metavar="INTERxINTRA",
        default=None,
        help="validate this fixed setting as 'ours' instead of computing tf_autopar's plan "
        "(e.g. 1x2, or 1x1x2:bt1 on OpenMP builds; skips the per-row planning process)",
    )
    p.add_argument(
        "--tuned",
        action="store_true",
        help="also tune each row as `tf-autopar tune` would (before the rounds) and validate the tuned "
        "setting beside ours, with the tuning's machine time against the sweep's",
    )
    p.add_argument(
        "--tune-runs",
        type=int,
        default=None,
        metavar="N",
        help="most runs one row's tuning may use (default 12; implies --tuned)",
    )
    p.add_argument(
        "--no-frozen",
        action="store_true",
        help="inference rows without the frozen path (the frozen graph in sessions of its own over the "
        "search space, at our plan's pools, and live tuning); those runs use tf_autopar's model child "
        "even with --runner",
    )
    p.add_argument(
        "--frozen-processes",
        action="store_true",
        help="time each frozen session in a fresh process of its own, not inside the row's live run",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_model_flags(p)
    p.add_argument("--estimate", action="store_true", help="print the run count and time estimate, then exit")
    p.set_defaults(func=run)


def _add_output_flags(p: Any) -> None:
    """--json, --json-out, --plot, --markdown and --out-dir: where the results go besides the table."""
    p.add_argument(
        "--json", action="store_true", help="print every raw timing as JSON on stdout (the report goes to stderr)"
    )
    p.add_argument("--json-out", metavar="OUT.json", default=None, help="write every raw timing as JSON to OUT.json")
    p.add_argument(
        "--plot",
        metavar="OUT.png",
        default=None,
        help="chart: per row, speed relative to TF's default of the published recommendations, of what "
        "the one line delivers and of the optimum (no extra needed)",
    )
    p.add_argument("--markdown", metavar="OUT.md", default=None, help="the report as markdown, every column")
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        default=None,
        help=f"write {', '.join(OUT_FILES)} there (--quick: {QUICK_OUT_DIR}/ unless --json-out, --plot or --markdown)",
    )


def _check_models(rows: Any, out: Any) -> None:
    """Load each model file once in a child before anything is measured: a bad model (no
    signatures, string inputs, a wrong --input-shape) is a clear error (exit 2), not a table of
    crashed runs. Prints the inputs and assumptions each row will run with."""
    seen = set()
    for row in rows:
        if (row.workload, row.batch) in seen:
            continue
        seen.add((row.workload, row.batch))
        info = prepare_in_child(row.workload, batch=row.batch, model_options=row.model)
        shapes = "; ".join(
            f"{i['name']} {i['dtype']}[{','.join(map(str, i['shape']))}] {i.get('values', '')}".rstrip()
            for i in info.get("inputs") or []
        )
        print(f"{row.workload} (batch {row.batch}): {shapes}", file=out)
        for a in info.get("assumptions") or []:
            print(f"  assumed: {a}", file=out)


def run(args: argparse.Namespace) -> int:
    from tf_autopar.validation.harness import make_rows

    _out_files(args)
    preset = QUICK if args.quick else FULL
    size = args.size or preset["size"]
    modes = _modes(args)
    if args.batch is not None and args.batch < 1:
        raise ValueError(f"--batch must be a positive integer, got {args.batch}")
    names, model_rows = _named_rows(args, modes)
    options = _options(args, preset, size)
    out = sys.stderr if args.json else sys.stdout
    topology = detect_topology()
    if args.quick and not args.workloads and not args.modes:
        rows = [row for w, m in QUICK_ROWS for row in make_rows([w], [m], size)]
    else:
        rows = make_rows(names, modes, size, {n: args.batch for n in names} if args.batch else None)
    rows += model_rows
    _check_models(model_rows, out)
    harness = _harness(args, topology, options)
    _announce(harness, rows, model_rows, size, out)
    if args.estimate:
        return 0
    doc = harness.run(rows)  # SIGTERM stops it as Ctrl-C does: cli/interrupt.py
    return _report(args, doc, out)


def _out_files(args: argparse.Namespace) -> None:
    """--out-dir (and --quick's default one) as --json-out, --markdown and --plot paths."""
    out_dir = args.out_dir
    if out_dir is None and args.quick and not (args.json_out or args.plot or args.markdown or args.estimate):
        out_dir = QUICK_OUT_DIR
    if out_dir is None:
        return
    json_name, md_name, png_name = OUT_FILES
    args.json_out = args.json_out or os.path.join(out_dir, json_name)
    args.markdown = args.markdown or os.path.join(out_dir, md_name)
    args.plot = args.plot or os.path.join(out_dir, png_name)


def _modes(args: argparse.Namespace) -> tuple[str, ...]:
    """The row modes asked for (--modes, else --quick's or all); ValueError naming an unknown one."""
    modes = (
        tuple(m.strip() for m in args.modes.split(",") if m.strip())
        if args.modes
        else (QUICK_MODES if args.quick else tuple(ROW_MODES))
    )
    for m in modes:
        if m not in ROW_MODES:
            raise ValueError(f"unknown mode {m!r} in --modes; choose from {', '.join(ROW_MODES)}")
    return modes


def _named_rows(args: argparse.Namespace, modes: tuple[str, ...]) -> tuple[list[str], list[Any]]:
    """(the bundled workloads named, the model files' rows): each name and path checked before
    anything runs (ValueError: an unknown workload, a missing path or not a model, model flags
    without a model file, --modes with no inference row for a model file)."""
    from tf_autopar.validation.harness import MODEL_ROW_MODES, make_model_rows

    paths = [n for n in args.workloads if looks_like_model(n)]
    model_options = from_args(args)
    if model_options.given and not paths:
        raise ValueError(
            "--signature, --input-shape, --int-max and --inputs apply to model files (SavedModel "
            "directories, .keras files); no model file was given"
        )
    for path in paths:
        model_kind(path)  # missing path, not a model: ValueError before anything runs
    names = [n for n in args.workloads if n not in paths]
    if not args.workloads:
        names = list(QUICK_WORKLOADS if args.quick else workloads.names())
    for n in names:
        workloads.module_path(n)  # ValueError listing the names on an unknown one
    model_modes = None
    if args.modes and paths:  # a model file has inference rows only: train rows are for the workloads
        model_modes = [m for m in modes if m in MODEL_ROW_MODES]
        if not model_modes:
            raise ValueError(
                f"a model file is validated for inference only: --modes {args.modes} has no "
                f"{' or '.join(MODEL_ROW_MODES)}"
            )
    return names, make_model_rows(paths, model_modes, args.batch, model_options)


def _options(args: argparse.Namespace, preset: dict[str, Any], size: str) -> Options:
    """The harness's options from the flags and the preset (--quick or full), checked."""
    from tf_autopar.validation.harness import DEFAULT_RUNNER, Options

    options = Options(
        rounds=args.rounds or preset["rounds"],
        steps=args.steps or preset["steps"],
        warmup=preset["warmup"] if args.warmup is None else args.warmup,
        timeout_s=args.timeout or DEFAULT_TIMEOUT_S[size],
        cpu_quota=args.cpu_quota,
        space=args.space,
        tune_runs=(args.tune_runs if args.tune_runs is not None else DEFAULT_TUNE_RUNS)
        if args.tuned or args.tune_runs
        else 0,
        runner=tuple(shlex.split(args.runner)) if args.runner else DEFAULT_RUNNER,
        frozen=not args.no_frozen,
        infer_pool_search=not args.quick,
        sweep=not args.frozen_processes,
    )
    options.check()
    return options


def _harness(args: argparse.Namespace, topology: Any, options: Options) -> Harness:
    """The harness: progress bar, --json-out checkpoints, and --plan-threads as "ours" when given."""
    from tf_autopar.validation import report
    from tf_autopar.validation.harness import Harness, fixed_plan_provider
    from tf_autopar.validation.results import OURS

    harness_args = {k: v for k, v in vars(args).items() if k != "func"}
    progress = Progress(0, enabled=not args.no_progress)
    checkpoint = (lambda doc: report.write_json(doc, args.json_out)) if args.json_out else None
    provider = None
    if args.plan_threads:
        try:
            fixed = parse_config(
                args.plan_threads, openmp=topology.threading_runtime == "openmp", name=OURS, kind="plan"
            )
        except ValueError as exc:
            raise ValueError(f"--plan-threads: {exc}") from None
        provider = fixed_plan_provider(fixed)
    return Harness(
        topology, options, progress=progress, checkpoint=checkpoint, args=harness_args, plan_provider=provider
    )


def _announce(harness: Harness, rows: list[Any], model_rows: list[Any], size: str, out: Any) -> None:
    """What will run and roughly how long, before anything does."""
    procs, seconds = harness.estimate(rows)
    print(
        f"validating {len(rows)} row(s) ({', '.join(r.key for r in rows)}"
        f"{f'; size {size}' if len(rows) > len(model_rows) else ''}); "
        f"{harness.space.describe()}",
        file=out,
    )
    if harness.options.frozen and any(r.runner_mode == "infer" for r in rows):
        where = (
            "timed inside the live run, one process a round"
            if harness.options.sweep
            else "a fresh process each (--frozen-processes)"
        )
        pools = "" if harness.options.infer_pool_search else "; their process pools: the baselines and our plan"
        print(
            f"inference rows also run the path enable() serves: live tuning, and the frozen graph in a session "
            f"of its own at each of {len(harness.space.frozen)} inter x intra settings and at our plan's pools, "
            f"{where}{pools} (--no-frozen: without)",
            file=out,
        )
    print(
        f"up to {procs} fresh processes, roughly {seconds / 60:.0f} min (estimate; the progress bar's ETA is measured)",
        file=out,
        flush=True,
    )


def _report(args: argparse.Namespace, doc: dict[str, Any], out: Any) -> int:
    """The table, the JSON and the chart asked for; the exit status: 130 interrupted, 1 when our
    plan ran cleanly in no round of some row, else 0."""
    from tf_autopar.validation import report
    from tf_autopar.validation.results import OURS

    from tf_autopar.validation import chart

    print(report.format_table(doc, details=args.details), file=out)
    if args.json:
        print(report.to_json(doc))
    if args.json_out:
        report.write_json(doc, args.json_out)
        print(f"raw timings written to {args.json_out}", file=out)
    if args.plot:
        chart.write(doc, args.plot)
        print(f"chart written to {args.plot}", file=out)
    if args.markdown:
        shown = args.plot and os.path.relpath(args.plot, os.path.dirname(os.path.abspath(args.markdown)))
        report.write_markdown(doc, args.markdown, chart=shown or None)
        print(f"report (every column) written to {args.markdown}", file=out)
    if doc.get("interrupted"):
        return 130
    unmeasured = [
        f"{r['workload']}/{r['mode']}"
        for r in doc["rows"]
        if not r.get("summary", {}).get("configs", {}).get(OURS, {}).get("rounds_ok")
    ]
    if unmeasured:
        print(
            f"tf-autopar validate: our plan ran cleanly in no round of {', '.join(unmeasured)} "
            "(the failures are listed above)",
            file=sys.stderr,
        )
        return 1
    return 0
