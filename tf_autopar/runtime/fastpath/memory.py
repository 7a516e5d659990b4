"""The build's memory rule: does a frozen copy (and the build that makes it) fit beside the model?

One question, asked by the builder before it freezes and before it opens more sessions:
``room_for_build(variable_bytes, sessions) -> (ok, reason)``. The estimate (what a build and its
sessions cost, from the variables' bytes) and the memory available are read here and nowhere
else, so that a memory limit of another kind (a cgroup's, a server's own) replaces this module.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Mapping

from tf_autopar._text import is_uint

#: The frozen path keeps its constants once in the imported graph and once in each session (about
#: twice the variables' bytes for one session). It is taken only while that extra memory stays
#: within MAX_EXTRA_MB (``TF_AUTOPAR_FAST_PATH_MAX_MB`` overrides) and within a quarter of the
#: memory available when the build starts.
MAX_EXTRA_MB = 2048
MAX_EXTRA_VAR = "TF_AUTOPAR_FAST_PATH_MAX_MB"
AVAILABLE_SHARE = 0.25
#: Building costs far more for a moment: TensorFlow's converter, the graph import and grappler's
#: first run each copy the graph several times. Measured peaks (peak RSS of a server process over
#: the original path's, benchmarks/bench_fastpath.py, live tuning's candidate sessions included;
#: the constants' size in brackets): MobileNetV2 +373 MB (14 MB), NASNetMobile +643 MB (21 MB),
#: DLRM +1.65 GB (74 MB), Xception +2.33 GB (88 MB): up to about 26x the constants plus 250 MB. A
#: build starts only when BUILD_FACTOR x the variables + BUILD_BASE_MB fits in half the memory
#: available, so that it cannot push the server into the kernel's out-of-memory killer.
BUILD_FACTOR = 27
BUILD_BASE_MB = 256
BUILD_SHARE = 0.5


def frozen_extra_bytes(variable_bytes: int, sessions: int) -> int:
    """What the frozen path adds: the graph's constants plus each session's copy."""
    return variable_bytes * (1 + max(1, sessions))


def max_extra_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The configured bound in bytes; ValueError naming the variable for a value that is no count."""
    env = os.environ if environ is None else environ
    text = env.get(MAX_EXTRA_VAR, "").strip()
    if not text:
        return MAX_EXTRA_MB << 20
    if not is_uint(text):
        raise ValueError(f"{MAX_EXTRA_VAR} must be a whole number of megabytes (ASCII digits), got {text!r}")
    return min(int(text), 1 << 40) << 20


def build_peak_bytes(variable_bytes: int) -> int:
    """What a build may need for a moment beside the running model (see BUILD_FACTOR)."""
    return variable_bytes * BUILD_FACTOR + (BUILD_BASE_MB << 20)


def memory_verdict(
    variable_bytes: int, sessions: int, available_bytes: int | None, bound_bytes: int
) -> tuple[bool, str]:
    """(take the fast path?, why not). ``available_bytes`` None: unknown, only the bound counts."""
    peak = build_peak_bytes(variable_bytes)
    if available_bytes is not None and peak > available_bytes * BUILD_SHARE:
        return False, (
            f"building its frozen copy may take about {_mb(peak)} for a moment (the variables' "
            f"{_mb(variable_bytes)} copied by the converter, the import and grappler), over half the "
            f"{_mb(available_bytes)} of memory available"
        )
    extra = frozen_extra_bytes(variable_bytes, sessions)
    if extra > bound_bytes:
        return False, (
            f"its frozen copy would add about {_mb(extra)} (the variables' {_mb(variable_bytes)} in the "
            f"graph and in each of {max(1, sessions)} session(s)), over the bound of {_mb(bound_bytes)} "
            f"({MAX_EXTRA_VAR})"
        )
    if available_bytes is not None and extra > available_bytes * AVAILABLE_SHARE:
        return False, (
            f"its frozen copy would add about {_mb(extra)}, over a quarter of the "
            f"{_mb(available_bytes)} of memory available"
        )
    return True, ""


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MB" if n >= 1 << 20 else f"{n / 1024:,.0f} kB"


def room_for_build(variable_bytes: int, sessions: int = 1) -> tuple[bool, str]:
    """(may the build go ahead?, why not): ``sessions`` sessions in all once it is done, over the
    variables' ``variable_bytes``, against the bound and the memory available now."""
    return memory_verdict(variable_bytes, sessions, available_bytes(), max_extra_bytes())


def available_bytes() -> int | None:
    """The memory available now (psutil), or None when unknown (then only the bound counts)."""
    try:
        import psutil  # deferred: optional, and a build is the only reader

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def variable_bytes(handles: list[Any]) -> int:
    """The bytes of the variables behind ``handles`` (resource handles), from their handle data."""
    from tensorflow.python.framework import dtypes
    from tensorflow.python.ops import resource_variable_ops

    total = 0
    for h in handles:
        data = resource_variable_ops.get_eager_safe_handle_data(h)
        for st in getattr(data, "shape_and_type", ()):
            n = 1
            for d in st.shape.dim:
                n *= max(int(d.size), 1)
            total += n * dtypes.as_dtype(st.dtype).size
    return total


def trim_heap() -> None:
    """Give the build's freed temporaries back to the system. Freezing and grappler's first run
    leave 120-250 MB of freed memory in glibc's arenas on the models of docs/serving.md
    (MobileNetV2: 860 MB resident after the build, 744 MB after the trim); a server keeps it for
    its lifetime otherwise. No-op where the C library has no malloc_trim."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
