"""The only module that reads or changes TensorFlow's runtime settings and ``os.environ``.

Facts this rests on (TF 2.21, checked by experiment):
- TF_NUM_INTEROP_THREADS / TF_NUM_INTRAOP_THREADS are read when the runtime starts (the
  eager context's first op, or the first Session), not at ``import tensorflow``, so setting
  them after the import still works. ``tf.config.threading.set_*`` set before the start
  wins over the variables, so a value the user set through that API is kept.
- TF_OVERRIDE_GLOBAL_THREADPOOL=1 is read once at start; then every Session gets its own
  intra-op pool (its ConfigProto's ``intra_op_parallelism_threads``). Eager code and
  tf.function keep using the context's pool, unchanged in speed and thread use.
- Threads inherit the creating thread's affinity and scheduler attributes (including the
  EEVDF time slice, Linux 6.12+), so setting them on the main thread before the start covers
  every pool thread TF starts.
- "Started" = the eager context has a C handle, or a Session was created (a session fixes
  the process pools without initialising the eager context; TF counts sessions in a
  monitoring cell).
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
from typing import Mapping

OVERRIDE_VAR = "TF_OVERRIDE_GLOBAL_THREADPOOL"
SLICE_VAR = "TF_AUTOPAR_SHARED_SLICE_MS"  # time slice for workers sharing a core; 0 keeps the kernel's
SHARED_SLICE_MS = 5
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}  # syscall numbers; Python has no wrapper
POOL_VARS = ("TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS")

# variables tf_autopar set in this process -> the value set (to tell them from the user's)
_SET_BY_US: dict[str, str] = {}
# value of OVERRIDE_VAR when the runtime started, as far as we know (None = unknown)
_override_at_start: bool | None = None


def tf_loaded() -> bool:
    return "tensorflow" in sys.modules


def runtime_started() -> bool:
    """True once TensorFlow's process thread pools are fixed. Never starts the runtime."""
    if "tensorflow.python.eager.context" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    ctx = context.context_safe()
    if ctx is not None and getattr(ctx, "_context_handle", None) is not None:
        return True
    session_mod = sys.modules.get("tensorflow.python.client.session")
    if session_mod is not None:
        try:
            return session_mod._python_session_create_counter.get_cell().value() > 0
        except Exception:  # the counter is internal; if it moved, assume no session yet
            return False
    return False


def user_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment as the user set it: os.environ without the variables we set."""
    env = dict(os.environ if environ is None else environ)
    for key, value in _SET_BY_US.items():
        if env.get(key) == value:
            del env[key]
    return env


def api_pools() -> tuple[int | None, int | None]:
    """Pools the user set through tf.config.threading before start (None = not set)."""
    if "tensorflow.python.eager.context" not in sys.modules:
        return None, None
    from tensorflow.python.eager import context

    ctx = context.context_safe()
    if ctx is None:
        return None, None
    return getattr(ctx, "_inter_op_parallelism_threads", None), getattr(ctx, "_intra_op_parallelism_threads", None)


def set_env(values: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Set variables the user has not set; returns (set, kept user values)."""
    applied: dict[str, str] = {}
    kept: dict[str, str] = {}
    users = user_env()
    for key, value in values.items():
        if key in users:
            kept[key] = users[key]
            continue
        os.environ[key] = value
        _SET_BY_US[key] = value
        applied[key] = value
    return applied, kept


def restore_env() -> list[str]:
    """Remove the variables we set (unless someone changed them since); returns their names."""
    removed = []
    for key, value in list(_SET_BY_US.items()):
        if os.environ.get(key) == value:
            del os.environ[key]
            removed.append(key)
        del _SET_BY_US[key]
    return removed


def note_start_settings() -> None:
    """Remember whether per-session intra-op pools are possible (called while not started)."""
    global _override_at_start
    _override_at_start = os.environ.get(OVERRIDE_VAR, "") not in ("", "0", "false", "False")


def per_session_intra() -> bool:
    """Whether each Session really gets its own intra-op pool."""
    if _override_at_start is not None and (runtime_started() or _SET_BY_US.get(OVERRIDE_VAR)):
        return _override_at_start
    # started before we looked: the variable's current value is our best evidence
    return os.environ.get(OVERRIDE_VAR, "") not in ("", "0", "false", "False")


def bind(cpus: tuple[int, ...]) -> bool:
    """Bind this process to ``cpus`` before TF starts (its pool threads inherit the mask)."""
    try:
        if set(os.sched_getaffinity(0)) == set(cpus):
            return False
        os.sched_setaffinity(0, cpus)
        return True
    except (AttributeError, OSError, ValueError):
        return False


class _SchedAttr(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("sched_policy", ctypes.c_uint32), ("sched_flags", ctypes.c_uint64),
                ("sched_nice", ctypes.c_int32), ("sched_priority", ctypes.c_uint32),
                ("sched_runtime", ctypes.c_uint64), ("sched_deadline", ctypes.c_uint64),
                ("sched_period", ctypes.c_uint64), ("util_min", ctypes.c_uint32), ("util_max", ctypes.c_uint32)]


def request_slice(environ: Mapping[str, str] | None = None) -> str:
    """Ask the kernel for longer time slices for this thread and the pool threads TF will start.

    For workers that share a core (the sharing rule). Linux 6.12+ (EEVDF) takes a fair task's
    ``sched_runtime`` as its slice; the default (0.75 ms x (1 + log2 CPUs), 1.4 ms here) makes
    two workers swap several times per request and evict each other's cache. Measured with four
    SqueezeNet servers on two cores (README). Older kernels accept and ignore the request.
    Returns what was done, or why not. Only SCHED_OTHER threads are touched; TF_AUTOPAR_SHARED_SLICE_MS
    sets the length (0: leave the kernel's default).
    """
    env = os.environ if environ is None else environ
    raw = env.get(SLICE_VAR, "").strip()
    try:
        ms = float(raw) if raw else SHARED_SLICE_MS
    except ValueError:
        return f"time slice not changed: {SLICE_VAR}={raw!r} is not a number of milliseconds"
    if ms <= 0:
        return f"time slice not changed ({SLICE_VAR}={raw})"
    number = _SCHED_SETATTR.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return f"time slice not changed: no sched_setattr on {sys.platform}/{platform.machine()}"
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return "time slice not changed: you chose a scheduling policy for this process"
        libc = ctypes.CDLL(None, use_errno=True)
        attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=os.SCHED_OTHER,
                          sched_nice=os.getpriority(os.PRIO_PROCESS, 0), sched_runtime=int(ms * 1e6))
        if libc.syscall(number, 0, ctypes.byref(attr), 0) != 0:
            return f"time slice not changed: sched_setattr failed ({os.strerror(ctypes.get_errno())})"
    except (AttributeError, OSError) as exc:
        return f"time slice not changed: {exc}"
    return f"time slice {ms:g} ms"


def default_pool_size() -> int:
    """TensorFlow's own choice for 0 ("let TF pick"): the CPUs in the affinity mask."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def running_pools() -> tuple[int, int]:
    """The process pools TF runs (or will run) with, from the API values, the env, or TF's default."""
    api_inter, api_intra = api_pools()
    result = []
    for api, var in zip((api_inter, api_intra), POOL_VARS):
        if api:
            result.append(int(api))
            continue
        text = os.environ.get(var, "")
        result.append(int(text) if text.isdigit() and int(text) > 0 else default_pool_size())
    return result[0], result[1]


def session_counter() -> int:
    mod = sys.modules.get("tensorflow.python.client.session")
    try:
        return int(mod._python_session_create_counter.get_cell().value()) if mod else 0
    except Exception:
        return 0
