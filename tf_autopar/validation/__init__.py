"""``tf-autopar validate``: does the plan match the best thread settings on this host?

Modules: space (the bounded search space, the baselines' configurations), results (document
summaries and schema), report (table, JSON, PNG), harness (interleaved rounds). It stands on
tf_autopar.measure (fresh processes, quota groups, statistics, progress, configurations) and
tf_autopar.models (the children: a row's plan, a workload's or a model file's steps, a workload's
export for the frozen path), and on tf_autopar.tuning for ``--tuned``. Importing this package never imports TensorFlow.
"""

from __future__ import annotations

from tf_autopar.validation.harness import DEFAULT_RUNNER, Harness, Options, RowSpec, make_rows
from tf_autopar.validation.results import summarize_row, validate_document
from tf_autopar.measure.configs import Config
from tf_autopar.validation.space import SearchSpace, search_space

__all__ = [
    "DEFAULT_RUNNER",
    "Config",
    "Harness",
    "Options",
    "RowSpec",
    "SearchSpace",
    "make_rows",
    "search_space",
    "summarize_row",
    "validate_document",
]
