"""`tf-autopar run [--mode M] [--instances N] [--cores LIST] [--dry-run] [--json] -- COMMAND ...`"""
from __future__ import annotations

import argparse
import json
import os
import sys

from tf_autopar.cli.plan_cmd import add_shape_arguments, load_profile, measured_for, shape_options


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a program (or N pinned instances) with planned thread settings",
        description="Plan threads for this host and start COMMAND with them applied: TF_NUM_* "
        "variables (OpenMP variables only for OpenMP builds), each instance bound to its own "
        "CPUs. Variables you set are never overridden; signals are forwarded; the exit code is "
        "the first failing child's.",
    )
    p.add_argument("--mode", choices=("latency", "throughput", "training"), default="latency")
    p.add_argument("--instances", type=int, default=None, help="copies of COMMAND, each on disjoint CPUs")
    p.add_argument("--cores", default=None, help="CPU list to use, e.g. 0-3,8 (default: this process's affinity)")
    p.add_argument("--model", metavar="PATH_OR_WORKLOAD", default=None,
                   help="plan from this model (SavedModel directory, .keras file, graph file or bundled workload); "
                        "an enable() inside COMMAND plans the same")
    add_shape_arguments(p)
    p.add_argument("--dry-run", action="store_true", help="print the plan and commands, start nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    from tf_autopar.runtime import launcher
    from tf_autopar.topology import detect_topology, parse_cpulist

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ValueError("no command given: use `tf-autopar run [options] -- COMMAND ...`")
    if args.instances is not None and args.instances < 1:
        raise ValueError(f"--instances must be at least 1, got {args.instances}")
    topology = detect_topology()
    if args.cores:
        topology = launcher.restrict_to_cores(topology, parse_cpulist(args.cores))
    options = shape_options(args, args.mode)
    profile = load_profile(args.model, args.mode, **options) if args.model else None
    tuned, calibration = measured_for(profile, args.mode, topology, options["batch"])
    launch = launcher.launch_specs(
        topology, command, mode=args.mode, instances=args.instances, environ=os.environ,
        numactl=launcher.find_numactl(), profile=profile, tuned=tuned, calibration=calibration,
    )
    if args.dry_run:
        if args.json:
            print(json.dumps(launch.to_dict(), indent=2, default=str))
        else:
            print(launch.explain)
            for spec in launch.instances:
                env = " ".join(f"{k}={v}" for k, v in sorted(spec.env_set.items()))
                cpus = ",".join(map(str, spec.cpus)) or "all"
                kept = f" (kept yours: {', '.join(sorted(spec.env_kept))})" if spec.env_kept else ""
                print(f"instance {spec.index}: cpus {cpus} [{spec.binding}] {env}{kept} -- {' '.join(spec.argv)}")
        return 0
    sys.stdout.flush()
    return launcher.run(launch)
