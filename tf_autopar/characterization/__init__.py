"""Fathom's characterization of workloads (where the time goes, similarity, training vs
inference, parallel scaling) from fresh-process traces. Importing this package imports neither
TensorFlow nor the workloads; ``tf_autopar.characterize`` (in tf_autopar.cli.characterize_cmd)
is the entry point that knows the bundled workloads' names.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "OP_CLASSES": "tf_autopar.characterization.classes",
    "classify": "tf_autopar.characterization.classes",
    "cosine_matrix": "tf_autopar.characterization.analysis",
    "similarity": "tf_autopar.characterization.analysis",
    "Result": "tf_autopar.characterization.run",
    "run_characterization": "tf_autopar.characterization.run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tf_autopar.characterization' has no attribute {name!r}")
    attr = "characterize" if name == "run_characterization" else name
    return getattr(importlib.import_module(module), attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
