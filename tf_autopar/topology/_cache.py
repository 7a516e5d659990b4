"""Small JSON caches under ~/.cache/tf_autopar for results that are slow to compute.

The directory is $TF_AUTOPAR_CACHE_DIR if set, else $XDG_CACHE_HOME/tf_autopar, else
~/.cache/tf_autopar. Failing to read or write a cache only costs time, never correctness.
"""
from __future__ import annotations

import json
import logging
import os

from tf_autopar._paths import cache_dir

log = logging.getLogger("tf_autopar.topology")

MAX_ENTRIES = 16  # per file: one per CPU model / TF install seen from this home directory


def load_cache(name: str) -> dict:
    try:
        with open(os.path.join(cache_dir(), name), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def store_cache(name: str, key: str, value: dict) -> None:
    """Add key -> value to a JSON cache file, atomically; a failure only costs speed."""
    import tempfile  # only when writing, i.e. once per host

    directory = cache_dir()
    try:
        os.makedirs(directory, exist_ok=True)
        data = load_cache(name)
        data.pop(key, None)
        data[key] = value
        while len(data) > MAX_ENTRIES:  # oldest first: JSON objects keep insertion order
            data.pop(next(iter(data)))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, os.path.join(directory, name))
    except OSError as exc:
        log.debug("cannot write cache %s/%s: %s", directory, name, exc)
