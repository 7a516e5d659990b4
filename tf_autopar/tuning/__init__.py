"""Measured refinement: the plan's neighbourhood measured on this host, the winner remembered.

``tune(model, mode=..., batch=None, budget_s=120)``: for a SavedModel or .keras file in an
inference mode, in one process on the path a server runs (inprocess.py: the fast path's frozen
session tuned live on synthesised calls; the next enable() start serves the winner); with
``process_pools=True``, for training or a bundled workload, the fresh-process search of the
process pools (tuner.py; search.py, pure), whose winner the planner takes as a measured fact
(``planning.plan(..., tuned=...)``). ``tune`` is the one entry point (``tf-autopar tune`` calls
it); ``check_arguments`` is the one check of a tune's arguments, made here and by both tuners.
Importing this package does not import TensorFlow.
"""

from __future__ import annotations

import math
from typing import Any

from tf_autopar._model_path import looks_like_model
from tf_autopar.planning.modes import INFERENCE_MODES, LATENCY, THROUGHPUT, TRAINING

__all__ = ["tune"]

DEFAULT_BUDGET_S = 120.0
MIN_BUDGET_S = 10.0  # below this no model compares two settings: each run starts TensorFlow afresh (seconds)
MAX_BUDGET_S = 7 * 86400.0
#: What each way of tuning measures: the process pools' search (tuner.py) and the frozen path (inprocess.py).
PROCESS_POOL_MODES = (LATENCY, TRAINING)
IN_PROCESS_MODES = INFERENCE_MODES


def check_budget(budget_s: float) -> None:
    """ValueError unless ``budget_s`` is a finite number of seconds a tune can use."""
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0:
        raise ValueError(f"--budget must be a positive number of seconds, got {budget_s!r}")
    if not math.isfinite(budget_s) or budget_s > MAX_BUDGET_S:
        raise ValueError(f"--budget {budget_s:g} is beyond {MAX_BUDGET_S:g} s: give a finite budget")
    if budget_s < MIN_BUDGET_S:
        raise ValueError(
            f"a budget of {budget_s:g} s cannot compare two settings: every run starts TensorFlow in "
            f"a fresh process, which takes seconds; the rule's plan is kept; give --budget "
            f"{MIN_BUDGET_S:g} or more"
        )


def check_batch(batch: int | None) -> None:
    """ValueError unless ``batch`` is None (each tuner's default) or a positive count."""
    if batch is not None and batch < 1:
        raise ValueError(f"--batch must be a positive integer, got {batch}")


def check_arguments(mode: str, budget_s: float, batch: int | None, *, process_pools: bool) -> None:
    """ValueError naming the first problem with a tune's arguments, before anything starts: the mode
    for the way it is tuned (``process_pools``: the fresh-process search, else in one process),
    then the budget, then the batch."""
    if process_pools and mode == THROUGHPUT:
        raise ValueError(
            f"--process-pools tunes {' or '.join(PROCESS_POOL_MODES)}, not {mode!r}: throughput's streams are "
            "tuned in one process (leave out --process-pools, give a SavedModel or .keras file)"
        )
    if process_pools and mode not in PROCESS_POOL_MODES:
        raise ValueError(
            f"tune measures {' or '.join(PROCESS_POOL_MODES)}, not {mode!r} (throughput: tune the latency "
            "of one instance, then `run --mode throughput` splits the host)"
        )
    if not process_pools and mode not in IN_PROCESS_MODES:
        raise ValueError(
            f"in-process tune serves an inference mode ({' or '.join(IN_PROCESS_MODES)}), not {mode!r}; "
            "training steps are tuned with --process-pools"
        )
    check_budget(budget_s)
    check_batch(batch)


def in_one_process(model: Any, mode: str, process_pools: bool = False) -> bool:
    """Whether ``tune`` runs ``model`` in one process (a model file in an inference mode) rather
    than the fresh-process search (asked for, training, or a bundled workload)."""
    return not process_pools and mode != TRAINING and isinstance(model, str) and looks_like_model(model)


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
    # The tuners are imported when called: each imports this package's checks (a cycle at import),
    # and importing the package stays cheap (tf_autopar.tune, the in-process tuner's child).
    if one_process:
        from tf_autopar.tuning.inprocess import tune as _in_process

        return _in_process(model, mode=mode, batch=batch, budget_s=budget_s, **kwargs)
    from tf_autopar.tuning.tuner import tune as _tune

    given = {k: v for k, v in (("requests", requests), ("size", size)) if v is not None}
    return _tune(model, mode=mode, batch=batch, budget_s=budget_s, **given, **kwargs)
