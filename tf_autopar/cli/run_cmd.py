"""`tf-autopar run [--mode M] [--instances N] [--cores LIST] [--allocator A] [--log-dir DIR] [--dry-run] [--json] -- COMMAND ...`"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from tf_autopar._numbers import count
from tf_autopar.cli.notes import say
from tf_autopar.planning.modes import MODES
from tf_autopar.cli.plan_cmd import (
    add_shape_arguments,
    add_size_argument,
    load_profile,
    measured_for,
    shape_options,
    workload_names,
)
from tf_autopar.runtime import allocator, launcher
from tf_autopar.topology import detect_topology, parse_cpulist


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a program (or N pinned instances) with planned thread settings",
        description="Plan threads for this host and start COMMAND with them applied: TF_NUM_* "
        "variables (OpenMP variables only for OpenMP builds), each instance bound to its own "
        "CPUs. Variables you set are never overridden; signals are forwarded; the exit code is "
        "the first failing child's. Each instance started is named on stderr with its CPUs and "
        "threads; several instances' output is prefixed [instance I] (or goes to --log-dir).",
    )
    p.add_argument("--mode", choices=MODES, default="latency")
    p.add_argument(
        "--instances",
        type=count(10**15),
        default=None,
        help="copies of COMMAND, each on disjoint CPUs (each gets TF_AUTOPAR_INSTANCE=0..N-1, e.g. to "
        "pick its own port); throughput mode needs it to start more than one",
    )
    p.add_argument("--cores", default=None, help="CPU list to use, e.g. 0-3,8 (default: this process's affinity)")
    p.add_argument(
        "--model",
        metavar="PATH_OR_WORKLOAD",
        default=None,
        help="plan from this model (SavedModel directory, .keras file, graph file or bundled workload); "
        "an enable() inside COMMAND plans the same",
    )
    add_size_argument(p)
    add_shape_arguments(p)
    p.add_argument(
        "--allocator",
        choices=allocator.CHOICES,
        default="default",
        help="preload the system's jemalloc or tcmalloc into COMMAND (LD_PRELOAD; Debian packages "
        "libjemalloc2, libtcmalloc-minimal4); default: glibc malloc, nothing preloaded",
    )
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        default=None,
        help="write each instance's stdout and stderr to DIR/instance-I.log instead of this terminal",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and commands, start nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: print the launch plan as JSON")
    # dest "program", not "command": nothing may shadow the subcommand's own name in error messages
    p.add_argument("program", metavar="COMMAND", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("no command given: use `tf-autopar run [options] -- COMMAND ...`")
    if args.instances is not None and args.instances < 1:
        raise ValueError(f"--instances must be at least 1, got {args.instances}")
    if args.json and not args.dry_run:
        raise ValueError(
            "--json prints the launch plan and needs --dry-run (a running COMMAND's output is its own); "
            "use `tf-autopar run --dry-run --json -- COMMAND`"
        )
    preload, preload_note = allocator.allocator_env(args.allocator, os.environ)  # a missing library: before any work
    topology = detect_topology()
    if args.cores:
        topology = launcher.restrict_to_cores(topology, parse_cpulist(args.cores))
    options = shape_options(args, args.mode)
    if args.model and not os.path.exists(args.model):
        options["workload_size"] = args.size
        if args.model in workload_names() and not args.json:
            say("run", f"building workload {args.model} at size {args.size} to plan for it (imports TensorFlow)")
    profile = load_profile(args.model, args.mode, **options) if args.model else None
    tuned, calibration = measured_for(profile, args.mode, topology, options["batch"])
    launch = launcher.launch_specs(
        topology,
        command,
        mode=args.mode,
        instances=args.instances,
        environ=os.environ,
        numactl=launcher.find_numactl(),
        profile=profile,
        tuned=tuned,
        calibration=calibration,
    )
    if preload and preload["LD_PRELOAD"] != os.environ.get("LD_PRELOAD"):
        launch = dataclasses.replace(
            launch,
            instances=tuple(
                dataclasses.replace(spec, env_set={**spec.env_set, **preload}) for spec in launch.instances
            ),
        )
    if preload_note:
        launch = dataclasses.replace(launch, warnings=launch.warnings + (preload_note,))
    hint = (
        allocator.recommendation(topology.cpu.model, profile.fingerprint)
        if (profile is not None and args.allocator == "default")
        else None
    )
    if hint is not None:
        say("run", hint.text())
    n = len(launch.instances)
    if args.dry_run:
        if args.json:
            print(json.dumps(launch.to_dict(), indent=2, default=str))
            return 0
        print(launch.explain)
        for warning in launch.warnings:
            print(f"warning: {warning}")
        for spec in launch.instances:
            env = " ".join(f"{k}={v}" for k, v in sorted(spec.env_set.items()))
            print(f"{launch.describe(spec.index)}\n  {env} -- {' '.join(spec.argv)}")
        return 0
    if args.mode == "throughput" and n > 1 and args.instances is None:
        raise ValueError(
            f"throughput mode would start COMMAND {n} times, one per CPU slice, and a server listening on a fixed "
            f"port would clash with itself. Say how many: --instances {n} starts them (each gets "
            f"TF_AUTOPAR_INSTANCE=0..{n - 1} to pick its own port), --instances 1 starts one; "
            "--dry-run shows the plan"
        )
    for warning in launch.warnings:
        say("run", f"warning: {warning}")
    if n > 1:
        where = f"logs in {args.log_dir}/instance-I.log" if args.log_dir else "output prefixed [instance I]"
        say("run", f"starting {n} instances of `{' '.join(command)}` ({args.mode} mode; {where})")
    for spec in launch.instances:
        log = f"; log {launcher.log_path(args.log_dir, spec.index)}" if args.log_dir else ""
        say("run", launch.describe(spec.index) + log)
    sys.stdout.flush()
    return launcher.run(launch, log_dir=args.log_dir)
