"""What a bundled workload is: a model builder, a synthetic data maker and a loss.

Model modules only supply these pieces (``WORKLOAD = Workload(...)``); running them
(tf.function, TF1 Session, graph export, training) is generic and lives in
``tf_autopar_workloads/runner.py`` so every workload is run the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

SIZES = ("tiny", "paper")
MODES = ("infer", "train")


@dataclass(frozen=True)
class Workload:
    name: str
    family: str  # "fathom" or "paper"
    task: str  # "vision", "recommendation", "translation", "speech", "qa", "generative", "rl"
    description: str
    default_batch: int  # the published batch size
    sizes: Mapping[str, Mapping[str, Any]]  # {"paper": hyperparameters, "tiny": the same structure shrunk}
    # hyperparameters -> a fresh, uncompiled Keras 3 model (deterministic given keras.utils.set_random_seed)
    build_model: Callable[[Mapping[str, Any]], Any]
    # (hyperparameters, batch, numpy Generator) -> (inputs, targets): synthetic, with learnable structure
    make_data: Callable[[Mapping[str, Any], int, Any], tuple[Any, Any]]
    # (y_true, y_pred) -> scalar loss tensor
    loss: Callable[[Any, Any], Any]
    departures: str = ""  # where this departs from the original model or data
    references: tuple[str, ...] = field(default_factory=tuple)
    # Adam step size used by the runner's training step (both paths); a size's
    # hyperparameters may override it with an "lr" entry.
    learning_rate: float = 1e-3

    def hyperparameters(self, size: str) -> Mapping[str, Any]:
        if size not in self.sizes:
            raise ValueError(f"workload {self.name!r} has no size {size!r}; choose from {sorted(self.sizes)}")
        return self.sizes[size]

    def lr(self, size: str) -> float:
        """The training step size for ``size`` ("lr" in its hyperparameters, else learning_rate)."""
        return float(self.hyperparameters(size).get("lr", self.learning_rate))
