"""enable(), disable(), status(): plan the process, apply what can still be applied, undo it.

enable() makes a fresh record (applied.py) of every change it makes; disable() is that record's
``restore()``. The kill switch (``TF_AUTOPAR_DISABLE``) is read first, before anything else can
go wrong.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from tf_autopar.planning.graph_plan import cached_profile
from tf_autopar.planning.modes import MODES
from tf_autopar.runtime import cache, controller, hooks, model_arg, plans, pools, share as shares
from tf_autopar.runtime import fork  # noqa: F401  (its import registers the at-fork handlers)
from tf_autopar.runtime.applied import Applied
from tf_autopar.runtime.fastpath.engines import choice
from tf_autopar.runtime.safety import fail_open, maybe_fail
from tf_autopar.runtime.state import STATE, Status

log = logging.getLogger("tf_autopar.runtime")
DISABLE_VAR = "TF_AUTOPAR_DISABLE"


def kill_switch() -> str:
    """``"TF_AUTOPAR_DISABLE=<value>"`` when the kill switch is on (for A/B runs and emergencies), else ""."""
    value = os.environ.get(DISABLE_VAR, "").strip()
    return f"{DISABLE_VAR}={value}" if value.lower() in ("1", "true", "yes", "on") else ""


def enable(
    model: Any = None,
    mode: str = "latency",
    *,
    width: int | None = None,
    streams: int | None = None,
    batch: int | None = None,
    sessions: bool = True,
    functions: bool = True,
    loaders: bool = True,
    cache: bool = True,
    cooperate: bool = True,
    optimize: bool = True,
    tune_live: bool = True,
    precision: str = "f32",
) -> Status:
    """Plan TensorFlow's threads for this host (and ``model``) and apply them wherever still possible.

    ``model``: a SavedModel directory, .keras file or graph file, a bundled workload name, a
    width (int), a GraphProfile, or a TF/Keras object. Without one, the model is planned when
    the program loads it (``loaders``: tf.saved_model.load, keras.models.load_model,
    keras.layers.TFSMLayer), from the plan cache of an earlier run, else from the host alone.
    Call it before the first TensorFlow op for the process pools to follow the plan; later
    calls still tune sessions and report functions. ``batch``: what a model's None batch
    dimension is read as; not given, 1 for the model's width, but op sizes count as unknown
    (no one-thread-per-op rule: graph/dims.py). Repeated calls return the current status and
    change nothing. A child forked before TensorFlow's runtime started (gunicorn's workers)
    takes its own share at the fork, the parent handing over its lease slot; forked after, it
    keeps the parent's pools (warned about at the fork), and its enable() re-plans what it can.
    ``TF_AUTOPAR_DISABLE=1`` (the kill switch) makes it change nothing; status() says so.
    ``cooperate``: when other processes of this program (or ranks named in the environment:
    LOCAL_RANK, TF_CONFIG, WEB_CONCURRENCY, ...) share the host, plan for this process's
    share of the cores and bind to it (tf_autopar.coordination).
    ``optimize``: in an inference mode (latency, throughput), a SavedModel loaded through the
    hooks serves its signatures and restored functions from a frozen graph in a session
    planned for the batch its calls carry, once that session is built (in the background) and
    checked against the original path (runtime/fastpath/); ``optimize=False`` or
    ``TF_AUTOPAR_FAST_PATH=0`` keeps TensorFlow's usual path. ``tune_live``: where the fast path
    serves, the plan's neighbours are tried on live calls and the winner kept and remembered;
    ``tune_live=False`` or ``TF_AUTOPAR_TUNE_LIVE=0`` serves the plan as it is. Where the
    ``engines`` extra is installed, OpenVINO and ONNX Runtime compete with TensorFlow's sessions
    on live calls, at the same outputs (``TF_AUTOPAR_ENGINES`` names the ones allowed).
    ``precision="bf16"`` (or ``TF_AUTOPAR_PRECISION=bf16``) lets bf16 engines compete too, on a CPU
    with AVX512_BF16 or AMX, checked against f32 within a looser tolerance (docs/serving.md);
    never on by default.
    """
    switch = kill_switch()
    if switch:  # before anything else: an emergency switch must not depend on the rest working
        return _switched_off(switch)
    batch_given = batch is not None
    batch = _checked(mode, width, batch)  # ValueError for bad input, before anything changes
    precision = choice.checked_precision(precision)
    with STATE.lock:
        if STATE.enabled and STATE.forked_from is None:
            return STATE.snapshot()
        if STATE.enabled:  # a child forked after enable(): drop the parent's binding, take its own share
            _restore()
            STATE.forked_from = None
        t0 = time.perf_counter()
        STATE.pid = os.getpid()
        STATE.mode, STATE.streams, STATE.use_cache, STATE.batch = mode, streams, cache, batch
        STATE.batch_given = batch_given
        STATE.fast_path = bool(optimize) and loaders and mode != "training"
        STATE.tune_live = bool(tune_live)
        STATE.precision = choice.wanted_precision(precision)
        record = STATE.applied = Applied()
        try:
            maybe_fail("enable")
            _apply_process(record, model, width, cooperate)
            STATE.enabled = True
            hooks.install(record, hooks.Wanted(sessions, functions, loaders))
        except Exception as exc:  # fail open: undo everything, TF on its own settings
            _restore()
            fail_open("apply its thread plan", exc)
        STATE.enable_ms = round((time.perf_counter() - t0) * 1e3, 3)
        return STATE.snapshot()


def disable() -> Status:
    """Undo enable(): remove every hook, put back the variables it set and the CPU affinity it
    changed, give back its lease slot. Records stay readable in status().

    TensorFlow's process pools, once started, keep the sizes they started with."""
    with STATE.lock:
        _restore()
        return STATE.snapshot()


