"""tf_autopar: TensorFlow CPU thread settings planned from the host and the model.

Public API (imports are lazy so `import tf_autopar` never imports TensorFlow):

- detect_topology(root="/") -> Topology
- plan(topology, profile=None, mode="latency", ...) -> ThreadPlan
- analyze(obj) -> GraphProfile
- enable(model=None, mode="latency", ...), disable(), status(), optimize(fn_or_model)
- trace()
- tune(model, mode="latency" or "training", batch=None, budget_s=120)
"""

from __future__ import annotations

from tf_autopar import _warn
from tf_autopar._lazy import lazy_exports

__version__ = "0.1.0"

_warn.install()  # warnings reach stderr in a program that never configured logging (_warn.py)

_EXPORTS = {
    "detect_topology": "tf_autopar.topology",
    "Topology": "tf_autopar.topology.model",
    "plan": "tf_autopar.planning",
    "baseline_plan": "tf_autopar.planning",
    "ThreadPlan": "tf_autopar.planning.plan",
    "analyze": "tf_autopar.graph",
    "GraphProfile": "tf_autopar.graph.profile",
    "enable": "tf_autopar.runtime",
    "disable": "tf_autopar.runtime",
    "status": "tf_autopar.runtime",
    "optimize": "tf_autopar.runtime",
    "trace": "tf_autopar.tracing",
    "characterize": "tf_autopar.characterization.bundled",
    "tune": "tf_autopar.tuning",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
