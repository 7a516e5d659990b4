"""Apply thread plans inside a running program: enable(), disable(), status(), optimize().

Which path applies when (see also docs/design.md):
- enable() before TensorFlow's runtime starts (before the first op or Session; after
  ``import tensorflow`` is fine): the process pools are set through TF_NUM_* variables,
  from the model given, else the plan cache for this program, else the host alone;
  TF_OVERRIDE_GLOBAL_THREADPOOL=1 is set so that later sessions own their intra-op pools.
- every tf.compat.v1.Session gets a ConfigProto planned for its own graph (sessions.py).
- tf.function / Keras: each function is analysed at its first trace (functions.py); when its
  plan differs from the fixed process pools, use optimize(), and the next start picks the
  plan from the cache.
- enable() after the start: hooks still apply; the process pools cannot change (one warning).
Every entry point fails open: an internal error leaves TensorFlow on its own settings.

Where each part lives: lifecycle.py (enable, disable, status, the kill switch), state.py (the
process state: ``STATE``, the host and this process's share of it included), plans.py (this
process's plans: the rule of planning/ fed with STATE, the user's environment and the plan
cache), applied.py (the record of what enable() changed, and its restore()), hooks.py and
import_hook.py (which hooks, installed now or at ``import tensorflow``), model_arg.py (what
``model=`` names), share.py (this process's share of the host), pools.py (apply before the
start, else report), fork.py (what a fork does), frozen.py (optimize()).
"""

from __future__ import annotations

from typing import Any

from tf_autopar.runtime.lifecycle import DISABLE_VAR, MODES, disable, enable, kill_switch, status  # noqa: F401
from tf_autopar.runtime.state import ProcessRecord, Status

__all__ = ["FunctionRecord", "ProcessRecord", "SessionRecord", "Status", "disable", "enable", "optimize", "status"]


def __getattr__(name: str) -> Any:
    # defined on first use: the records cost a dataclass each (records.py), optimize() imports
    # the frozen-graph machinery (frozen.py), neither of which enable() needs
    if name in ("SessionRecord", "FunctionRecord"):
        from tf_autopar.runtime import records

        return getattr(records, name)
    if name == "optimize":
        from tf_autopar.runtime.frozen import optimize

        return optimize
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
