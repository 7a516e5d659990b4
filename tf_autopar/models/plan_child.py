"""Compute tf_autopar's plan for one row (a bundled workload or a model file, and a row mode), in
a child process under measure/child.py's protocol; ``plan_args`` is the parents' side
(``validate``'s harness and ``tune --mode training``).

Why a child: the graph analysis needs TensorFlow and the harness never imports it (a
harness with TF loaded would itself compete for the CPUs it measures). Under
``--cpu-quota`` this child runs inside a quota group like the measured runs, so
``detect_topology()`` sees the quota the way a containerised user's process would. If the
detector does not report the group's quota (e.g. a cgroup namespace hides the path), the
known quota is injected into the Topology with ``dataclasses.replace`` and the output says
so (``quota_source``: "detected", "injected" or "none").

The graph is built at the row's batch: each heavy op's work, which decides the intra-op
threads for small ops, grows with it. WORKLOAD may also be a user's model file (SavedModel
directory or .keras file): it is loaded with tf_autopar.models and analysed at the row's
batch and at the shapes its measured runs use (--input-shape, --inputs, --signature).

Child: ``plan([WORKLOAD, ROW_MODE, SIZE, "--batch", B, "--quota", CPUS, model flags ...])``.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from tf_autopar._model_path import looks_like_model
from tf_autopar._numbers import add_batch_flag
from tf_autopar.graph import analyze
from tf_autopar.measure.cgroup import MIN_QUOTA_US, PERIOD_US, CgroupUnavailable, find_cpu_controller
from tf_autopar.measure.child import command
from tf_autopar.models.load import prepare_model
from tf_autopar.models.options import ModelOptions, add_model_flags, from_args
from tf_autopar.planning import plan as make_plan
from tf_autopar.planning.modes import LATENCY, TRAINING
from tf_autopar.runtime.plans import calibration_for
from tf_autopar.topology import cpu_budget, detect_topology
from tf_autopar.topology.model import CpuQuota, Topology

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile

# Row modes -> (workloads runner mode, planner mode). Inference rows are one request at a
# time in one process, so both inference rows are planned for latency.
ROW_MODES = {"infer1": ("infer", LATENCY), "infer": ("infer", LATENCY), "train": ("train", TRAINING)}
PLAN = f"{__name__}:plan"
PLAN_CHILD = tuple(command(PLAN))  # the command prefix, for the parents


def plan_args(
    workload: str, row_mode: str, size: str, batch: int, model: ModelOptions | None = None, quota: float | None = None
) -> list[str]:
    """The arguments of the child that plans this row (``model``: a model file's input flags)."""
    args = [workload, row_mode, size, "--batch", str(batch)]
    if model is not None:
        args += model.plan_args()
    if quota is not None:
        args += ["--quota", repr(quota)]
    return args


def _with_quota(topology: Topology, cpus: float) -> Topology:
    try:
        version = find_cpu_controller().version
    except CgroupUnavailable:
        version = 1
    quota_us = max(MIN_QUOTA_US, int(round(cpus * PERIOD_US)))
    quota = CpuQuota(
        cpus=quota_us / PERIOD_US,
        quota_us=quota_us,
        period_us=PERIOD_US,
        cgroup_version=version,
        path="injected by tf-autopar validate",
    )
    return dataclasses.replace(topology, quota=quota, cpu_budget=cpu_budget(len(topology.affinity), quota))


def _profile(
    workload: str, runner_mode: str, size: str, batch: int | None, model_options: Any
) -> tuple[GraphProfile, dict]:
    """The row's GraphProfile, and what the report should know about a model file's inputs."""
    if looks_like_model(workload):
        prepared = prepare_model(workload, batch or 1, model_options)
        profile, note = prepared.profile()
        return profile, {**prepared.describe(), "profile_note": note}
    from tf_autopar_workloads import runner  # imports numpy: the parents import this module (ROW_MODES, plan_args)

    return analyze(runner.graph_def(workload, runner_mode, size, batch=batch)), {}


def compute(
    workload: str, row_mode: str, size: str, quota: float | None, batch: int | None = None, model_options: Any = None
) -> dict:
    if row_mode not in ROW_MODES:
        raise ValueError(f"unknown row mode {row_mode!r}; choose from {', '.join(ROW_MODES)}")
    runner_mode, plan_mode = ROW_MODES[row_mode]
    topology = detect_topology()
    quota_source = "none"
    if quota is not None:
        detected = topology.quota
        if detected is not None and abs(detected.cpus - quota) < 0.01:
            quota_source = "detected"
        else:
            topology = _with_quota(topology, quota)
            quota_source = "injected"
    elif topology.quota is not None:
        quota_source = "detected"
    if batch is None and row_mode == "infer1":
        batch = 1
    profile, model_info = _profile(workload, runner_mode, size, batch, model_options)
    # env={}: the plan under test must not inherit thread settings from the harness's shell.
    the_plan = make_plan(topology, profile, plan_mode, env={}, calibration=calibration_for(topology))
    return {
        "workload": workload,
        "row_mode": row_mode,
        "plan_mode": plan_mode,
        "plan": the_plan.to_dict(),
        "env": the_plan.to_env(),
        "explain": the_plan.explain(),
        "profile": profile.to_dict(),
        "topology": topology.to_dict(),
        "quota_source": quota_source,
        **({"model_info": model_info} if model_info else {}),
    }


def plan(argv: list[str]) -> dict:
    """The child function (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=PLAN)
    parser.add_argument("workload")
    parser.add_argument("row_mode", choices=sorted(ROW_MODES))
    parser.add_argument("size")
    parser.add_argument("--quota", type=float, default=None)
    add_batch_flag(parser, default=None, help="default: 1 for infer1, else the published batch")
    add_model_flags(parser)  # a model file's rows only
    args = parser.parse_args(argv)
    return compute(args.workload, args.row_mode, args.size, args.quota, args.batch, from_args(args))
