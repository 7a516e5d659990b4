"""``tf-autopar validate``: does the plan match the best thread settings on this host?

Modules: space (configurations and the bounded search space), runner (fresh processes
with env, binding, timeout, quota group), cgroup (real CFS quota groups, v1 and v2),
stats (medians, paired ratios, geometric means), results (document summaries and schema),
report (table, JSON, PNG), harness (interleaved rounds), plan_child (our plan, computed
where TensorFlow may be imported). Importing this package never imports TensorFlow.
"""
from __future__ import annotations

from tf_autopar.validation.harness import DEFAULT_RUNNER, Harness, Options, RowSpec, make_rows
from tf_autopar.validation.results import summarize_row, validate_document
from tf_autopar.validation.space import Config, SearchSpace, search_space

__all__ = [
    "DEFAULT_RUNNER", "Config", "Harness", "Options", "RowSpec", "SearchSpace", "make_rows", "search_space",
    "summarize_row", "validate_document",
]
