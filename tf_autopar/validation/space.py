"""Configurations to compare and the host's bounded search space.

A configuration is a name plus the thread environment a fresh process starts with
(TF_NUM_INTEROP_THREADS, TF_NUM_INTRAOP_THREADS, and OMP_NUM_THREADS where TensorFlow's
kernels run on OpenMP) and an optional CPU binding. Thread pools are fixed when TF
starts, so every configuration runs in its own process.

Search space (documented bound; the paper swept hundreds of thousands of settings):

- L = logical CPUs in this process's affinity mask (not the quota: under a CPU quota
  TensorFlow's default still sizes its pools for L, and we search the same range).
- L <= 4 ("full"): every inter in 1..L times every intra in 1..L.
- L > 4 ("grid"): inter in {1,2,3,4,6,8,12,16} up to min(L, 16), plus the socket count;
  intra in powers of two up to L, plus the physical cores, the physical cores per socket
  and per NUMA node, and L. On a 2-socket 56-core SMT host that is 8 x 10 = 80 points
  instead of 112 x 112.
- "full" can be forced on any host (``kind="full"``); ``kind="none"`` searches nothing
  (baselines and our plan only).
- OpenMP builds: oneDNN's kernels run on OpenMP teams (one per inter-op thread) and the rest
  on TensorFlow's intra-op pool, two pools measured to matter apart (docs/openmp.md), so the
  OpenMP threads are a third dimension: "full" sweeps inter x intra x OMP in 1..L; "grid"
  sweeps OMP over the intra values above and TF's intra-op over {1, physical cores}.
  KMP_BLOCKTIME and KMP_AFFINITY are left to the build (TensorFlow sets 1 ms itself; neither
  changed a measured row beyond noise).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from tf_autopar.planning.planner import KMP_AFFINITY as KMP_COMPACT  # Intel's recommended compact pinning

# Variables that decide thread counts; scrubbed from the harness's environment before any
# child starts so every configuration starts from the same clean slate.
THREAD_ENV_PREFIXES = ("OMP_", "KMP_", "MKL_", "TF_AUTOPAR_")
THREAD_ENV_NAMES = (
    "TF_NUM_INTEROP_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_OVERRIDE_GLOBAL_THREADPOOL",
)
# tf_autopar's variables that say where things are or how it talks, not how many threads run:
# a child measured for the user reads the user's plan cache and lease root (their calibration,
# their tuned settings), not another one.
NOT_THREAD_VARS = frozenset({"TF_AUTOPAR_CACHE_DIR", "TF_AUTOPAR_LEASE_DIR", "TF_AUTOPAR_LOG", "TF_AUTOPAR_NO_NATIVE",
                             "TF_AUTOPAR_NATIVE_LIB"})
OPENMP_ENV_PREFIXES = ("OMP_", "KMP_", "MKL_")
SPACE_KINDS = ("auto", "full", "grid", "none")
_GRID_INTER = (1, 2, 3, 4, 6, 8, 12, 16)
_GRID_INTER_MAX = 16
_FULL_UP_TO = 4


def is_thread_var(name: str) -> bool:
    """Whether ``name`` decides thread counts or shares (scrubbed from every measured child)."""
    return (name in THREAD_ENV_NAMES or name.startswith(THREAD_ENV_PREFIXES)) and name not in NOT_THREAD_VARS


@dataclass(frozen=True)
class Config:
    """One configuration row: what the child process starts with."""

    name: str
    inter: int  # 0 = let TensorFlow pick
    intra: int  # 0 = let TensorFlow pick
    omp: int | None = None
    env: tuple[tuple[str, str], ...] = ()  # thread variables set in the child (sorted)
    cpus: tuple[int, ...] = ()  # logical CPUs to bind the child to; () = no binding
    kind: str = "search"  # "baseline", "plan" or "search"
    blocktime: int | None = None  # KMP_BLOCKTIME in ms; None = the build's default
    compact: bool = False  # KMP_AFFINITY compact: each OpenMP team's threads pinned to cores, close together

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
        affinity mask is no binding.
        """
        env = {}
        for k, v in self.env:
            if k in ("TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS") and str(v).strip() == "0":
                continue
            if threading_runtime == "eigen" and k.startswith(OPENMP_ENV_PREFIXES):
                continue
            env[k] = str(v)
        cpus = tuple(sorted(self.cpus))
        if cpus and set(cpus) == set(affinity):
            cpus = ()
        return (tuple(sorted(env.items())), cpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "inter": self.inter,
            "intra": self.intra,
            "omp": self.omp,
            "blocktime": self.blocktime,
            "compact": self.compact,
            "env": self.env_dict,
            "cpus": list(self.cpus),
        }


