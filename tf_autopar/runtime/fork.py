"""What a fork does to enable()'s state (``os.register_at_fork``).

A parent forking before TensorFlow's runtime started is taken for a master (gunicorn's, a
fork-started pool's): it hands its lease slot to the workers it forks, and each worker, at the
fork, drops the parent's binding and variables, claims its own share and re-plans for it
(docs/design.md, "Fork"). Forked after the start, a child keeps the parent's pools (they
cannot change in a child), told so once.
"""

from __future__ import annotations

import logging
import os
import threading

from tf_autopar.coordination import lease
from tf_autopar.runtime import controller, plans, share as shares
from tf_autopar.runtime.applied import AFFINITY, ENV, SHARE
from tf_autopar.runtime.pools import apply_before_start
from tf_autopar.runtime.safety import fail_open, warn_once
from tf_autopar.runtime.state import STATE

log = logging.getLogger("tf_autopar.runtime")

#: whether the last fork of this process was made by its main thread (set before each fork, read
#: in the child). A server's master forks its workers there; a library forking a helper from one
#: of its own threads (OpenVINO's telemetry, from a thread pool, at every convert_model) makes a
#: child that runs no TensorFlow, and the warning below was noise to whoever called the library.
_forked_by_main_thread = True

# shares a forked worker claims anew: from the lease (a count, a rendezvous, or alone). Ranks
# from the environment are the same in the child, and an even split has nothing to re-claim.
_RECLAIMED_AT_FORK = ("lease", "single", "rendezvous")


def _reclaims_at_fork() -> bool:
    share = STATE.applied.share
    return (
        STATE.enabled and share is not None and share.source in _RECLAIMED_AT_FORK and not controller.runtime_started()
    )


def before_fork() -> None:
    """In a master forking its workers before TensorFlow started: its lease slot goes to them."""
    global _forked_by_main_thread
    _forked_by_main_thread = threading.current_thread() is threading.main_thread()
    try:
        share = STATE.applied.share
        if STATE.pid == os.getpid() and _reclaims_at_fork() and share is not None and share.lease_held:
            share.release()
            log.info(
                "tf_autopar: pid %s forks before TensorFlow started: its lease slot goes to its workers", os.getpid()
            )
    except Exception as exc:  # never break the user's fork
        log.debug("tf_autopar: before-fork handler failed", exc_info=exc)


def after_fork_in_child() -> None:
    """In a child forked after enable(): before TensorFlow started in the parent, take this
    worker's own share of the host (drop the parent's binding, claim a slot, re-plan, re-bind);
    after, say once that the child keeps the parent's pools (they cannot change in a child)."""
    STATE.lock = threading.RLock()  # another thread may have held them when the process forked
    STATE.topology_lock = threading.Lock()
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
    share = STATE.applied.share
    STATE.applied.forget_share()  # the parent's slot: not this child's to give back
    message = _kept_message(parent, started, share is not None)
    if _forked_by_main_thread:
        warn_once("forked-after-enable", message)
    else:  # a library's helper process: said where logging is set up, not on every user's stderr
        log.info(
            "%s (forked by a thread other than the parent's main thread: a library's helper, most likely)", message
        )


def _kept_message(parent: int, started: bool, shared: bool) -> str:
    bound = STATE.process.bound_cpus if STATE.process is not None else ()
    binding = f" and its binding to CPUs {','.join(map(str, bound))}" if bound else ""
    sized = " (sized for the parent's share, not this worker's)" if shared else ""
    if started:
        return (
            f"tf_autopar: this process was forked from pid {parent} after TensorFlow's runtime started there; "
            f"it keeps the parent's thread pools{binding}, which cannot change in a forked child{sized}. "
            "Fork the workers before the parent's first TensorFlow op (gunicorn: load the model in "
            "post_fork, not with --preload), or start them with spawn."
        )
    return (
        f"tf_autopar: this process was forked from pid {parent} after tf_autopar.enable(); it keeps "
        f"the parent's thread plan{binding}{sized}. Call tf_autopar.enable() in the child before its first "
        "TensorFlow op to plan for its own share, or call enable() after forking."
    )


def _replan_in_child(parent: int) -> None:
    """The child's own share: the parent's binding and variables undone, a slot of its own, the
    parent's profile planned for that share and applied before TensorFlow starts here."""
    lease.forget_in_child()  # the parent's slot descriptors, before this child claims its own
    record = STATE.applied
    record.forget_share()
    record.restore(kinds=(ENV, AFFINITY, SHARE))  # the hooks stay: this child runs the same program
    STATE.pid = os.getpid()
    source = STATE.process.source if STATE.process is not None else "host"
    share = shares.claim(record)
    plan = plans.plan_for(STATE.process_profile, STATE.mode, width=None, streams=STATE.streams)
    apply_before_start(record, plan, source)
    log.info(
        "tf_autopar: forked from pid %s before TensorFlow started: planned for this worker's own share (%s)",
        parent,
        share.note if share is not None else "the whole host",
    )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=before_fork, after_in_child=after_fork_in_child)
