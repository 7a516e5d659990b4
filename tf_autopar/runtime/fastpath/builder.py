"""The builder: one daemon thread that runs the fast path's jobs (builds, checks, trials' sessions,
re-plans, cache writes), one at a time, so that at most one build competes with the requests for
the CPU. A job is ``job(served, bucket_id, *args)``; a failure keeps that bucket on the original
path (fail open). The jobs themselves are build.py's, trials.py's, replan.py's, remembered.py's.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from tf_autopar.runtime.fastpath.engines import conversion
from tf_autopar.runtime.fastpath.memory import trim_heap
from tf_autopar.runtime.safety import fail_open

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

Job = Callable[..., Any]

#: Tests only: while this event is set but not yet signalled, the builder holds every job back.
BUILD_GATE: threading.Event | None = None
#: At exit, how long a build under way may take to finish (a NASNet build: about 9 s of CPU).
EXIT_WAIT_S = 30.0


class Builder:
    """The thread and its queue of jobs."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, name="tf_autopar-fastpath", daemon=True)
        self.thread.start()

    def submit(self, served: Function, bucket_id: int, job: Job, *args: Any) -> None:
        if not self.stopping:
            self.jobs.put((weakref.ref(served), bucket_id, job, args))

    def stop(self, timeout: float) -> None:
        """At exit: no new job; the one running finishes (TensorFlow aborts the process when the
        interpreter ends under a thread inside one of its ops)."""
        self.stopping = True
        self.jobs.put(None)
        self.thread.join(timeout)

    def _loop(self) -> None:
        while True:
            item = self.jobs.get()
            if item is None or self.stopping:
                self.jobs.task_done()
                return
            if BUILD_GATE is not None:  # tests hold builds back to show that calls never wait for one
                BUILD_GATE.wait()
            ref, bucket_id, job, args = item
            served = ref()
            if served is None or served.stopped == "disabled":
                self.jobs.task_done()
                continue
            try:
                job(served, bucket_id, *args)
            except Exception as exc:  # fail open: this bucket stays on the original path
                b = served.buckets.get(bucket_id)
                if b is not None:
                    served.keep_original(
                        b, f"its frozen session could not be built: {type(exc).__name__}: {exc}", warn=False
                    )
                fail_open(f"build the frozen session of {served.name}", exc)
            finally:
                del served, item, args
                trim_heap()
                self.jobs.task_done()


_the_builder: Builder | None = None
_builder_lock = threading.Lock()


def the_builder() -> Builder:
    global _the_builder
    with _builder_lock:
        if _the_builder is None or not _the_builder.thread.is_alive():
            _the_builder = Builder()
        return _the_builder


def submit(served: Function, bucket_id: int, job: Job, *args: Any) -> None:
    """``job(served, bucket_id, *args)`` on the builder thread."""
    the_builder().submit(served, bucket_id, job, *args)


def wait_idle(timeout: float = 60.0) -> bool:
    """Wait until no build, check or timing is queued or running; False on timeout. For benchmarks
    and tests that want the steady state; a server never needs to call it."""
    deadline = time.monotonic() + timeout
    builder = _the_builder
    while builder is not None and builder.jobs.unfinished_tasks:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def exiting() -> bool:
    return _the_builder is not None and _the_builder.stopping


def stop_at_exit() -> None:
    """The running build ends first (then roster.py's exit flush writes the cache); conversion
    children still running are stopped."""
    if _the_builder is not None and _the_builder.thread.is_alive():
        _the_builder.stop(EXIT_WAIT_S)
    conversion.stop_children()  # a conversion under way (converting.py) would outlive the process
