"""The process pools: apply a plan while TensorFlow's runtime is not started, else report it.

Used by enable() (lifecycle.py), by the loader hooks when a model is loaded (model_loads.py) and
by a forked worker re-planning its own share (fork.py). What is applied goes through the
record (applied.py), so that disable() undoes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from tf_autopar.runtime import controller
from tf_autopar.runtime.safety import warn_once
from tf_autopar.runtime.state import STATE, ProcessRecord

if TYPE_CHECKING:
    from tf_autopar.coordination import Share
    from tf_autopar.planning.plan import ThreadPlan
    from tf_autopar.runtime.applied import Applied


def _binding(plan: ThreadPlan, share: Share | None) -> tuple[int, ...]:
    """The CPUs to bind to: the share's when it is pinned, else a restricted single-instance plan's."""
    if share is not None and share.pin:
        return tuple(share.cpus)
    if share is not None and share.shared_with > 1:
        return ()  # the sharing rule: not pinned inside its CPUs (a plan of one thread would take the first)
    if share is not None and share.source == "even-split":
        return ()  # every worker would bind to the same first cores
    if plan.instances == 1 and plan.cpus:
        return tuple(plan.cpus[0])
    return ()


def apply_before_start(
    record: Applied, plan: ThreadPlan, source: str, extra_env: Mapping[str, str] | None = None
) -> None:
    """Set the process pools (and binding) for ``plan`` while TensorFlow's runtime is not started;
    ``extra_env``: other variables for the start (the allocator a model's cache entry asks for)."""
    share = record.share
    tf_default = controller.default_pool_size()  # what TensorFlow would pick, before any binding narrows it
    cpus = _binding(plan, share)
    bound = cpus if cpus and (record.bind(cpus) or controller.bound_to(cpus)) else ()
    env = plan.to_env()
    env.setdefault(controller.OVERRIDE_VAR, "1")  # per-session intra-op pools (eager path unaffected)
    for key, value in (extra_env or {}).items():
        env.setdefault(key, value)
    api_inter, api_intra = controller.api_pools()
    applied, kept = record.set_env(env, controller.user_env())
    for name, value in (("tf.config.threading inter_op", api_inter), ("tf.config.threading intra_op", api_intra)):
        if value:  # the user's API call wins over our variables at start
            kept[name] = str(value)
    controller.note_start_settings()
    running = controller.running_pools()
    STATE.process = ProcessRecord(
        phase="before-start",
        planned_inter=plan.inter_op,
        planned_intra=plan.intra_op,
        applied=applied,
        kept_user=kept,
        running_inter=running[0],
        running_intra=running[1],
        per_session_intra=controller.per_session_intra(),
        source=source,
        explain=plan.explain(),
        share=share.to_dict() if share is not None else None,
        bound_cpus=bound,
        tf_default=tf_default,
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
        phase="after-start",
        planned_inter=plan.inter_op,
        planned_intra=plan.intra_op,
        not_applied=tuple(not_applied),
        running_inter=running[0],
        running_intra=running[1],
        per_session_intra=per_session,
        source=source,
        explain=plan.explain(),
        tf_default=controller.default_pool_size(),
        origin=plan_origin(plan, source),
    )
    if not_applied:
        hooks = []
        if controller.tf_loaded():
            hooks = ["per-session inter-op pools for new Sessions", "tf.function analysis at first trace"]
        warn_once(
            "late-enable",
            "tf_autopar.enable() ran after TensorFlow's runtime started. Applied: "
            + (", ".join(hooks) or "nothing yet")
            + ". Not applied: "
            + "; ".join(not_applied)
            + ". Fix: call tf_autopar.enable() before the first TensorFlow op (after `import tensorflow` is fine), "
            "or start the program with `tf-autopar run -- python ...`, or use tf_autopar.optimize(model) for inference.",
        )