def thread_config(inter: int, intra: int, *, openmp: bool, name: str | None = None, kind: str = "search",
                  omp: int | None = None, blocktime: int | None = None, compact: bool = False) -> Config:
    """A grid point: inter x intra, and on OpenMP builds OMP_NUM_THREADS = MKL_NUM_THREADS = ``omp``
    (default: intra) and, if given, KMP_BLOCKTIME and compact KMP_AFFINITY."""
    if inter < 0 or intra < 0 or (omp is not None and omp < 1) or (blocktime is not None and blocktime < 0):
        raise ValueError(f"thread counts must be >= 0, got inter={inter} intra={intra} omp={omp} "
                         f"blocktime={blocktime}")
    env = {}
    if inter:
        env["TF_NUM_INTEROP_THREADS"] = str(inter)
    if intra:
        env["TF_NUM_INTRAOP_THREADS"] = str(intra)
    if omp is None and openmp and intra:
        omp = intra
    if omp:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(omp)
    if blocktime is not None:
        env["KMP_BLOCKTIME"] = str(blocktime)
    if compact:
        env["KMP_AFFINITY"] = KMP_COMPACT
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
SPEC_HELP = ("INTERxINTRA (e.g. 1x2), or on OpenMP builds INTERxINTRAxOMP with optional :btMS for KMP_BLOCKTIME "
             "and :compact for compact KMP_AFFINITY (e.g. 1x1x2, 1x1x2:bt200, 1x1x2:compact)")


def config_name(inter: int, intra: int, omp: int | None = None, blocktime: int | None = None,
                compact: bool = False) -> str:
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
        raise ValueError(f"{text!r} sets OpenMP threads, KMP_BLOCKTIME or KMP_AFFINITY, but this TensorFlow runs "
                         "oneDNN on its own thread pool (no OpenMP): use INTERxINTRA")
    return thread_config(inter, intra, openmp=openmp, name=name or text.strip().lower(), kind=kind, omp=omp,
                         blocktime=blocktime, compact=compact)


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


@dataclass(frozen=True)
class SearchSpace:
    """The grid searched and how it relates to the host's complete space."""

    kind: str  # "full", "grid" or "none"
    logical_cpus: int
    inter_values: tuple[int, ...]
    intra_values: tuple[int, ...]
    openmp: bool
    configs: tuple[Config, ...] = field(default_factory=tuple)
    omp_values: tuple[int, ...] = ()  # OpenMP builds: the OpenMP threads swept

    @property
    def full_size(self) -> int:
        """Every inter x intra (x OpenMP threads) in 1..L: the exhaustive space."""
        n = self.logical_cpus * self.logical_cpus
        return n * self.logical_cpus if self.openmp else n

    def describe(self) -> str:
        share = len(self.configs) / self.full_size if self.full_size else 0.0
        if self.kind == "none":
            return "no search: baselines and our plan only (the optimum is the best of those)"
        omp = f" x OpenMP {list(self.omp_values)}" if self.omp_values else ""
        return (
            f"{self.kind} search: inter {list(self.inter_values)} x intra {list(self.intra_values)}{omp}: "
            f"{len(self.configs)} of {self.full_size} configurations ({share:.1%}) for L={self.logical_cpus} logical CPUs"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "logical_cpus": self.logical_cpus,
            "inter_values": list(self.inter_values),
            "intra_values": list(self.intra_values),
            "openmp": self.openmp,
            "omp_values": list(self.omp_values),
            "searched": len(self.configs),
            "full_size": self.full_size,
            "description": self.describe(),
            "configs": [c.name for c in self.configs],
        }


def grid_values(logical_cpus: int, physical_cores: int, sockets: int, numa_nodes: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The bounded (inter, intra) value lists for a host with more than 4 logical CPUs."""
    L = logical_cpus
    inter = {v for v in _GRID_INTER if v <= min(L, _GRID_INTER_MAX)} | {max(1, sockets)}
    intra = {1 << k for k in range(L.bit_length()) if (1 << k) <= L}
    intra |= {physical_cores, L}
    if sockets > 1:
        intra.add(physical_cores // sockets)
    if numa_nodes > 1:
        intra.add(physical_cores // numa_nodes)
    intra = {v for v in intra if 1 <= v <= L}
    return tuple(sorted(inter)), tuple(sorted(intra))


def search_space(topology: Any, kind: str = "auto") -> SearchSpace:
    """The configurations to sweep on ``topology`` (see the module docstring for the bound)."""
    if kind not in SPACE_KINDS:
        raise ValueError(f"unknown search space {kind!r}; choose from {', '.join(SPACE_KINDS)}")
    L = max(1, int(topology.logical_cpus))
    openmp = getattr(topology, "threading_runtime", "unknown") == "openmp"
    if kind == "auto":
        kind = "full" if L <= _FULL_UP_TO else "grid"
    if kind == "none":
        inter, intra = (), ()
    elif kind == "full":
        inter = intra = tuple(range(1, L + 1))
    else:
        inter, intra = grid_values(
            L, max(1, topology.physical_cores), max(1, len(topology.sockets)), max(1, len(topology.numa_nodes))
        )
    omp: tuple[int, ...] = ()
    if openmp and kind != "none":
        omp = intra
        if kind == "grid":
            intra = tuple(sorted({1, max(1, min(L, topology.physical_cores))}))
        configs = tuple(thread_config(i, j, openmp=True, omp=o) for i in inter for j in intra for o in omp)
    else:
        configs = tuple(thread_config(i, j, openmp=openmp) for i in inter for j in intra)
    return SearchSpace(kind=kind, logical_cpus=L, inter_values=inter, intra_values=intra, openmp=openmp,
                       configs=configs, omp_values=omp)


def baseline_configs(topology: Any) -> list[Config]:
    """TensorFlow's default, TF's and Intel's recommended settings, from the planner's baselines."""
    from tf_autopar.planning import baseline_plan

    return [config_from_plan(name, baseline_plan(name, topology), "baseline") for name in BASELINES]


BASELINES = ("tf-default", "tf-recommended", "intel-recommended")
