"""Small JSON caches under ~/.cache/tf_autopar for results that are slow to compute.

The directory is $TF_AUTOPAR_CACHE_DIR if set, else $XDG_CACHE_HOME/tf_autopar, else
~/.cache/tf_autopar. Failing to read or write a cache only costs time, never correctness. The
directory may be shared: a file that is a symlink, another user's or writable by others is not
read (_files.check_owned), and another user's is never replaced.
"""

from __future__ import annotations

import logging
import os

from tf_autopar._files import read_json, write_json_atomic
from tf_autopar._paths import cache_dir

log = logging.getLogger("tf_autopar.topology")

MAX_ENTRIES = 16  # per file: one per CPU model / TF install seen from this home directory
MAX_BYTES = 1 << 20  # sixteen small entries; anything larger was not written by tf_autopar


def load_cache(name: str) -> dict:
    """The cache's mapping; {} when missing, unreadable, not a regular file or not JSON."""
    try:
        data = read_json(os.path.join(cache_dir(), name), MAX_BYTES, follow_symlinks=False, owned=True)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.debug("ignoring cache %s/%s: %s", cache_dir(), name, exc)
        return {}


def store_cache(name: str, key: str, value: dict) -> None:
    """Add key -> value to a JSON cache file, atomically; a failure only costs speed."""
    directory = cache_dir()
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        if os.path.lexists(path) and os.lstat(path).st_uid != os.getuid():
            log.debug("not replacing cache %s: it belongs to uid %s", path, os.lstat(path).st_uid)
            return
        data = load_cache(name)
        data.pop(key, None)
        data[key] = value
        while len(data) > MAX_ENTRIES:  # oldest first: JSON objects keep insertion order
            data.pop(next(iter(data)))
        write_json_atomic(path, data, indent=1)
    except OSError as exc:
        log.debug("cannot write cache %s/%s: %s", directory, name, exc)
