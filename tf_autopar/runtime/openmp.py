"""What the OpenMP runtime loaded into this process really runs with (OpenMP builds of TensorFlow).

Reads, never sets. On an OpenMP build TensorFlow applies its own defaults when the variables are
unset (OMP_NUM_THREADS = the physical cores, KMP_BLOCKTIME = 1 ms, at the first op), so the
environment alone does not say what a process ran with: the runtime's C API does. Stock
TensorFlow loads no OpenMP runtime and this returns None.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from tf_autopar.topology.tf_runtime import is_openmp_library


def loaded_library() -> str | None:
    """The path of the OpenMP runtime mapped into this process, or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split(None, 5)  # address perms offset dev inode [path]
                path = fields[5].strip() if len(fields) == 6 else ""
                if path.startswith("/") and is_openmp_library(path):
                    return path
    except OSError:
        return None
    return None


def openmp_state() -> dict[str, Any] | None:
    """{"library", "max_threads", "blocktime_ms"} of the loaded runtime as this thread sees it
    (blocktime: Intel's and LLVM's runtimes only), or None without one. Asking initialises the
    runtime, so call it after TensorFlow's first op, never to plan."""
    path = loaded_library()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    state: dict[str, Any] = {"library": os.path.basename(path), "max_threads": None, "blocktime_ms": None}
    if hasattr(lib, "omp_get_max_threads"):
        state["max_threads"] = int(lib.omp_get_max_threads())
    if hasattr(lib, "kmp_get_blocktime"):
        state["blocktime_ms"] = int(lib.kmp_get_blocktime())
    return state
