"""What TensorFlow's runtime runs with, read without starting it; and the environment as the user set it.

The changes enable() makes (variables, binding) go through its record (applied.py), which
keeps what was there before; this module only reads.

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
from tf_autopar.runtime.state import STATE

OVERRIDE_VAR = variables.OVERRIDE_GLOBAL_THREADPOOL
POOL_VARS = variables.POOLS

# value of OVERRIDE_VAR when the runtime started, as far as we know (None = unknown); a fact
# about TensorFlow's start, which disable() cannot undo, so not part of enable()'s record
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
    for key, value in STATE.applied.ours().items():
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


def note_start_settings() -> None:
    """Remember whether per-session intra-op pools are possible (called while not started)."""
    global _override_at_start
    _override_at_start = os.environ.get(OVERRIDE_VAR, "") not in ("", "0", "false", "False")


def per_session_intra() -> bool:
    """Whether each Session really gets its own intra-op pool."""
    if _override_at_start is not None and (runtime_started() or STATE.applied.ours().get(OVERRIDE_VAR)):
        return _override_at_start
    # started before we looked: the variable's current value is our best evidence
    return os.environ.get(OVERRIDE_VAR, "") not in ("", "0", "false", "False")


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
