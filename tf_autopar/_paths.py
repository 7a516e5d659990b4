"""Where tf_autopar keeps its small caches (cpuinfo, plans, the native tracer build)."""

from __future__ import annotations

import os


def cache_dir() -> str:
    """$TF_AUTOPAR_CACHE_DIR, else $XDG_CACHE_HOME/tf_autopar, else ~/.cache/tf_autopar."""
    explicit = os.environ.get("TF_AUTOPAR_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tf_autopar")
