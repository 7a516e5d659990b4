"""Plan from the user's own model at the moment it is loaded: the usual server's first TF work.

Hooks: ``tf.saved_model.load``, ``keras.models.load_model`` / ``keras.saving.load_model``
(.keras files) and ``keras.layers.TFSMLayer``. Each is wrapped so that, before the original
runs, the model is planned:

- A SavedModel's ``saved_model.pb`` is read with the protobuf classes only (graph/loaders.py),
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

import functools
import logging
import os
import sys
import weakref
from typing import TYPE_CHECKING, Any, Sequence

from tf_autopar.runtime import cache, controller, core
from tf_autopar.runtime.safety import fail_open, maybe_fail, warn_once
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile

log = logging.getLogger("tf_autopar.runtime")

PATCH_NAME = "model loading (tf.saved_model.load, keras.models.load_model, keras.layers.TFSMLayer)"
_TF_TARGETS = (("tensorflow.python.saved_model.load", "load"), ("tensorflow.saved_model", "load"),
               ("tensorflow._api.v2.saved_model", "load"), ("tensorflow._api.v2.compat.v2.saved_model", "load"))
_KERAS_TARGETS = (("keras.src.saving.saving_api", "load_model"), ("keras.models", "load_model"),
                  ("keras.saving", "load_model"), ("keras.api.models", "load_model"),
                  ("keras.api.saving", "load_model"))
_WRAPPED = "__tf_autopar_wrapped__"
_patched: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
_planned: set[str] = set()  # models already planned in this process (real paths)
_fingerprints: dict[str, str] = {}  # real path -> the fingerprint its plan (and a tune) is keyed by
_sources: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()  # loaded object -> fingerprint
_installed = False


def installed() -> bool:
    return _installed


def install() -> None:
    """Wrap the loaders of TensorFlow now and of Keras now or when it is imported."""
    global _installed
    for module, attr in _TF_TARGETS:
        _wrap(module, attr, "SavedModel")
    if "keras" in sys.modules:
        install_keras()
    _installed = True


def install_keras() -> None:
    for module, attr in _KERAS_TARGETS:
        _wrap(module, attr, "Keras")
    layer = getattr(sys.modules.get("keras.layers"), "TFSMLayer", None)
    if isinstance(layer, type):
        _wrap_new(layer)


def uninstall() -> None:
    global _installed
    while _patched:
        owner, attr, original = _patched.pop()
        current = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        if current is None or getattr(current, _WRAPPED, "") is not original:
            continue  # someone else replaced it since: leave theirs
        if original is None:
            delattr(owner, attr)  # the class had inherited it
        else:
            setattr(owner, attr, original)
    _planned.clear()
    _installed = False


def _wrap(module_name: str, attr: str, kind: str) -> None:
    owner = sys.modules.get(module_name)
    original = getattr(owner, attr, None)
    if owner is None or original is None or hasattr(original, _WRAPPED):
        return

    @functools.wraps(original)
    def load(path: Any, *args: Any, **kwargs: Any) -> Any:
        before_load(path, kind)
        loaded = original(path, *args, **kwargs)
        _remember(loaded, path)
        _route(loaded, path, kind)
        return loaded

    setattr(load, _WRAPPED, original)
    setattr(owner, attr, load)
    _patched.append((owner, attr, original))


def _wrap_new(cls: type) -> None:
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
    cls.__new__ = __new__  # type: ignore[method-assign]
    _patched.append((cls, "__new__", original))


def before_load(path: Any, kind: str) -> None:
    """Plan for the model at ``path``; never raises into the user's load."""
    if not STATE.enabled or not isinstance(path, (str, os.PathLike)):
        return
    try:
        on_load(os.fspath(path))
    except Exception as exc:  # fail open: the model loads on whatever pools are set
        fail_open(f"plan from the {kind} model being loaded", exc)


def _remember(loaded: Any, path: Any) -> None:
    """Which model file ``loaded`` came from, so optimize(loaded) finds what `tune` measured for it."""
    try:
        fingerprint = _fingerprints.get(os.path.realpath(os.fspath(path)))
        if fingerprint:
            _sources[loaded] = fingerprint
    except TypeError:  # not weak-referenceable, or not a path: optimize() plans by the rule
        pass


def _route(loaded: Any, path: Any, kind: str) -> None:
    """The fast path for what was just loaded (fastpath.py); never raises into the user's load."""
    if not STATE.enabled or not STATE.fast_path or not isinstance(path, (str, os.PathLike)):
        return
    try:
        from tf_autopar.runtime import fastpath

        real = os.path.realpath(os.fspath(path))
        route = fastpath.route if kind == "SavedModel" else fastpath.route_keras
        route(loaded, os.fspath(path), _fingerprints.get(real))
    except Exception as exc:
        fail_open("route the loaded model to its frozen session", exc)


def source_fingerprint(loaded: Any) -> str | None:
    """The fingerprint of the model file ``loaded`` was loaded from after enable(), if known."""
    try:
        return _sources.get(loaded)
    except TypeError:
        return None


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
    _fingerprints[real] = profile.fingerprint
    source = f"model {path} (loaded)"
    plan = core.plan_for(profile, STATE.mode, streams=STATE.streams)
    if STATE.use_cache:
        try:
            cache.store(profile.fingerprint, cache.topology_key(core.topology()), STATE.mode, plan.to_dict(),
                        core.profile_summary(profile), os.path.basename(real.rstrip(os.sep)) or real,
                        program=cache.program_key())
        except Exception as exc:
            fail_open("write the plan cache", exc)
    from tf_autopar import runtime

    STATE.process_profile = profile
    if not started:
        runtime.apply_before_start(plan, source, STATE.share)
        log.info("planned from %s before TensorFlow started: inter_op=%s intra_op=%s", path, plan.inter_op,
                 plan.intra_op)
    else:
        runtime.report_late(plan, source)
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
    import dataclasses

    from tf_autopar.graph.dims import for_unknown_batch

    observed = None
    if STATE.use_cache:
        try:
            observed = cache.observed_batch(at_one.fingerprint, cache.host_key(core.topology()), STATE.mode)
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
        from tf_autopar.graph.dims import for_unknown_batch

        at_one = model_profile(path, 1, started)
        return at_one and for_unknown_batch(at_one)
    from tf_autopar.graph import analyze

    if os.path.isdir(path):
        return analyze(path, batch=batch)
    if path.endswith(".keras") and os.path.isfile(path):
        if started:
            return analyze(path, batch=batch)
        st = os.stat(path)
        return child_profile(path, f"keras:{path}:{st.st_size}:{st.st_mtime_ns}:{batch}", batch=batch)
    return None


def child_profile(target: str, key: str, use_cache: bool = True, preload: Sequence[str] = (),
                  **options: Any) -> GraphProfile:
    """``analyze(target, **options)`` in a child process (building a model here would start TF's
    runtime and fix the pools), cached under ``key`` in the plan cache. ``preload``: modules the
    child imports first (the providers of registered model names, graph/named.py). The child is
    measure/'s (its protocol and process handling), imported here only when one is needed: the
    hooks are installed at every program start, and a child is rare."""
    found = core.cached_profile(cache.lookup_profile(key)) if use_cache else None
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
    profile = core.profile_from_dict(res.payload)
    if use_cache:
        cache.store_profile(key, core.profile_summary(profile))
    return profile

