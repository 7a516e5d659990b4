"""Measured refinement: the plan's neighbourhood measured on this host, the winner remembered.

``tune(model, mode=..., batch=None, budget_s=120)``: for a SavedModel or .keras file in an
inference mode, in one process on the path a server runs (inprocess.py: the fast path's frozen
session tuned live on synthesised calls; the next enable() start serves the winner); with
``process_pools=True``, for training or a bundled workload, the fresh-process search of the
process pools (tuner.py; search.py, pure), whose winner the planner takes as a measured fact
(``planning.plan(..., tuned=...)``). Importing this package does not import TensorFlow.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tune"]


def tune(
    model: Any,
    *,
    mode: str = "latency",
    batch: int | None = None,
    budget_s: float = 120.0,
    process_pools: bool = False,
    **kwargs: Any,
) -> Any:
    """See tuning/inprocess.py (a model file in an inference mode) and tuning/tuner.py
    (``process_pools=True``, training, bundled workloads)."""
    from tf_autopar._model_path import looks_like_model

    if not process_pools and mode != "training" and isinstance(model, str) and looks_like_model(model):
        from tf_autopar.tuning.inprocess import tune as _in_process

        return _in_process(model, mode=mode, batch=batch, budget_s=budget_s, **kwargs)
    from tf_autopar.tuning.tuner import tune as _tune

    return _tune(model, mode=mode, batch=batch, budget_s=budget_s, **kwargs)
