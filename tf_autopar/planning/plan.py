"""The thread plan: numbers to apply, and the reasons behind each.

Methods that render the plan (explain, env, JSON, TF Serving flags, Python snippet)
live here; computing it is planner.py's job.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One value of the plan and where it came from."""

    value: Any
    source: str  # "planned", "user" (kept from the user's environment/config), "baseline"
    reason: str = ""


@dataclass(frozen=True)
class ThreadPlan:
    name: str  # "tf_autopar", "tf-default", "tf-recommended", "intel-recommended"
    mode: str  # "latency", "throughput", "training"
    inter_op: int  # per instance; 0 means "let TensorFlow pick"
    intra_op: int  # per instance; 0 means "let TensorFlow pick"
    omp_threads: int | None = None  # OMP_NUM_THREADS/MKL_NUM_THREADS; None when the runtime is not OpenMP
    kmp_blocktime: int | None = None
    kmp_affinity: str | None = None
    instances: int = 1  # processes or streams, each with inter_op x intra_op
    cpus: tuple[tuple[int, ...], ...] = ()  # logical CPUs to bind each instance to; () = no binding
    tf_data_threads: int | None = None  # tf.data private pool size; None = TF default
    settings: dict[str, Setting] = field(default_factory=dict)  # per knob: value, source, reason
    user_settings: dict[str, str] = field(default_factory=dict)  # explicit variables found and kept
    facts: tuple[str, ...] = ()  # the topology/profile facts the plan used, for explain()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
