"""Follow CPU limits that change while the process runs: quota (cpu.max, cpu.cfs_quota_us), cpuset, affinity.

Why: since Kubernetes 1.33 a pod's CPU limit can be resized in place, and operators rewrite
quotas and cpusets under running servers; pools sized for the old limits are then throttled
(a smaller quota) or leave CPUs idle (a larger one). What can follow here:

- the plans made from now on: the host topology (STATE, runtime/state.py) takes the new quota and
  budget (the same cores), or is detected again when the CPUs changed;
- this process's share of the host (coordination/reshare.py: same worker, same lease slot,
  cut again; re-bound when it is pinned and its CPUs moved);
- the fast path's sessions: each listener (runtime/fastpath/roster.py registers one) queues new
  sessions for the new limits on its builder thread, swapped in when ready.

What cannot: TensorFlow's process pools are fixed at its start; status() says so ("process
pools stay at ...; the quota is now ...").

Cost: a daemon thread wakes once per CHECK_S (1 s) and takes the limits through the topology
readers (topology/limits.py): a few reads of files of a few bytes, of the groups found once at
start, and one sched_getaffinity per thread (the process's CPUs are its threads' union:
topology/cpus.py), about 0.1 ms. No request waits for it; nothing is read on the request path.
Each change is logged once. The thread ends when tf_autopar is disabled.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Callable

from tf_autopar.coordination import apply_affinity
from tf_autopar.coordination.reshare import reshare
from tf_autopar.runtime import state
from tf_autopar.runtime.state import STATE
from tf_autopar.runtime.records import LimitsRecord
from tf_autopar.runtime.safety import fail_open
from tf_autopar.topology import detect_topology
from tf_autopar.topology.limits import Limits, LimitsReader, follow, what_changed
from tf_autopar.topology.model import Topology

log = logging.getLogger("tf_autopar.runtime")

CHECK_S = 1.0  # at most one check of the limits per second


class QuotaWatch:
    """The daemon thread that checks the limits; listeners run on it (they must only queue work)."""

    def __init__(self, reader: LimitsReader | None = None, check_s: float = CHECK_S) -> None:
        self.reader = reader or LimitsReader()
        self.check_s = check_s
        self.baseline: Limits = self.reader.read()
        self.listeners: list[Callable[[], None]] = []
        self.ticks: list[Callable[[], None]] = []  # run at every check (the fast path's memory watch)
        self.record: LimitsRecord | None = None
        self.checks = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="tf_autopar-limits", daemon=True)

    def _loop(self) -> None:
        while not self.stopping.wait(self.check_s):
            if not STATE.enabled:
                return
            try:
                self.check()
            except Exception as exc:  # fail open: the plans stay as they are
                fail_open("follow a change of the CPU limits", exc)
            for tick in list(self.ticks):
                try:
                    tick()
                except Exception as exc:  # fail open: that watch stops mattering, nothing else
                    fail_open("watch the memory limit", exc)

    def check(self) -> str:
        """One look at the limits; on a change, re-plan what can follow. What changed, or ""."""
        self.checks += 1
        new = self.reader.read()
        what = what_changed(self.baseline, new)
        if not what:
            return ""
        old, self.baseline = self.baseline, new
        host = follow(STATE.host_topology(), old, new)
        if host is None:  # the CPUs changed: detect them again (rare; on this thread, not a request's)
            host = detect_topology(cpu_details=False)
        STATE.use_host(host)
        _reshare(host)
        budget = STATE.topology().cpu_budget
        pools = _process_pools()
        n = self.record.changes + 1 if self.record else 1
        self.record = LimitsRecord(n, what, time.strftime("%H:%M:%S"), new.quota_words(), budget, pools)
        where = f" ({new.quota.path})" if new.quota is not None else ""
        log.info(
            "tf_autopar: %s%s: plans now use %d CPU(s)%s; the process pools stay at %s",
            what,
            where,
            budget,
            ", the frozen sessions are re-planned off the request path" if self.listeners else "",
            pools or "what TensorFlow started them with",
        )
        for listener in list(self.listeners):
            listener()
        return what


def _reshare(host: Topology) -> None:
    """This process's share re-cut for the new host, and re-bound when its CPUs moved: also when the
    old share was pinned and the new one is not (a lifted quota gives the sharing rule's workers
    every core again: their old mask must widen)."""
    share = STATE.applied.share
    if share is None:
        return
    new = reshare(share, host)
    STATE.applied.recut_share(new)
    STATE.use_share(new.topology(host))
    if (new.pin or share.pin) and set(new.cpus) != set(share.cpus):
        apply_affinity(dataclasses.replace(new, pin=True), all_threads=True)


def _process_pools() -> str:
    p = STATE.process
    if p is None:
        return ""
    inter, intra = (p.running_inter, p.running_intra) if p.running_inter else (p.planned_inter, p.planned_intra)
    return f"{inter} inter-op x {intra} intra-op threads" if inter else ""


_watch: QuotaWatch | None = None
_lock = threading.Lock()


def start(listener: Callable[[], None] | None = None, tick: Callable[[], None] | None = None) -> QuotaWatch | None:
    """Watch the limits (once per process); ``listener`` is called after each change is applied,
    ``tick`` at every check (each CHECK_S; it must be cheap: it runs on this thread)."""
    global _watch
    try:
        with _lock:
            if _watch is None or not _watch.thread.is_alive():
                _watch = QuotaWatch()
                _watch.thread.start()
            if listener is not None and listener not in _watch.listeners:
                _watch.listeners.append(listener)
            if tick is not None and tick not in _watch.ticks:
                _watch.ticks.append(tick)
            return _watch
    except Exception as exc:  # fail open: nothing follows a later change, everything else works
        fail_open("watch the CPU limits", exc)
        return None


def record() -> LimitsRecord | None:
    """The last change seen, for status()."""
    watch = _watch
    return watch.record if watch is not None else None


def _forget_in_child() -> None:
    """A forked child has no watch thread: the next start() makes its own."""
    global _watch, _lock
    _watch, _lock = None, threading.Lock()


state.provide("limits", record)  # status().limits

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
