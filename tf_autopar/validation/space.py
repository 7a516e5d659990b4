"""The host's bounded search space, and the baselines' configurations, for ``validate``.

A configuration (measure/configs.py) is a name plus the thread environment a fresh process
starts with and an optional CPU binding.

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
- The frozen path (inference rows): the model's frozen graph in a session of its own
  (``bench``'s ``frozen:INTERxINTRA``, no tf_autopar in the process) at every inter x intra of
  the space above, once each: a session's pools are these two (OpenMP threads are the
  process's). On a 2-CPU host that is 4 settings. ``live`` is ``enable()`` fed calls until
  live tuning has decided, then timed: what a server settles on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tf_autopar.measure.configs import Config, config_from_plan, thread_config
from tf_autopar.models.bench import FROZEN, FROZEN_ENV, FROZEN_PREFIX, LIVE
from tf_autopar.planning import baselines

SPACE_KINDS = ("auto", "full", "grid", "none")
_GRID_INTER = (1, 2, 3, 4, 6, 8, 12, 16)
_GRID_INTER_MAX = 16
_FULL_UP_TO = 4


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
    frozen: tuple[Config, ...] = ()  # the frozen path's sweep: one session per inter x intra above

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
            "frozen_configs": [c.name for c in self.frozen],
        }


def grid_values(
    logical_cpus: int, physical_cores: int, sockets: int, numa_nodes: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
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
    return SearchSpace(
        kind=kind,
        logical_cpus=L,
        inter_values=inter,
        intra_values=intra,
        openmp=openmp,
        configs=configs,
        omp_values=omp,
        frozen=tuple(frozen_config(i, j) for i, j in dict.fromkeys((c.inter, c.intra) for c in configs)),
    )


def frozen_config(inter: int, intra: int, *, name: str | None = None, cpus: tuple[int, ...] = ()) -> Config:
    """The frozen graph in a session with ``inter`` x ``intra`` pools of its own (named as
    bench's ``frozen:INTERxINTRA``); its own intra-op pool needs TensorFlow's global one
    overridden at start (FROZEN_ENV)."""
    setting = f"{inter}x{intra}"
    return Config(
        name or FROZEN_PREFIX + setting,
        inter,
        intra,
        env=FROZEN_ENV,
        cpus=cpus,
        kind=FROZEN,
        runner_args=("--frozen", setting),
    )


def engine_configs(cpus: int) -> list[Config]:
    """The frozen graph on each other engine installed here (runtime/fastpath/engines/; f32 only),
    as the fast path tries it: ``cpus`` threads in one stream. [] without the ``engines`` extra;
    ``TF_AUTOPAR_ENGINES`` names the ones measured, as it names the ones the fast path tries."""
    from tf_autopar.runtime.fastpath import engines
    from tf_autopar.runtime.fastpath.engines import choice

    names = choice.candidate_engines(engines.registered(), engines.DEFAULT, "f32", (), {}, choice.allowed_names())
    setting = f"1x{max(1, cpus)}"
    return [
        Config(
            name,
            1,
            max(1, cpus),
            env=FROZEN_ENV,
            kind=FROZEN,
            runner_args=("--frozen", setting, "--engine", name),
        )
        for name in names
    ]


def live_config(plan_mode: str) -> Config:
    """``enable(mode=plan_mode)`` before the model loads, fed calls until live tuning has decided
    (the model child's ``--until-tuned``), then timed. Its pools are live tuning's to choose
    (the run records what it served), so inter and intra are 0 here."""
    return Config(LIVE, 0, 0, kind=LIVE, runner_args=("--enable", plan_mode, "--until-tuned"))


def baseline_configs(topology: Any) -> list[Config]:
    """Every baseline of planning/baselines.py (TensorFlow's default, TF's and Intel's recommended
    settings) as a configuration on ``topology``."""
    return [
        config_from_plan(b.name, baselines.baseline_plan(b.name, topology), "baseline") for b in baselines.BASELINES
    ]
