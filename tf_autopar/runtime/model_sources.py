"""Which model file a loaded object came from: the fingerprint its plan and a tune are keyed by.

The load hook (model_loads.py) writes it; optimize() and the fast path (frozen.py) read it, so
they need not import the hook (which imports the fast path).
"""

from __future__ import annotations

import os
import weakref
from typing import Any

_fingerprints: dict[str, str] = {}  # real path -> the fingerprint its plan (and a tune) is keyed by
_sources: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()  # loaded object -> fingerprint


def note_path(real_path: str, fingerprint: str) -> None:
    """The model at ``real_path`` (a real path) was planned under ``fingerprint``."""
    _fingerprints[real_path] = fingerprint


def path_fingerprint(path: Any) -> str | None:
    return _fingerprints.get(os.path.realpath(os.fspath(path)))


def remember(loaded: Any, path: Any) -> None:
    """``loaded`` came from ``path``, so optimize(loaded) finds what `tune` measured for it."""
    try:
        fingerprint = path_fingerprint(path)
        if fingerprint:
            _sources[loaded] = fingerprint
    except TypeError:  # not weak-referenceable, or not a path: optimize() plans by the rule
        pass


def source_fingerprint(loaded: Any) -> str | None:
    """The fingerprint of the model file ``loaded`` was loaded from after enable(), if known."""
    try:
        return _sources.get(loaded)
    except TypeError:
        return None
