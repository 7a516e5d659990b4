"""Native per-op tracing of TensorFlow code: ``with tf_autopar.trace() as t: ...``.

Importing this package does not import TensorFlow; entering a trace does (and builds
the native tracer on first use, cached per TF version; see ``tf_autopar.tracing.build``).
Names are resolved lazily so ``python -m tf_autopar.tracing.build`` runs cleanly.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "trace": "tf_autopar.tracing.tracer",
    "Trace": "tf_autopar.tracing.tracer",
    "native_status": "tf_autopar.tracing.tracer",
    "TraceBusyError": "tf_autopar.tracing._native",
    "NativeBuildError": "tf_autopar.tracing.build",
    "HeavyShare": "tf_autopar.tracing.model",
    "OpEvent": "tf_autopar.tracing.model",
    "OpRecord": "tf_autopar.tracing.model",
    "OpTable": "tf_autopar.tracing.model",
    "TypeRecord": "tf_autopar.tracing.model",
    "normalize_type": "tf_autopar.tracing.model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tf_autopar.tracing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
