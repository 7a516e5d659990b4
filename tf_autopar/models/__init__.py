"""A user's own model (SavedModel directory or .keras file) for ``bench`` and ``validate``.

Modules: options (the input flags, pure), inputs (synthesised or file inputs, pure numpy),
load (loading, input specs, embedding-table bounds, the profile; imports TensorFlow, so
child processes only), child (the child processes' entry point), bench (the benchmark's
orchestration, never imports TensorFlow). Importing this package imports neither
TensorFlow nor numpy.
"""

from __future__ import annotations
