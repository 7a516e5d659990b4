"""The fast path: a loaded SavedModel's calls served from its frozen graph in a runner of its own.

Measured on this kind of host (docs/serving.md), a signature of a SavedModel loaded with
``tf.saved_model.load`` runs up to 2.6x faster as a frozen graph (variables folded into
constants, so grappler folds batch norms and fuses ops) in a ``tf.compat.v1.Session`` with
pools planned for it than called the usual way, beyond the best process-pool setting. So with
``enable()`` in an inference mode, what a server calls on a loaded model is routed here.
docs/design.md ("The fast path") has the map; in short, one job per module:

- routing/: how a call reaches us, one module per calling convention (signatures by keyword,
  restored functions positionally, a Keras model's ``predict`` of one batch);
- served.py: ``ServedFunction.__call__``, the request path; it never waits for a build;
- bucket.py: a batch bucket as a state machine (queued, building, checking, frozen session,
  stale, original);
- builder.py: the background thread; build.py: what a build does (freeze, check, time, settle);
- pools.py: the frozen graph and its engine runners; engines/: what runs a frozen graph
  (TensorFlow's sessions first), behind a protocol and a registry;
- trials.py and pairing.py: live tuning on paired live calls; memory.py: the build's memory rule
  (the container's limit), one build per memory cgroup, pressure while serving;
- remembered.py: memory across starts (the plan cache); report.py: status records and words;
- roster.py: this process's routed functions; replan.py: new CPU limits; rules.py: pure decisions;
  switches.py: on or off, and who tunes.

Fail open: any failure of ours runs the original call (one warning) and retires that bucket.
"""

from __future__ import annotations

import importlib
from typing import Any

# Lazy: importing one module of the package (cache.py reads rules.py when a model is planned)
# must not import the fast path; each name below imports its module on first use.
_NAMES = {
    "BY_LIVE": "switches",
    "BY_TUNE": "switches",
    "LIVE_VAR": "switches",
    "PATCH_NAME": "switches",
    "SWITCH_VAR": "switches",
    "live_wanted": "switches",
    "switched_off": "switches",
    "wanted": "switches",
    "Bucket": "bucket",
    "State": "bucket",
    "wait_idle": "builder",
    "plan_key": "pools",
    "remembered_key": "remembered",
    "plan_source": "report",
    "ServedFunction": "served",
    "_served": "roster",
    "records": "roster",
    "replan_all": "roster",
    "route": "roster",
    "route_keras": "roster",
    "summaries": "roster",
    "tune_as": "roster",
    "unroute_all": "roster",
}
__all__ = sorted(n for n in _NAMES if not n.startswith("_"))


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        try:  # a submodule: fastpath.rules, fastpath.engines, ...
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
