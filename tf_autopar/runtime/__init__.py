"""Apply thread plans inside a running program: enable(), disable(), status(), optimize().

Which path applies when (see also docs/design.md):
- enable() before TensorFlow's runtime starts (before the first op or Session; after
  ``import tensorflow`` is fine): the process pools are set through TF_NUM_* variables,
  from the model given, else the plan cache for this program, else the host alone;
  TF_OVERRIDE_GLOBAL_THREADPOOL=1 is set so that later sessions own their intra-op pools.
- every tf.compat.v1.Session gets a ConfigProto planned for its own graph (sessions.py).
- tf.function / Keras: each function is analysed at its first trace (functions.py); when its
  plan differs from the fixed process pools, use optimize(), and the next start picks the
  plan from the cache.
- enable() after the start: hooks still apply; the process pools cannot change (one warning).
Every entry point fails open: an internal error leaves TensorFlow on its own settings.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import cache, controller, core
from tf_autopar.runtime.safety import fail_open, maybe_fail, warn_once
from tf_autopar.runtime.state import STATE, ProcessRecord, Status

if TYPE_CHECKING:  # imported where used: enable() must stay cheap
    from tf_autopar.coordination import Share
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.planning.plan import ThreadPlan

log = logging.getLogger("tf_autopar.runtime")
MODES = ("latency", "throughput", "training")

__all__ = ["FunctionRecord", "ProcessRecord", "SessionRecord", "Status", "disable", "enable", "optimize", "status"]


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
    checked against the original path (runtime/fastpath.py); ``optimize=False`` or
    ``TF_AUTOPAR_FAST_PATH=0`` keeps TensorFlow's usual path. ``tune_live``: where the fast path
    serves, the plan's neighbours are tried on live calls and the winner kept and remembered;
    ``tune_live=False`` or ``TF_AUTOPAR_TUNE_LIVE=0`` serves the plan as it is.
    """
    switch = kill_switch()
    if switch:  # before anything else: an emergency switch must not depend on the rest working
        with STATE.lock:
            if not STATE.disabled_by:
                log.info("tf_autopar: %s: enable() changes nothing; TensorFlow runs with its own settings", switch)
            STATE.disabled_by = switch
            return STATE.snapshot()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if width is not None and (not isinstance(width, int) or width < 1):
        raise ValueError(f"width must be a positive integer, got {width!r}")
    from tf_autopar.graph.dims import typical_batch

    batch_given = batch is not None
    batch = typical_batch(mode, batch)  # ValueError for a bad batch, before anything changes
    with STATE.lock:
        if STATE.enabled and STATE.forked_from is None:
            return STATE.snapshot()
        if STATE.enabled:  # a child forked after enable(): drop the parent's binding, take its own share
            _undo()
            STATE.forked_from = None
        STATE.pid = os.getpid()
        t0 = time.perf_counter()
        STATE.mode, STATE.streams, STATE.use_cache, STATE.batch = mode, streams, cache, batch
        STATE.batch_given = batch_given
        STATE.fast_path = bool(optimize) and loaders and mode != "training"
        STATE.tune_live = bool(tune_live)
        try:
            maybe_fail("enable")
            _apply_process(model, mode, width, streams, cache, cooperate)
            STATE.enabled = True
            _install(sessions, functions, loaders)
        except Exception as exc:  # fail open: undo everything, TF on its own settings
            _undo()
            fail_open("apply its thread plan", exc)
        STATE.enable_ms = round((time.perf_counter() - t0) * 1e3, 3)
        return STATE.snapshot()


DISABLE_VAR = "TF_AUTOPAR_DISABLE"
# shares a forked worker claims anew: from the lease (a count, a rendezvous, or alone). Ranks
# from the environment are the same in the child, and an even split has nothing to re-claim.
_RECLAIMED_AT_FORK = ("lease", "single", "rendezvous")


