"""Plan from the user's own model at the moment it is loaded: the usual server's first TF work.

Hooks: ``tf.saved_model.load``, ``keras.models.load_model`` / ``keras.saving.load_model``
(.keras files) and ``keras.layers.TFSMLayer``. Each is wrapped so that, before the original
runs, the model is planned:

- A SavedModel's ``saved_model.pb`` is read with the protobuf classes only (graph/protobufs.py),
  which does not start TensorFlow's runtime; the unknown batch is read as enable()'s batch.
  A .keras file holds no graph: it is analysed once in a child process (its profile cached by
  path, size and mtime), since building it here would start the runtime.
- Runtime not started yet (the load is the program's first TF work): the process pools are
  set from the model's plan before the original load starts the runtime, so the very first
  request runs under it.
- Already started: the plan is recorded, stored in the plan cache under this program (the
  next start applies it in enable(), before any load), and said once.

Restored SavedModel functions are not traced, so the tf.function hook never sees them: this
is the only place a loaded SavedModel is analysed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Sequence

from tf_autopar.planning.graph_plan import cached_profile, profile_from_dict, profile_summary
from tf_autopar.runtime import cache, controller, model_sources, plans, pools, tf_allocator
from tf_autopar.runtime.safety import fail_open, maybe_fail, warn_once
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.runtime.applied import Applied

log = logging.getLogger("tf_autopar.runtime")

PATCH_NAME = "model loading (tf.saved_model.load, keras.models.load_model, keras.layers.TFSMLayer)"
_TF_TARGETS = (
    ("tensorflow.python.saved_model.load", "load"),
    ("tensorflow.saved_model", "load"),
    ("tensorflow._api.v2.saved_model", "load"),
    ("tensorflow._api.v2.compat.v2.saved_model", "load"),
)
_KERAS_TARGETS = (
    ("keras.src.saving.saving_api", "load_model"),
    ("keras.models", "load_model"),
    ("keras.saving", "load_model"),
    ("keras.api.models", "load_model"),
    ("keras.api.saving", "load_model"),
)
_WRAPPED = "__tf_autopar_wrapped__"
_planned: set[str] = set()  # models already planned in this process (real paths)
_ours = threading.local()  # .active while before_load runs: its own loads of the model are not routed


def install(record: Applied) -> None:
    """Wrap the loaders of TensorFlow now, and of Keras if it is imported (else install_keras()
    when it is), through ``record`` (which puts them back at disable())."""
    for module, attr in _TF_TARGETS:
        _wrap(record, module, attr, "SavedModel")
    if "keras" in sys.modules:
        install_keras(record)


def install_keras(record: Applied) -> None:
    for module, attr in _KERAS_TARGETS:
        _wrap(record, module, attr, "Keras")
    layer = getattr(sys.modules.get("keras.layers"), "TFSMLayer", None)
    if isinstance(layer, type):
        _wrap_new(record, layer)


def uninstall() -> None:
    """Forget the models planned, so that a later enable() plans them again."""
    _planned.clear()


def _wrap(record: Applied, module_name: str, attr: str, kind: str) -> None:
    owner = sys.modules.get(module_name)
    original = getattr(owner, attr, None)
    if owner is None or original is None or hasattr(original, _WRAPPED):
        return

    @functools.wraps(original)
    def load(path: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_ours, "active", False):  # the analysis in before_load loads the model itself: not the user's load
            return original(path, *args, **kwargs)
        _ours.active = True
        try:
            before_load(path, kind)
        finally:
            _ours.active = False
        loaded = original(path, *args, **kwargs)
        model_sources.remember(loaded, path)
        _route(loaded, path, kind)
        return loaded

    setattr(load, _WRAPPED, original)
    record.patch(owner, attr, load)


def _wrap_new(record: Applied, cls: type) -> None:
    """TFSMLayer: plan in ``__new__``, since constructing a Keras layer starts the runtime before
    its ``__init__`` loads the SavedModel (``__init__`` itself cannot be wrapped: Keras reads its
    signature for the layer's config)."""
    original = cls.__dict__.get("__new__")
    if original is not None and hasattr(original, _WRAPPED):
        return

    def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
        before_load(args[0] if args else kwargs.get("filepath"), "SavedModel")
        return super(cls, klass).__new__(klass, *args, **kwargs)  # type: ignore[misc]

    setattr(__new__, _WRAPPED, original)
    record.patch(cls, "__new__", __new__)


def before_load(path: Any, kind: str) -> None:
    """Plan for the model at ``path``; never raises into the user's load."""
    if not STATE.enabled or not isinstance(path, (str, os.PathLike)):
        return
    try:
        on_load(os.fspath(path))
    except Exception as exc:  # fail open: the model loads on whatever pools are set
        fail_open(f"plan from the {kind} model being loaded", exc)


def _route(loaded: Any, path: Any, kind: str) -> None:
    """The fast path for what was just loaded (fastpath.py); never raises into the user's load."""
    if not STATE.enabled or not STATE.fast_path or not isinstance(path, (str, os.PathLike)):
        return
    try:
        from tf_autopar.runtime import fastpath  # imported by the first model routed: enable() does not need it

        with STATE.lock:
            STATE.applied.on_restore(
                "fast path", fastpath.unroute_all, "put the routed models back on their original path"
            )
        real = os.path.realpath(os.fspath(path))
        route = fastpath.route if kind == "SavedModel" else fastpath.route_keras
        route(loaded, os.fspath(path), model_sources.path_fingerprint(real))
    except Exception as exc:
        fail_open("route the loaded model to its frozen session", exc)


def _remembered_allocator(fingerprint: str, plan: Any) -> dict[str, str]:
    """TF_CPU_ALLOCATOR_USE_BFC=true when an earlier run's fast path saw malloc refault this model's
    buffers on every call (runtime/tf_allocator.py); {} otherwise or when the cache is off."""
    if not STATE.use_cache:
        return {}
    try:
        entry = cache.lookup_served(fingerprint, cache.host_key(STATE.topology()), STATE.mode)
        return tf_allocator.remembered_env(entry, plan.runtime, controller.user_env())
    except Exception as exc:
        fail_open("read the remembered allocator", exc)
        return {}


def on_load(path: str) -> None:
    real = os.path.realpath(path)
    with STATE.lock:
        if real in _planned or not os.path.exists(real):
            return  # the loader itself reports a missing path
        _planned.add(real)
    maybe_fail("analysis")
    started = controller.runtime_started()
    profile = model_profile(real, STATE.batch if STATE.batch_given else 1, started)
    if profile is None:
        return
    if not STATE.batch_given:
        profile = _at_observed_batch(real, profile, started)
    model_sources.note_path(real, profile.fingerprint)
    source = f"model {path} (loaded)"
    plan = plans.plan_for(profile, STATE.mode, streams=STATE.streams)
    if STATE.use_cache:
        plans.store_plan(profile, plan, os.path.basename(real.rstrip(os.sep)) or real)
    STATE.process_profile = profile
    if not started:
        pools.apply_before_start(STATE.applied, plan, source, _remembered_allocator(profile.fingerprint, plan))
        log.info(
            "planned from %s before TensorFlow started: inter_op=%s intra_op=%s", path, plan.inter_op, plan.intra_op
        )
    else:
        pools.report_late(plan, source)
        running = controller.running_pools()
        if (plan.inter_op, plan.intra_op) != running:
            warn_once(
                f"late-load:{real}",
                f"the model {path} was loaded after TensorFlow's runtime started, so its plan "
                f"(inter_op={plan.inter_op} intra_op={plan.intra_op}) could not replace the running pools "
                f"({running[0]}x{running[1]}). It is cached: the next start of this program applies it when "
                "tf_autopar.enable() runs before the first TensorFlow op. For inference now: "
                "tf_autopar.optimize(model).",
            )


def _at_observed_batch(path: str, at_one: GraphProfile, started: bool) -> GraphProfile:
    """No batch given: the batch the fast path saw this model's calls carry in an earlier run
    (plan cache), else op sizes unknown (dims.for_unknown_batch)."""
    from tf_autopar.graph.dims import for_unknown_batch  # the graph package: at first use (model_arg.py)

    observed = None
    if STATE.use_cache:
        try:
            observed = cache.observed_batch(at_one.fingerprint, cache.host_key(STATE.topology()), STATE.mode)
        except Exception as exc:
            log.debug("observed-batch lookup failed: %s", exc)
    if observed is None:
        return for_unknown_batch(at_one)
    batch, words = observed
    profile = at_one if batch == 1 else model_profile(path, batch, started)
    note = f"the batch is {batch}: {words} in an earlier run of this model (the fast path counts them)"
    return dataclasses.replace(profile, assumptions=tuple(profile.assumptions) + (note,))  # type: ignore[arg-type]


def model_profile(path: str, batch: int | None, started: bool) -> GraphProfile | None:
    """The model's profile at ``batch`` (None: not given, see dims.for_unknown_batch): a
    SavedModel from its protobuf (no runtime start); a .keras file here once TF runs, else in a
    child process (cached by path, size and mtime)."""
    if batch is None:
        from tf_autopar.graph.dims import for_unknown_batch  # the graph package: at first use (model_arg.py)

        at_one = model_profile(path, 1, started)
        return at_one and for_unknown_batch(at_one)
    from tf_autopar.graph import analyze  # the graph package: at first use (model_arg.py)

    if os.path.isdir(path):
        return analyze(path, batch=batch)
    if path.endswith(".keras") and os.path.isfile(path):
        if started:
            return analyze(path, batch=batch)
        st = os.stat(path)
        return child_profile(path, f"keras:{path}:{st.st_size}:{st.st_mtime_ns}:{batch}", batch=batch)
    return None


def child_profile(
    target: str, key: str, use_cache: bool = True, preload: Sequence[str] = (), **options: Any
) -> GraphProfile:
    """``analyze(target, **options)`` in a child process (building a model here would start TF's
    runtime and fix the pools), cached under ``key`` in the plan cache. ``preload``: modules the
    child imports first (the providers of registered model names, graph/named.py). The child is
    measure/'s (its protocol and process handling), imported here only when one is needed: the
    hooks are installed at every program start, and a child is rare."""
    found = cached_profile(cache.lookup_profile(key)) if use_cache else None
    if found is not None:
        return found
    from tf_autopar.measure.analysis import analysis_command
    from tf_autopar.measure.runner import OK, run_child

    env = dict(controller.user_env())
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    log.info("analysing %s in a child process (once; cached afterwards)", target)
    res = run_child(analysis_command(target, options, preload), env, 600.0)
    if res.status != OK or res.payload is None:
        detail = res.reported or res.error or res.stderr_tail.strip().splitlines()[-1:]
        raise RuntimeError(f"analysing {target} failed: {detail}")
    profile = profile_from_dict(res.payload)
    if use_cache:
        cache.store_profile(key, profile_summary(profile))
    return profile
