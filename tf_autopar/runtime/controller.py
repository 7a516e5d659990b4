"""The only module that reads or changes TensorFlow's runtime settings and ``os.environ``.

Facts this rests on (TF 2.21, checked by experiment):
- TF_NUM_INTEROP_THREADS / TF_NUM_INTRAOP_THREADS are read when the runtime starts (the
  eager context's first op, or the first Session), not at ``import tensorflow``, so setting
  them after the import still works. ``tf.config.threading.set_*`` set before the start
  wins over the variables, so a value the user set through that API is kept.
- TF_OVERRIDE_GLOBAL_THREADPOOL=1 is read once at start; then every Session gets its own
  intra-op pool (its ConfigProto's ``intra_op_parallelism_threads``). Eager code and
  tf.function keep using the context's pool, unchanged in speed and thread use.
- "Started" = the eager context has a C handle, or a Session was created (a session fixes
  the process pools without initialising the eager context; TF counts sessions in a
  monitoring cell).
"""
from __future__ import annotations

import os
import sys
from typing import Mapping

from tf_autopar._text import is_uint
import tf_autopar.planning.variables as variables
from tf_autopar.topology import affinity

OVERRIDE_VAR = variables.OVERRIDE_GLOBAL_THREADPOOL
POOL_VARS = variables.POOLS

# variables tf_autopar set in this process -> the value set (to tell them from the user's)
_SET_BY_US: dict[str, str] = {}
# their values before we set them (None: unset), put back by restore_env()
_BEFORE: dict[str, str | None] = {}
# (mask before bind(), mask bind() set), for restore_affinity(); None: never bound
_BOUND: tuple[frozenset[int], frozenset[int]] | None = None
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
    """The environment as the user set it: os.environ without the variables we set, here or
    in ``tf-autopar run`` (named in TF_AUTOPAR_LAUNCHER_VARS), so that enable() re-plans those
    for the model it finds instead of keeping them as the user's own."""
    env = dict(os.environ if environ is None else environ)
    for key, value in _SET_BY_US.items():
        if env.get(key) == value:
            del env[key]
    for key in env.pop("TF_AUTOPAR_LAUNCHER_VARS", "").split(","):
        env.pop(key.strip(), None)
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
        _BEFORE.setdefault(key, os.environ.get(key))  # a launcher's value, re-planned here
        os.environ[key] = value
        _SET_BY_US[key] = value
        applied[key] = value
    return applied, kept


def restore_env() -> list[str]:
    """Put back the variables we set as they were before (unless someone changed them since);
    returns their names."""
    removed = []
    for key, value in list(_SET_BY_US.items()):
        before = _BEFORE.pop(key, None)
        if os.environ.get(key) == value:
            if before is None:
                del os.environ[key]
            else:
                os.environ[key] = before
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
    global _BOUND
    try:
        before = frozenset(os.sched_getaffinity(0))
        if before == set(cpus):
            return False
        affinity.set_affinity(cpus)
    except (AttributeError, OSError, ValueError):
        return False
    if _BOUND is None:
        _BOUND = (before, frozenset(cpus))
    else:  # bound again (enable after enable): the first mask is the one to restore
        _BOUND = (_BOUND[0], frozenset(cpus))
    return True


def restore_affinity() -> bool:
    """Give every thread still on the mask bind() set the mask it had before; True if any moved.

    Threads the program moved elsewhere since are left where they are."""
    global _BOUND
    if _BOUND is None:
        return False
    before, ours = _BOUND
    _BOUND = None
    moved = False
    for tid in affinity.threads():
        try:
            if frozenset(os.sched_getaffinity(tid)) == ours:
                affinity.set_affinity(before, (tid,))
                moved = True
        except (OSError, ValueError):  # a thread that just exited, or a cpuset that shrank
            continue
    return moved


def bound_to(cpus: tuple[int, ...]) -> bool:
    """Whether the process's mask is exactly ``cpus`` already (an earlier plan bound it)."""
    try:
        return set(os.sched_getaffinity(0)) == set(cpus)
    except (AttributeError, OSError):
        return False


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
        result.append(int(text) if is_uint(text) and int(text) > 0 else default_pool_size())
    return result[0], result[1]