def status() -> Status:
    """What was applied where: process pools, each session, each function (data and text)."""
    return STATE.snapshot()


def _switched_off(switch: str) -> Status:
    with STATE.lock:
        if not STATE.disabled_by:
            log.info("tf_autopar: %s: enable() changes nothing; TensorFlow runs with its own settings", switch)
        STATE.disabled_by = switch
        return STATE.snapshot()


def _checked(mode: str, width: int | None, batch: int | None) -> int:
    """The batch a None batch dimension is read as; ValueError naming a bad argument."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if width is not None and (not isinstance(width, int) or width < 1):
        raise ValueError(f"width must be a positive integer, got {width!r}")
    from tf_autopar.graph.dims import typical_batch  # here, not at the top: the kill switch comes first

    return typical_batch(mode, batch)


def _restore() -> None:
    STATE.applied.restore()
    STATE.enabled = False


def _apply_process(record: Applied, model: Any, width: int | None, cooperate: bool) -> None:
    """Plan the process pools from the model given, else the plan cache, else the host; apply
    them before the start, else report them."""
    started = controller.runtime_started()
    try:
        profile, source = model_arg.profile(model, width, started, STATE.use_cache, STATE.batch, STATE.batch_given)
    except (TypeError, ValueError, FileNotFoundError):
        raise
    except Exception as exc:  # analysis trouble: plan for the host alone
        fail_open(f"analyse the model {model!r}", exc)
        profile, source = None, "host (model analysis failed)"
    if cooperate and not started:
        shares.claim(record)
    if profile is None and STATE.use_cache and not started:
        profile, source = _cached_profile(source)
    STATE.process_profile = profile
    plan = plans.plan_for(profile, STATE.mode, width=None, streams=STATE.streams)
    if not started:
        pools.apply_before_start(record, plan, source)
    else:
        pools.report_late(plan, source)


def _cached_profile(source: str) -> tuple[Any, str]:
    """The profile an earlier run of this program stored in the plan cache, else (None, ``source``)."""
    try:
        entry = cache.lookup_program(cache.program_key(), cache.topology_key(STATE.topology()), STATE.mode)
        profile = cached_profile(entry.get("profile")) if entry else None
        if profile is not None:
            return profile, f"cache: {entry.get('name', '?')} ({str(entry.get('fingerprint', ''))[:12]})"
    except Exception as exc:
        fail_open("read the plan cache", exc)
    return None, source
