"""Measured refinement: the plan's neighbourhood measured on this host, the winner remembered.

``tune(model, mode=..., batch=None, budget_s=120)``: for a SavedModel or .keras file in an
inference mode, in one process on the path a server runs (inprocess.py: the fast path's frozen
session tuned live on synthesised calls; the next enable() start serves the winner); with
``process_pools=True``, for training or a bundled workload, the fresh-process search of the
process pools (tuner.py; search.py, pure), whose winner the planner takes as a measured fact
(``planning.plan(..., tuned=...)``). ``tune`` is the one entry point (``tf-autopar tune`` calls
it); ``check_arguments`` (arguments.py) is the one check of a tune's arguments, made here and by
both tuners.
Importing this package does not import TensorFlow.
"""

from __future__ import annotations

from typing import Any

from tf_autopar.planning.modes import LATENCY
from tf_autopar.tuning.arguments import (
    DEFAULT_BUDGET_S,
    IN_PROCESS_MODES,
    MAX_BUDGET_S,
    MIN_BUDGET_S,
    PROCESS_POOL_MODES,
    check_arguments,
    check_batch,
    check_budget,
    in_one_process,
)

__all__ = [
    "DEFAULT_BUDGET_S",
    "IN_PROCESS_MODES",
    "MAX_BUDGET_S",
    "MIN_BUDGET_S",
    "PROCESS_POOL_MODES",
    "check_arguments",
    "check_batch",
    "check_budget",
    "in_one_process",
    "tune",
]


def tune(
    model: Any,
    *,
    mode: str = LATENCY,
    batch: int | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    process_pools: bool = False,
    requests: int | None = None,
    size: str | None = None,
    **kwargs: Any,
) -> Any:
    """Tune ``model`` the way it can be: see tuning/inprocess.py (a model file in an inference mode)
    and tuning/tuner.py (``process_pools=True``, training, bundled workloads). ``requests`` and
    ``size`` are the fresh-process search's (timed requests per run, a bundled workload's size):
    not used in one process. ``kwargs`` go to the tuner chosen (model_options, store, progress, ...).
    ValueError (check_arguments) before anything starts."""
    one_process = in_one_process(model, mode, process_pools)
    check_arguments(mode, budget_s, batch, process_pools=not one_process)
    # The tuners are imported when called: importing the package stays cheap (tf_autopar.tune, the
    # in-process tuner's child).
    if one_process:
        from tf_autopar.tuning.inprocess import tune as _in_process

        return _in_process(model, mode=mode, batch=batch, budget_s=budget_s, **kwargs)
    from tf_autopar.tuning.tuner import tune as _tune

    given = {k: v for k, v in (("requests", requests), ("size", size)) if v is not None}
    return _tune(model, mode=mode, batch=batch, budget_s=budget_s, **given, **kwargs)
