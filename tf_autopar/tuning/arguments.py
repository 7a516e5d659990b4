"""A tune's arguments, checked once before anything starts: by ``tune`` (the package's entry
point) and by each tuner called directly. Below both tuners and the package face."""

from __future__ import annotations

import math
from typing import Any

from tf_autopar._model_path import looks_like_model
from tf_autopar.planning.modes import INFERENCE_MODES, LATENCY, THROUGHPUT, TRAINING

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