def kill_switch() -> str:
    """``"TF_AUTOPAR_DISABLE=<value>"`` when the kill switch is on (for A/B runs and emergencies), else ""."""
    value = os.environ.get(DISABLE_VAR, "").strip()
    return f"{DISABLE_VAR}={value}" if value.lower() in ("1", "true", "yes", "on") else ""


def _reclaims_at_fork() -> bool:
    share = STATE.share
    return (STATE.enabled and share is not None and share.source in _RECLAIMED_AT_FORK
            and not controller.runtime_started())


def _before_fork() -> None:
    """A parent forking before TensorFlow's runtime started is taken for a master (gunicorn's, a
    fork-started pool's): it hands its lease slot to the workers it forks, which claim their own
    shares (``_after_fork_in_child``), so that the workers, not the master, split the host."""
    try:
        share = STATE.share
        if STATE.pid == os.getpid() and _reclaims_at_fork() and share is not None and share.lease_held:
            share.release()
            log.info("tf_autopar: pid %s forks before TensorFlow started: its lease slot goes to its workers",
                     os.getpid())
    except Exception as exc:  # never break the user's fork
        log.debug("tf_autopar: before-fork handler failed", exc_info=exc)


def _after_fork_in_child() -> None:
    """In a child forked after enable(): before TensorFlow started in the parent, take this
    worker's own share of the host (drop the parent's binding, claim a slot, re-plan, re-bind);
    after, say once that the child keeps the parent's pools (they cannot change in a child)."""
    import threading

    STATE.lock = threading.RLock()  # another thread may have held it when the process forked
    if not STATE.enabled or STATE.pid == os.getpid():
        return
    parent = STATE.pid
    started = controller.runtime_started()
    if _reclaims_at_fork():
        try:
            _replan_in_child(parent)
            return
        except Exception as exc:
            fail_open("plan for this forked worker's own share", exc)
    STATE.forked_from = parent
    share = STATE.share
    STATE.share = None
    bound = STATE.process.bound_cpus if STATE.process is not None else ()
    binding = f" and its binding to CPUs {','.join(map(str, bound))}" if bound else ""
    if started:
        message = (f"tf_autopar: this process was forked from pid {parent} after TensorFlow's runtime started there; "
                   f"it keeps the parent's thread pools{binding}, which cannot change in a forked child"
                   + (" (sized for the parent's share, not this worker's)" if share is not None else "")
                   + ". Fork the workers before the parent's first TensorFlow op (gunicorn: load the model in "
                   "post_fork, not with --preload), or start them with spawn.")
    else:
        message = (f"tf_autopar: this process was forked from pid {parent} after tf_autopar.enable(); it keeps "
                   f"the parent's thread plan{binding}"
                   + (" (sized for the parent's share, not this worker's)" if share is not None else "")
                   + ". Call tf_autopar.enable() in the child before its first TensorFlow op to plan for its own "
                   "share, or call enable() after forking.")
    warn_once("forked-after-enable", message)


def _replan_in_child(parent: int) -> None:
    """The child's own share: the parent's binding and variables undone, a slot of its own, the
    parent's profile planned for that share and applied before TensorFlow starts here."""
    from tf_autopar.coordination import lease

    lease._forget_in_child()  # the parent's slot descriptors, before this child claims its own
    STATE.share = None
    controller.restore_affinity()
    controller.restore_env()
    core.use_share(None)
    STATE.pid = os.getpid()
    source = STATE.process.source if STATE.process is not None else "host"
    share = _claim_share()
    STATE.share = share
    plan = core.plan_for(STATE.process_profile, STATE.mode, width=None, streams=STATE.streams)
    apply_before_start(plan, source, share)
    log.info("tf_autopar: forked from pid %s before TensorFlow started: planned for this worker's own share (%s)",
             parent, share.note if share is not None else "the whole host")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def disable() -> Status:
    """Undo enable(): remove every hook, put back the variables it set and the CPU affinity it
    changed, give back its lease slot. Records stay readable in status().

    TensorFlow's process pools, once started, keep the sizes they started with."""
    with STATE.lock:
        _undo()
        return STATE.snapshot()


