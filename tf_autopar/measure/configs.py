"""A configuration to measure: the thread environment (and CPU binding) a fresh process starts with,
and the grammar users write one in: ``INTERxINTRA[xOMP][:btMS][:compact]``.

Thread pools are fixed when TensorFlow starts, so every configuration runs in its own process
(runner.py). The variables' names come from planning/variables.py; ``is_thread_var`` says which
of the parent's variables are scrubbed before any child starts, so every configuration starts
from the same clean slate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import tf_autopar.planning.variables as V
from tf_autopar.planning.planner import KMP_AFFINITY as KMP_COMPACT  # Intel's recommended compact pinning

# tf_autopar's variables that say where things are or how it talks, not how many threads run:
# a child measured for the user reads the user's plan cache and lease root (their calibration,
# their tuned settings), not another one.
NOT_THREAD_VARS = frozenset(
    {
        "TF_AUTOPAR_CACHE_DIR",
        "TF_AUTOPAR_LEASE_DIR",
        "TF_AUTOPAR_LOG",
        "TF_AUTOPAR_NO_NATIVE",
        "TF_AUTOPAR_NATIVE_LIB",
        # which engines the fast path may use, and at what precision: the user's choice, kept
        "TF_AUTOPAR_ENGINES",
        "TF_AUTOPAR_PRECISION",
    }
)


def is_thread_var(name: str) -> bool:
    """Whether ``name`` decides thread counts or shares (scrubbed from every measured child)."""
    return (V.is_thread_setting(name) or name.startswith(V.TF_AUTOPAR_PREFIX)) and name not in NOT_THREAD_VARS


@dataclass(frozen=True)
class Config:
    """One configuration row: what the child process starts with."""

    name: str
    inter: int  # 0 = let TensorFlow pick
    intra: int  # 0 = let TensorFlow pick
    omp: int | None = None
    env: tuple[tuple[str, str], ...] = ()  # thread variables set in the child (sorted)
    cpus: tuple[int, ...] = ()  # logical CPUs to bind the child to; () = no binding
    kind: str = "search"  # "baseline", "plan", "tuned", "search"; validate's frozen path: "frozen", "live"
    blocktime: int | None = None  # KMP_BLOCKTIME in ms; None = the build's default
    compact: bool = False  # KMP_AFFINITY compact: each OpenMP team's threads pinned to cores, close together
    # What the runner is told besides the environment (validate's frozen path: ``--frozen 1x2``,
    # live tuning: ``--enable latency --until-tuned``): part of what makes two processes the same.
    runner_args: tuple[str, ...] = ()

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def effective_threads(self, logical_cpus: int) -> tuple[int, int]:
        """(inter, intra) as TF will size them: 0 means every CPU in the affinity mask."""
        width = len(self.cpus) if self.cpus else logical_cpus
        return (self.inter or width, self.intra or width)

    def effect_key(self, threading_runtime: str, affinity: tuple[int, ...]) -> tuple:
        """Two configurations with the same key start identical processes: run them once.

        With stock TF ("eigen": no OpenMP linked) OMP_*/KMP_*/MKL_* change nothing (its
        oneDNN runs on TensorFlow's own pool), TF_NUM_*=0 means unset, and binding to the whole
        affinity mask is no binding. The runner's arguments count: two frozen sessions differ
        only in them.
        """
        env = {}
        for k, v in self.env:
            if k in V.POOLS and str(v).strip() == "0":
                continue
            if threading_runtime == "eigen" and k.startswith(V.OPENMP_PREFIXES):
                continue
            env[k] = str(v)
        cpus = tuple(sorted(self.cpus))
        if cpus and set(cpus) == set(affinity):
            cpus = ()
        return (tuple(sorted(env.items())), cpus, self.runner_args)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "inter": self.inter,
            "intra": self.intra,
            "omp": self.omp,
            "blocktime": self.blocktime,
            "compact": self.compact,
            "env": self.env_dict,
            "cpus": list(self.cpus),
        }
        return {**out, "runner_args": list(self.runner_args)} if self.runner_args else out


def thread_config(
    inter: int,
    intra: int,
    *,
    openmp: bool,
    name: str | None = None,
    kind: str = "search",
    omp: int | None = None,
    blocktime: int | None = None,
    compact: bool = False,
) -> Config:
    """A grid point: inter x intra, and on OpenMP builds OMP_NUM_THREADS = MKL_NUM_THREADS = ``omp``
    (default: intra) and, if given, KMP_BLOCKTIME and compact KMP_AFFINITY."""
    if inter < 0 or intra < 0 or (omp is not None and omp < 1) or (blocktime is not None and blocktime < 0):
        raise ValueError(f"thread counts must be >= 0, got inter={inter} intra={intra} omp={omp} blocktime={blocktime}")
    env = {}
    if inter:
        env[V.INTEROP] = str(inter)
    if intra:
        env[V.INTRAOP] = str(intra)
    if omp is None and openmp and intra:
        omp = intra
    if omp:
        env[V.OMP_THREADS] = env[V.MKL_THREADS] = str(omp)
    if blocktime is not None:
        env[V.KMP_BLOCKTIME] = str(blocktime)
    if compact:
        env[V.KMP_AFFINITY] = KMP_COMPACT
    return Config(
        name=name or config_name(inter, intra, omp if omp != intra else None, blocktime, compact),
        inter=inter,
        intra=intra,
        omp=omp,
        env=tuple(sorted(env.items())),
        kind=kind,
        blocktime=blocktime,
        compact=compact,
    )


_SPEC = re.compile(r"([0-9]+)x([0-9]+)(?:x([0-9]+))?(?::bt([0-9]+))?(:compact)?")
SPEC_HELP = (
    "INTERxINTRA (e.g. 1x2), or on OpenMP builds INTERxINTRAxOMP with optional :btMS for KMP_BLOCKTIME "
    "and :compact for compact KMP_AFFINITY (e.g. 1x1x2, 1x1x2:bt200, 1x1x2:compact)"
)


def config_name(
    inter: int, intra: int, omp: int | None = None, blocktime: int | None = None, compact: bool = False
) -> str:
    """The spec ``parse_config`` reads back: 2x1, 1x1x2, 1x1x2:bt1, 1x1x2:compact."""
    name = f"{inter}x{intra}"
    if omp is not None:
        name += f"x{omp}"
    if blocktime is not None:
        name += f":bt{blocktime}"
    if compact:
        name += ":compact"
    return name


def parse_config(text: str, *, openmp: bool, kind: str = "search", name: str | None = None) -> Config:
    """'1x2', '1x1x2' or '1x1x2:bt1' -> its Config; ValueError naming the problem otherwise.

    The OpenMP parts are refused on builds without OpenMP, where they would change nothing
    and the comparison would look like a finding.
    """
    m = _SPEC.fullmatch(text.strip().lower())
    if m is None or any(g is not None and int(g) < 1 for g in m.groups()[:3]):
        raise ValueError(f"unknown thread setting {text!r}: use {SPEC_HELP}, with positive integers")
    inter, intra = int(m.group(1)), int(m.group(2))
    omp = int(m.group(3)) if m.group(3) else None
    blocktime = int(m.group(4)) if m.group(4) else None
    compact = bool(m.group(5))
    if (omp is not None or blocktime is not None or compact) and not openmp:
        raise ValueError(
            f"{text!r} sets OpenMP threads, KMP_BLOCKTIME or KMP_AFFINITY, but this TensorFlow runs "
            "oneDNN on its own thread pool (no OpenMP): use INTERxINTRA"
        )
    return thread_config(
        inter,
        intra,
        openmp=openmp,
        name=name or text.strip().lower(),
        kind=kind,
        omp=omp,
        blocktime=blocktime,
        compact=compact,
    )


def config_from_plan(name: str, plan: Any, kind: str) -> Config:
    """A Config from a ThreadPlan, or from plan_child's {"plan": to_dict(), "env": to_env()}.

    The plan's own ``to_env()`` decides the variables; binding uses the first instance's
    CPUs (validation runs one instance: latency and training plans have one).
    """
    if isinstance(plan, Mapping):  # plan_child's output: {"plan": ThreadPlan.to_dict(), "env": to_env()}
        fields = plan.get("plan", plan)
        env = dict(plan.get("env") or {})
    else:
        fields = plan.to_dict()
        env = dict(plan.to_env())
    cpus_per_instance = fields.get("cpus") or ()
    cpus = tuple(int(c) for c in cpus_per_instance[0]) if cpus_per_instance else ()
    return Config(
        name=name,
        inter=int(fields.get("inter_op") or 0),
        intra=int(fields.get("intra_op") or 0),
        omp=fields.get("omp_threads"),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
        cpus=cpus,
        kind=kind,
    )
