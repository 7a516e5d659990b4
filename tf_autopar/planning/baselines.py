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

from typing import Mapping

from tf_autopar.planning.plan import Setting, ThreadPlan
from tf_autopar.planning.planner import KMP_AFFINITY, KMP_BLOCKTIME, MODES
from tf_autopar.planning.user_settings import read_user_settings
from tf_autopar.topology.model import Topology

BASELINES = ("tf-default", "tf-recommended", "intel-recommended")


def baseline_plan(name: str, topology: Topology, env: Mapping[str, str] | None = None, mode: str = "latency") -> ThreadPlan:
    """The baseline ``name`` (one of BASELINES) on ``topology``; ``mode`` only labels the plan."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(BASELINES)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
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

    if name == "tf-default":
        why = (
            f"0 = TensorFlow picks: {logical} threads (every CPU of the affinity mask, "
            "hyperthreads counted, cgroup quota ignored)"
        )
        settings = {"inter_op": Setting(0, "baseline", why), "intra_op": Setting(0, "baseline", why)}
        return ThreadPlan(name=name, mode=mode, inter_op=0, intra_op=0, settings=settings, facts=tuple(facts),
                          runtime=runtime, usable_cpus=logical)

    inter_why = f"{sockets} socket(s): one inter-op thread per socket"
    intra_why = f"{physical} physical cores in the affinity mask"
    settings = {"inter_op": Setting(sockets, "baseline", inter_why), "intra_op": Setting(physical, "baseline", intra_why)}
    if name == "tf-recommended":
        return ThreadPlan(name=name, mode=mode, inter_op=sockets, intra_op=physical, settings=settings,
                          facts=tuple(facts), runtime=runtime, usable_cpus=physical)

    omp_why = "OMP_NUM_THREADS = MKL_NUM_THREADS = physical cores"
    if runtime != "openmp":
        omp_why += "; OpenMP variables only matter for OpenMP builds, this one is not (they change nothing)"
    settings.update(
        omp_threads=Setting(physical, "baseline", omp_why),
        kmp_blocktime=Setting(KMP_BLOCKTIME, "baseline", "Intel: 0 or 1 ms (OpenMP's default is 200 ms)"),
        kmp_affinity=Setting(KMP_AFFINITY, "baseline", "Intel: compact affinity, fine granularity"),
    )
    return ThreadPlan(name=name, mode=mode, inter_op=sockets, intra_op=physical, omp_threads=physical,
                      kmp_blocktime=KMP_BLOCKTIME, kmp_affinity=KMP_AFFINITY, settings=settings,
                      facts=tuple(facts), runtime=runtime, usable_cpus=physical)
