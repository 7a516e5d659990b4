"""What a characterization measures and what comes out of it: plain records that the runner
fills and the report reads (neither imports the other for them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tf_autopar.characterization.analysis import Run

MODES = ("infer", "train")
SIZES = ("tiny", "paper")


@dataclass(frozen=True)
class Settings:
    """What to measure. ``threads``: intra-op counts swept with one inter-op thread; ``inter``:
    inter-op pool sizes compared at the largest intra-op count."""

    workloads: tuple[str, ...]
    threads: tuple[int, ...]
    size: str = "tiny"
    modes: tuple[str, ...] = MODES
    inter: tuple[int, ...] = (1, 2)
    steps: int = 10
    warmup: int = 2
    rounds: int = 1
    batch: int | None = None
    timeout_s: float = 600.0
    classes: tuple[str, ...] = ()  # op classes to show in the per-class scaling (default: the big ones)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class Result:
    settings: Settings
    runs: list[Run]
    analyses: dict[str, Any]
    host: dict[str, Any]
    wall_s: float
    files: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[Run]:
        return [r for r in self.runs if not r.ok]
