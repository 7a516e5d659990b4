"""Bundled workloads: Fathom's eight models and the parallelism paper's seven.

Registration is an explicit list of module paths so that ``import tf_autopar_workloads`` stays
cheap (no TensorFlow, no Keras) and ``names()`` never depends on a model module
importing cleanly; ``get(name)`` imports the module only when asked. Importing this package
registers the names with tf_autopar (tf_autopar.graph.named), so ``tf_autopar.analyze("alexnet")``
and ``tf_autopar.enable("alexnet")`` resolve them.
"""

from __future__ import annotations

import importlib
from typing import Any

from tf_autopar.graph import named
from tf_autopar_workloads.base import MODES, SIZES, Workload

# name -> module defining WORKLOAD
_REGISTRY: dict[str, str] = {
    # Fathom (Adolf et al., IISWC 2016)
    "seq2seq": "tf_autopar_workloads.fathom.seq2seq",
    "memnet": "tf_autopar_workloads.fathom.memnet",
    "speech": "tf_autopar_workloads.fathom.speech",
    "autoenc": "tf_autopar_workloads.fathom.autoenc",
    "residual": "tf_autopar_workloads.fathom.residual",
    "vgg": "tf_autopar_workloads.fathom.vgg",
    "alexnet": "tf_autopar_workloads.fathom.alexnet",
    "deepq": "tf_autopar_workloads.fathom.deepq",
    # Wang et al., "Exploiting Parallelism Opportunities with Deep Learning Frameworks"
    "inception_v3": "tf_autopar_workloads.paper.inception_v3",
    "resnet50": "tf_autopar_workloads.paper.resnet50",
    "densenet": "tf_autopar_workloads.paper.densenet",
    "squeezenet": "tf_autopar_workloads.paper.squeezenet",
    "ncf": "tf_autopar_workloads.paper.ncf",
    "transformer": "tf_autopar_workloads.paper.transformer",
    "wide_deep": "tf_autopar_workloads.paper.wide_deep",
}

__all__ = ["MODES", "SIZES", "Workload", "get", "module_path", "names"]


def names() -> list[str]:
    """All registered workload names, sorted."""
    return sorted(_REGISTRY)


def module_path(name: str) -> str:
    """The module that defines workload ``name`` (ValueError on an unknown name)."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(names())}") from None


def get(name: str) -> Workload:
    """The Workload record for ``name``; imports its module on first use."""
    module = importlib.import_module(module_path(name))
    workload = getattr(module, "WORKLOAD", None)
    if not isinstance(workload, Workload):
        raise ValueError(f"module {module.__name__} does not define WORKLOAD = Workload(...)")
    if workload.name != name:
        raise ValueError(f"module {module.__name__} defines workload {workload.name!r}, registered as {name!r}")
    return workload


def _graph_def(name: str, *, mode: str = "infer", size: str = "tiny", batch: int | None = None) -> Any:
    """A workload's GraphDef for analysis (the runner imports TensorFlow, so only when asked)."""
    from tf_autopar_workloads import runner

    return runner.graph_def(name, mode=mode, size=size, batch=batch)


# The library resolves workload names through this registration and never imports this package.
named.register(__name__, names=names, graph_def=_graph_def)
