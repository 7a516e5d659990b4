"""Native per-op tracing of TensorFlow code: ``with tf_autopar.trace() as t: ...``.

Importing this package does not import TensorFlow; entering a trace does (and builds
the native tracer on first use, cached per TF version; see ``tf_autopar.tracing.build``).
Names are resolved lazily so ``python -m tf_autopar.tracing.build`` runs cleanly.
"""

from __future__ import annotations

from tf_autopar._lazy import lazy_exports

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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
