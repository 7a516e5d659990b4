"""Measured refinement: the plan's neighbourhood measured on this host, the winner remembered.

``tune(model, mode="latency"|"training", batch=None, budget_s=120)`` (tuner.py) runs the search (search.py,
pure) over fresh processes and stores the winner in the plan cache, where the planner takes it
as a measured fact (``planning.plan(..., tuned=...)``). Importing this package does not import
TensorFlow.
"""
from __future__ import annotations

from typing import Any

__all__ = ["tune"]


def tune(model: Any, *, mode: str = "latency", batch: int | None = None, budget_s: float = 120.0, **kwargs: Any) -> Any:
    """See tuning/tuner.py: measure ``model`` (a SavedModel directory, .keras file or workload name)."""
    from tf_autopar.tuning.tuner import tune as _tune

    return _tune(model, mode=mode, batch=batch, budget_s=budget_s, **kwargs)