def status() -> Status:
    """What was applied where: process pools, each session, each function (data and text)."""
    return STATE.snapshot()


def optimize(fn_or_model: Any, *, mode: str = "latency", input_signature: Any = None,
             streams: int | None = None, signature: str | None = None) -> Any:
    """A callable running the model's frozen inference graph in a session planned for it.

    For when the process pools are already fixed and the model's plan differs (see status()).
    Takes a Keras model (also from ``keras.models.load_model``), a SavedModel from
    ``tf.saved_model.load`` (its ``serving_default``, or ``signature="name"``), a signature
    ConcreteFunction, a tf.function or a callable; call the result as you would call the model
    (signatures: inputs by keyword, dict of numpy out). Outputs match the model's traced call
    (bit for bit for Keras models). Writes to the model's variables (assign, fit, restore) are
    watched, and the next call re-freezes, so outputs are never stale; ``.refresh()`` for writes
    the watch cannot see. ``mode="throughput"``: one session per planned stream (``streams`` to
    choose how many); concurrent callers run on separate streams. Thread-safe.
    """
    from tf_autopar.runtime.frozen import optimize as _optimize

    return _optimize(fn_or_model, mode=mode, input_signature=input_signature, streams=streams, signature=signature)


# ------------------------------------------------------------------------------ internals


def _undo() -> None:
    from tf_autopar.runtime import functions as fn_hooks, model_loads, sessions as session_hooks

    fastpath = sys.modules.get("tf_autopar.runtime.fastpath")
    if fastpath is not None:
        try:
            fastpath.unroute_all()
        except Exception as exc:
            fail_open("put the routed models back on their original path", exc)
    for mod in (session_hooks, fn_hooks, model_loads):
        try:
            mod.uninstall()
        except Exception as exc:  # a hook we cannot remove must not break the caller
            fail_open("remove a hook", exc)
    controller.restore_env()
    controller.restore_affinity()
    if STATE.share is not None:  # the slot goes back: a later enable() must not count it as a peer
        STATE.share.release()
        STATE.share = None
    fn_hooks.reset_seen()
    STATE.enabled = False
    STATE.patches = []


def _install(sessions: bool, functions: bool, loaders: bool = True) -> None:
    """Install the hooks now if TensorFlow (and Keras) is imported, else when it is (import hook)."""
    if not (sessions or functions or loaders):
        return
    if controller.tf_loaded() and "tensorflow.python.client.session" in sys.modules:
        _install_now(sessions, functions, loaders)
    else:
        _DeferredInstall.arm("tensorflow")
    if loaders and "keras" not in sys.modules:
        _DeferredInstall.arm("keras")
    _DeferredInstall.wanted = (sessions, functions, loaders)


def _install_now(sessions: bool, functions: bool, loaders: bool = True) -> None:
    from tf_autopar.runtime import functions as fn_hooks, model_loads, sessions as session_hooks

    for wanted, mod in ((sessions, session_hooks), (functions, fn_hooks), (loaders, model_loads)):
        if not wanted or mod.installed():
            continue
        try:
            mod.install()
            STATE.patches.append(mod.PATCH_NAME)
        except Exception as exc:
            fail_open(f"install the hook for {mod.PATCH_NAME}", exc)


