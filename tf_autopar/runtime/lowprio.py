"""Builds at a bounded share of the CPU: the fast path's heavy preparation on a niced thread.

Freezing a model, importing its graph and grappler's first run (a NASNet build: about 9 s of
CPU) ran at the requests' priority on the builder thread, so on a small host they took the
CPU from the requests: the first 30 s' p99 was worse than TensorFlow's default on 11 of 18 rows
(docs/serving.md). Here those steps run on one thread of their own whose nice value is raised
(``os.setpriority`` on its native thread id: Linux schedules threads, so the rest of the process
keeps its priority). Under CFS a thread at nice 10 beside one at nice 0 gets about a tenth of
a shared CPU, and all of an idle one: the build takes longer only while requests want the CPU.

Two things stay at the requests' priority, on purpose: sessions are opened by the builder
thread itself (a thread inherits its creator's nice value, so pools made here would serve
requests niced), and the paired timing of the switch check (the original path and the frozen
one measured alike). A niced thread cannot lower its nice value again without privilege, so
the niced thread is kept for these jobs alone.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

log = logging.getLogger("tf_autopar.runtime")

NICE_VAR = "TF_AUTOPAR_BUILD_NICE"
#: Added to the process's nice value for the build thread; 0 (or TF_AUTOPAR_BUILD_NICE=0): no change.
DEFAULT_NICE = 10

T = TypeVar("T")


def nice_increment(value: str | None) -> int:
    """The increment ``TF_AUTOPAR_BUILD_NICE`` asks for (0-19), DEFAULT_NICE when unset or not a number."""
    text = (value or "").strip()
    if not text:
        return DEFAULT_NICE
    try:
        n = int(text)
    except ValueError:
        log.warning("tf_autopar: %s=%r is not a whole number from 0 to 19; using %d", NICE_VAR, text, DEFAULT_NICE)
        return DEFAULT_NICE
    return min(max(n, 0), 19)


class LowPriority:
    """One daemon thread, niced at its start, that runs the callables given to ``run`` in turn
    (a daemon: the interpreter's exit waits for the fast path's builder, not for this thread)."""

    def __init__(self, increment: int, name: str = "tf_autopar-build") -> None:
        self.increment, self.name = increment, name
        self.applied = 0  # the increment really applied (0 where setpriority is missing or refused)
        self._jobs: queue.Queue[tuple[Future, Callable[..., Any], tuple, dict]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _loop(self) -> None:
        self._lower()
        while True:
            future, fn, args, kwargs = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # handed to the caller, raised there
                    future.set_exception(exc)

    def _lower(self) -> None:
        if self.increment <= 0 or not hasattr(os, "setpriority"):
            return
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self.increment)
            self.applied = self.increment
        except OSError as exc:  # a sandbox may refuse it: builds run at the requests' priority then
            log.debug("tf_autopar: could not lower the build thread's priority: %s", exc)

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the niced thread; its result, or its exception raised here."""
        if self.increment <= 0:
            return fn(*args, **kwargs)
        return self.submit(fn, *args, **kwargs).result()

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future:
        """``fn(*args, **kwargs)`` queued for the thread (also at increment 0); its Future."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        future: Future = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future


_runner: LowPriority | None = None
_lock = threading.Lock()


def runner() -> LowPriority:
    """The process's build runner, made at first use with the increment the environment asks for."""
    global _runner
    with _lock:
        if _runner is None:
            _runner = LowPriority(nice_increment(os.environ.get(NICE_VAR)))
        return _runner


def run_low(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn`` at the build priority (see the module docstring)."""
    return runner().run(fn, *args, **kwargs)
