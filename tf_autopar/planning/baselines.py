"""The settings a user would otherwise use, as ThreadPlans, so they can be compared.

Baselines describe the published recommendation as written: they ignore cgroup quotas
(they predate containers) and the user's environment ("physical cores" = every physical
core with a CPU in the affinity mask). Variables found in ``env`` are only mentioned,
because in practice they would override the baseline.

- tf-default: inter = intra = 0, so TensorFlow picks the number of CPUs in the
  affinity mask for each pool (hyperthreads counted, quota ignored).
- tf-recommended (TensorFlow's old performance guide): inter = sockets, intra = physical cores.
- intel-recommended (TF "Tuning MKL" docs, Intel model zoo): intra = OMP_NUM_THREADS =
  physical cores, inter = sockets, KMP_BLOCKTIME=1, KMP_AFFINITY=granularity=fine,compact,1,0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from tf_autopar.planning.modes import MODES, check_mode
from tf_autopar.planning.plan import Setting, ThreadPlan
from tf_autopar.planning.planner import KMP_AFFINITY, KMP_BLOCKTIME
from tf_autopar.planning.user_settings import read_user_settings
from tf_autopar.topology.model import Topology


@dataclass(frozen=True)
class Baseline:
    """One published setting, as every reader needs it: validation's rows, its table and chart,
    and the benchmark tables read these records, so a baseline is added here and only here."""

    name: str  # the configuration's name in documents ("tf-default")
    label: str  # short column label: the table's "vs LABEL", the chart's "over LABEL"
    colour: str  # its bars in the validation chart
    settings: Callable[["_Host"], "tuple[dict[str, Setting], dict]"]  # the plan's settings on a host


@dataclass(frozen=True)
class _Host:
    """What the published recommendations read from the host (``baseline_plan`` computes it)."""

    logical: int
    physical: int
    sockets: int
    runtime: str


def _tf_default(h: _Host) -> tuple[dict[str, Setting], dict]:
    why = (
        f"0 = TensorFlow picks: {h.logical} threads (every CPU of the affinity mask, "
        "hyperthreads counted, cgroup quota ignored)"
    )
    return (
        {"inter_op": Setting(0, "baseline", why), "intra_op": Setting(0, "baseline", why)},
        {"inter_op": 0, "intra_op": 0, "usable_cpus": h.logical},
    )


def _sockets_by_cores(h: _Host) -> dict[str, Setting]:
    return {
        "inter_op": Setting(h.sockets, "baseline", f"{h.sockets} socket(s): one inter-op thread per socket"),
        "intra_op": Setting(h.physical, "baseline", f"{h.physical} physical cores in the affinity mask"),
    }


def _tf_recommended(h: _Host) -> tuple[dict[str, Setting], dict]:
    return _sockets_by_cores(h), {"inter_op": h.sockets, "intra_op": h.physical, "usable_cpus": h.physical}


def _intel_recommended(h: _Host) -> tuple[dict[str, Setting], dict]:
    omp_why = "OMP_NUM_THREADS = MKL_NUM_THREADS = physical cores"
    if h.runtime != "openmp":
        omp_why += "; OpenMP variables only matter for OpenMP builds, this one is not (they change nothing)"
    settings = _sockets_by_cores(h)
    settings.update(
        omp_threads=Setting(h.physical, "baseline", omp_why),
        kmp_blocktime=Setting(KMP_BLOCKTIME, "baseline", "Intel: 0 or 1 ms (OpenMP's default is 200 ms)"),
        kmp_affinity=Setting(KMP_AFFINITY, "baseline", "Intel: compact affinity, fine granularity"),
    )
    return settings, {
        "inter_op": h.sockets,
        "intra_op": h.physical,
        "omp_threads": h.physical,
        "kmp_blocktime": KMP_BLOCKTIME,
        "kmp_affinity": KMP_AFFINITY,
        "usable_cpus": h.physical,
    }


# The order is the report's column order.
BASELINES: tuple[Baseline, ...] = (
    Baseline("tf-default", "default", "#4c72b0", _tf_default),
    Baseline("tf-recommended", "tf-rec", "#55a868", _tf_recommended),
    Baseline("intel-recommended", "intel", "#c44e52", _intel_recommended),
)


def names() -> tuple[str, ...]:
    """The baselines' names, in the report's order (read at call time: tests may add one)."""
    return tuple(b.name for b in BASELINES)


def get(name: str) -> Baseline:
    """The record of baseline ``name``; ValueError naming the choices."""
    for b in BASELINES:
        if b.name == name:
            return b
    raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(names())}")


def baseline_plan(
    name: str, topology: Topology, env: Mapping[str, str] | None = None, mode: str = "latency"
) -> ThreadPlan:
    """The baseline ``name`` (one of BASELINES) on ``topology``; ``mode`` only labels the plan."""
    baseline = get(name)
    check_mode(mode, MODES)
    cores = topology.planning_cores()
    physical = len(cores)
    sockets = max(1, len({c.socket for c in cores}))
    logical = len(topology.affinity) or sum(len(c.cpus) for c in cores)
    runtime = "openmp" if topology.threading_runtime == "openmp" else "eigen"
    facts = [
        f"affinity: {logical} logical CPUs on {physical} physical cores, {sockets} socket(s)",
    ]
    if topology.quota is not None:
        facts.append(
            f"cgroup quota {topology.quota.cpus:g} CPUs (budget {topology.cpu_budget}) is ignored by this baseline: "
            "expect throttling"
        )
    user = read_user_settings(env)
    if user.raw:
        found = ", ".join(f"{k}={v}" for k, v in user.raw.items())
        facts.append(f"note: your environment sets {found}, which would override this baseline in practice")
    settings, fields = baseline.settings(_Host(logical, physical, sockets, runtime))
    return ThreadPlan(name=name, mode=mode, settings=settings, facts=tuple(facts), runtime=runtime, **fields)
