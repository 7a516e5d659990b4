"""Bundled workloads: Fathom's eight models and the parallelism paper's seven.

Registration is an explicit list of module paths so that ``import workloads`` stays
cheap (no TensorFlow, no Keras) and ``names()`` never depends on a model module
importing cleanly; ``get(name)`` imports the module only when asked.
"""
from __future__ import annotations

import importlib

from workloads.base import MODES, SIZES, Workload

# name -> module defining WORKLOAD
_REGISTRY: dict[str, str] = {
    # Fathom (Adolf et al., IISWC 2016)
    "seq2seq": "workloads.fathom.seq2seq",
    "memnet": "workloads.fathom.memnet",
    "speech": "workloads.fathom.speech",
    "autoenc": "workloads.fathom.autoenc",
    "residual": "workloads.fathom.residual",
    "vgg": "workloads.fathom.vgg",
    "alexnet": "workloads.fathom.alexnet",
    "deepq": "workloads.fathom.deepq",
    # Wang et al., "Exploiting Parallelism Opportunities with Deep Learning Frameworks"
    "inception_v3": "workloads.paper.inception_v3",
    "resnet50": "workloads.paper.resnet50",
    "densenet": "workloads.paper.densenet",
    "squeezenet": "workloads.paper.squeezenet",
    "ncf": "workloads.paper.ncf",
    "transformer": "workloads.paper.transformer",
    "wide_deep": "workloads.paper.wide_deep",
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