class _DeferredInstall:
    """A meta-path finder that installs the hooks right after ``tensorflow`` (and ``keras``,
    for its model loaders) is imported.

    Keeps enable() before ``import tensorflow`` cheap (no TF import) while still catching the
    first Session and the first model load. It only watches for those module names and
    removes itself once both were seen.
    """

    wanted = (False, False, False)
    watching: set[str] = set()

    @classmethod
    def arm(cls, name: str) -> None:
        if not cls.watching:
            sys.meta_path.insert(0, cls)  # type: ignore[arg-type]
        cls.watching.add(name)

    @classmethod
    def disarm(cls, name: str | None = None) -> None:
        if name is None:
            cls.watching.clear()
        else:
            cls.watching.discard(name)
        if not cls.watching:
            try:
                sys.meta_path.remove(cls)  # type: ignore[arg-type]
            except ValueError:
                pass

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in cls.watching:
            return None
        cls.disarm(name)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: Any) -> None:
            original_exec(module)
            if STATE.enabled:
                try:
                    with STATE.lock:
                        if name == "tensorflow":
                            _install_now(*cls.wanted)
                        elif cls.wanted[2]:
                            from tf_autopar.runtime import model_loads

                            if model_loads.installed():
                                model_loads.install_keras()
                except Exception as exc:
                    fail_open(f"install its {name} hooks", exc)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _model_profile(model: Any, width: int | None, started: bool, use_cache: bool) -> tuple[GraphProfile | None, str]:
    if width is None and model is None:
        return None, "host"  # no import of the graph package: keeps enable() cheap
    from tf_autopar.graph.profile import GraphProfile

    if width is not None:
        return GraphProfile.from_width(width), f"width {width}"
    if isinstance(model, bool):
        raise TypeError("model must be a path, a workload name, a width or a model object, not a bool")
    if isinstance(model, int):
        return GraphProfile.from_width(model), f"width {model}"
    if isinstance(model, GraphProfile):
        return model, model.source or "profile"
    from tf_autopar.graph import analyze

    maybe_fail("analysis")
    batch = STATE.batch
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if os.path.exists(text):
            from tf_autopar.runtime.model_loads import model_profile

            profile = model_profile(os.path.realpath(text), batch if STATE.batch_given else None, started)
            if profile is None:  # a graph file
                profile = analyze(text, batch=batch)
            return profile, f"model {text}"
        if not started:
            return _workload_profile(text, use_cache), f"workload {text}"
    return analyze(model, batch=batch), f"model {type(model).__name__}"


def _workload_profile(name: str, use_cache: bool) -> GraphProfile:
    """A registered model name's profile (graph/named.py) without starting TF here: building the
    model would fix the pools. Analysed once in a child process, then read from the plan cache."""
    from tf_autopar.graph import named
    from tf_autopar.runtime.model_loads import child_profile

    if named.find(name) is None:
        raise named.unknown(name)
    return child_profile(name, f"workload:{name}:tiny", use_cache, preload=named.modules())


def _claim_share() -> Share | None:
    """This process's share of the host, or None (alone, or coordination failed: fail open)."""
    try:
        from tf_autopar.coordination import claim_share

        share = claim_share(core.host_topology())
    except Exception as exc:
        fail_open("coordinate with the other processes on this host", exc)
        return None
    core.use_share(share.topology(core.host_topology()))
    return share


def _apply_process(
    model: Any, mode: str, width: int | None, streams: int | None, use_cache: bool, cooperate: bool = True
) -> None:
    started = controller.runtime_started()
    try:
        profile, source = _model_profile(model, width, started, use_cache)
    except (TypeError, ValueError, FileNotFoundError):
        raise
    except Exception as exc:  # analysis trouble: plan for the host alone
        fail_open(f"analyse the model {model!r}", exc)
        profile, source = None, "host (model analysis failed)"
    share = _claim_share() if cooperate and not started else None
    STATE.share = share
    topo = core.topology()
    if profile is None and use_cache and not started:
        try:
            entry = cache.lookup_program(cache.program_key(), cache.topology_key(topo), mode)
            profile = core.cached_profile(entry.get("profile")) if entry else None
            if profile is not None:
                source = f"cache: {entry.get('name', '?')} ({str(entry.get('fingerprint', ''))[:12]})"
        except Exception as exc:
            fail_open("read the plan cache", exc)
    STATE.process_profile = profile
    plan = core.plan_for(profile, mode, width=None, streams=streams)
    if not started:
        apply_before_start(plan, source, share)
    else:
        report_late(plan, source)


def _binding(plan: ThreadPlan, share: Share | None) -> tuple[int, ...]:
    """The CPUs to bind to: the share's when it is pinned, else a restricted single-instance plan's."""
    if share is not None and share.pin:
        return tuple(share.cpus)
    if share is not None and share.source == "even-split":
        return ()  # every worker would bind to the same first cores
    if plan.instances == 1 and plan.cpus:
        return tuple(plan.cpus[0])
    return ()


