"""`tf-autopar analyze PATH_OR_WORKLOAD`: the model's heavy-op depth and width."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tf_autopar import _plots
from tf_autopar.cli.notes import say
from tf_autopar.cli.plan_cmd import add_shape_arguments, add_size_argument, shape_options, workload_names
from tf_autopar.graph import analyze
from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning.planner import lookup_share


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="heavy operators, depth and width of a model graph",
        description=(
            "Analyse a SavedModel directory, a GraphDef/MetaGraphDef file or a bundled workload name: "
            "heavy operators, depth (longest chain of heavy ops), average width floor(heavy/depth) "
            "and maximum width. A SavedModel is read without starting TensorFlow's runtime."
        ),
    )
    p.add_argument("target", metavar="PATH_OR_WORKLOAD", help="SavedModel directory, graph file or workload name")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument(
        "--plot", metavar="PNG", help="save a bar chart of heavy ops per level (needs the plots extra: matplotlib)"
    )
    p.add_argument("--no-gradients", action="store_true", help="do not count gradient (backward-pass) heavy ops")
    p.add_argument("--mode", choices=("infer", "train"), default="infer", help="workload graph to analyse")
    add_size_argument(p)
    p.add_argument("--top", type=int, default=10, help="op types to list (default 10)")
    add_shape_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.plot:
        _plots.require()  # before building a model, not after
    options = shape_options(args, "latency" if args.mode == "infer" else "training")
    options.pop("batch_given")  # the profile at the batch read (1 unless given); `plan` shows the robust choice
    if not os.path.exists(args.target):  # a workload is built at the batch; shapes are the model's own
        options.pop("input_shapes")
        if args.target in workload_names():
            say("analyze", f"building workload {args.target} at size {args.size} (imports TensorFlow: a few seconds)")
    profile = analyze(
        args.target,
        include_gradients=not args.no_gradients,
        workload_mode=args.mode,
        workload_size=args.size,
        **options,
    )
    if args.plot:
        plot_levels(profile, args.plot)
    if args.json:
        data = profile.to_dict()
        if args.plot:
            data["plot"] = args.plot
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        print(render(profile, top=args.top))
        if args.plot:
            print(f"plot:          {args.plot}")
    return 0


def render(profile: GraphProfile, top: int = 10) -> str:
    """The profile as a few human-readable lines."""
    lines = [
        f"source:        {profile.source}",
        f"ops analysed:  {profile.nodes} ({profile.functions} nested function bodies)",
        f"heavy ops:     {profile.heavy_ops}",
        f"depth:         {profile.depth} (longest chain of heavy ops)",
        f"average width: {profile.avg_width} (floor(heavy / depth): the guideline's inter-op pools)",
        f"maximum width: {profile.max_width} (widest level of independent heavy ops)",
        f"training:      {'yes (gradient ops present)' if profile.training else 'no'}",
        f"tf.data:       {'yes' if profile.uses_tf_data else 'no'}",
    ]
    if profile.heavy_op_types:
        lines.append("heavy op types: " + ", ".join(f"{k} {v}" for k, v in profile.heavy_op_types.items()))
    if profile.op_types:
        shown = list(profile.op_types.items())[:top]
        lines.append("top op types:  " + ", ".join(f"{k} {v}" for k, v in shown))
    if profile.typical_op_work is not None:
        lines.append(f"typical op:    {profile.typical_op_work:,} multiply-adds (work-weighted median heavy op)")
    else:
        lines.append("typical op:    unknown (a shape is not static; give --batch / --input-shape)")
    if profile.lookups and profile.lookup_work is not None and profile.contraction_work is not None:
        lines.append(
            f"look-ups:      {profile.lookups}, reading {profile.lookup_work:,} elements per step against "
            f"{profile.contraction_work:,} multiply-adds in the other heavy ops (about "
            f"{lookup_share(profile):.0%} of a step on one thread)"
        )
    for assumption in profile.assumptions:
        lines.append(f"assumed:       {assumption}")
    if profile.level_widths:
        lines.append("heavy ops per level: " + _sparkline(profile.level_widths))
    return "\n".join(lines)


def _sparkline(widths: tuple[int, ...], limit: int = 60) -> str:
    shown = " ".join(str(w) for w in widths[:limit])
    return shown + (f" ... ({len(widths)} levels)" if len(widths) > limit else "")


def plot_levels(profile: GraphProfile, path: str) -> None:
    """Bar chart of heavy ops per level, level 1 at the left, so the model's shape shows:
    a chain is a flat line at 1, branches are bumps; dashed lines mark the widths."""
    plt = _plots.pyplot()
    from matplotlib.ticker import MaxNLocator  # matplotlib: an optional extra, imported for a chart only

    widths = profile.level_widths or (0,)
    fig, ax = plt.subplots(figsize=(min(16, max(6, len(widths) * 0.08 + 4)), 4))
    ax.bar(range(1, len(widths) + 1), widths, width=1.0 if len(widths) > 60 else 0.8, color="#4477aa")
    ax.axhline(profile.avg_width, color="#cc6677", linestyle="--", label=f"average width {profile.avg_width}")
    ax.axhline(profile.max_width, color="#228833", linestyle=":", label=f"maximum width {profile.max_width}")
    ax.set_xlabel("level (heavy-op depth)")
    ax.set_ylabel("heavy ops")
    ax.set_xlim(0.5, len(widths) + 0.5)
    ax.set_ylim(0, max(widths) * 1.25 + 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{profile.source}: {profile.heavy_ops} heavy ops, depth {profile.depth}", fontsize=9)
    ax.legend(loc="upper left", fontsize=8, ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