def apply_before_start(plan: ThreadPlan, source: str, share: Share | None = None) -> None:
    """Set the process pools (and binding) for ``plan`` while TensorFlow's runtime is not started."""
    tf_default = controller.default_pool_size()  # what TensorFlow would pick, before any binding narrows it
    cpus = _binding(plan, share)
    bound = cpus if cpus and (controller.bind(cpus) or controller.bound_to(cpus)) else ()
    env = plan.to_env()
    env.setdefault(controller.OVERRIDE_VAR, "1")  # per-session intra-op pools (eager path unaffected)
    api_inter, api_intra = controller.api_pools()
    applied, kept = controller.set_env(env)
    kept = {k: v for k, v in kept.items()}
    for name, value in (("tf.config.threading inter_op", api_inter), ("tf.config.threading intra_op", api_intra)):
        if value:  # the user's API call wins over our variables at start
            kept[name] = str(value)
    controller.note_start_settings()
    running = controller.running_pools()
    STATE.process = ProcessRecord(
        phase="before-start", planned_inter=plan.inter_op, planned_intra=plan.intra_op,
        applied=applied, kept_user=kept, running_inter=running[0], running_intra=running[1],
        per_session_intra=controller.per_session_intra(), source=source, explain=plan.explain(),
        share=share.to_dict() if share is not None else None, bound_cpus=bound, tf_default=tf_default,
        origin=plan_origin(plan, source),
    )


def plan_origin(plan: ThreadPlan, source: str) -> str:
    """Where the pools' numbers came from, in a user's words (status().text()); "" for the host
    alone (the plan's source says so already)."""
    setting = plan.settings.get("inter_op")
    if source.startswith("host"):
        return ""
    if setting is not None and setting.source == "tuned":
        return f"measured by `tf-autopar tune` on this host ({setting.reason})"
    if setting is not None and setting.source == "user":
        return "yours (kept)"
    return "the rule (model width and op sizes; `tf-autopar tune` measures instead)"


def report_late(plan: ThreadPlan, source: str) -> None:
    """Record ``plan`` for a runtime already started: what could not be applied, said once."""
    running = controller.running_pools()
    not_applied = []
    if (plan.inter_op, plan.intra_op) != running:
        not_applied.append(
            f"process pools stay inter_op={running[0]} intra_op={running[1]} (planned {plan.inter_op}x{plan.intra_op}): "
            "TensorFlow fixes them when its runtime starts"
        )
    per_session = controller.per_session_intra()
    if not per_session:
        not_applied.append("per-session intra-op pools (TF_OVERRIDE_GLOBAL_THREADPOOL must be set before start)")
    STATE.process = ProcessRecord(
        phase="after-start", planned_inter=plan.inter_op, planned_intra=plan.intra_op,
        not_applied=tuple(not_applied), running_inter=running[0], running_intra=running[1],
        per_session_intra=per_session, source=source, explain=plan.explain(),
        tf_default=controller.default_pool_size(), origin=plan_origin(plan, source),
    )
    if not_applied:
        hooks = []
        if controller.tf_loaded():
            hooks = ["per-session inter-op pools for new Sessions", "tf.function analysis at first trace"]
        warn_once(
            "late-enable",
            "tf_autopar.enable() ran after TensorFlow's runtime started. Applied: "
            + (", ".join(hooks) or "nothing yet")
            + ". Not applied: " + "; ".join(not_applied)
            + ". Fix: call tf_autopar.enable() before the first TensorFlow op (after `import tensorflow` is fine), "
            "or start the program with `tf-autopar run -- python ...`, or use tf_autopar.optimize(model) for inference.",
        )


def __getattr__(name: str) -> Any:
    if name in ("SessionRecord", "FunctionRecord"):  # defined on first use (see records.py)
        from tf_autopar.runtime import records

        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
