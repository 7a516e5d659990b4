"""``with tf_autopar.trace() as t:`` — per-op execution times of any TF code in the block.

Recording is process-wide in TensorFlow (one TraceMe recorder, one profiler lock), so:

- Nesting (same thread): an inner ``trace()`` joins the recording already running.
  Each trace reports the kernel executions that *started* inside its own window. When
  an inner trace exits, the recorder is stopped, drained and restarted at once (a few
  µs to ms); a kernel running across that instant may be missing from the outer trace.
  The level is the outermost trace's (an inner ``cheap_ops=True`` is ignored, logged).
- Another thread: while a trace is active, ``trace()`` entered from a different thread
  raises ``TraceBusyError`` rather than sharing the recording, because a kernel event
  cannot be attributed to the Python thread that launched it; results never mix.
  The active trace records all TF work of the process in its window (every thread),
  as tf.profiler does.
- ``tf.profiler`` active: ``TraceBusyError`` (and tf.profiler cannot start while a trace
  is recording: the native tracer holds TF's profiler lock).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from tf_autopar import _warn
from tf_autopar._files import write_json_atomic
from tf_autopar.tracing import _native, _profiler, model
from tf_autopar.tracing._native import LEVEL_ALL_OPS, LEVEL_OPS, TraceBusyError
from tf_autopar.tracing.build import NativeBuildError

log = logging.getLogger("tf_autopar.tracing")

BACKENDS = ("auto", "native", "profiler")


def native_disabled() -> bool:
    return os.environ.get("TF_AUTOPAR_NO_NATIVE", "").strip().lower() not in ("", "0", "false", "no")


def native_status() -> tuple[bool, str]:
    """(available, reason): whether the native tracer loads (building it if needed)."""
    if native_disabled():
        return False, "disabled by TF_AUTOPAR_NO_NATIVE"
    try:
        _native.load()
    except NativeBuildError as exc:
        return False, str(exc)
    return True, "ok"


def _make_backend(choice: str):
    if choice not in BACKENDS:
        raise ValueError(f"unknown tracing backend {choice!r}; choose from {', '.join(BACKENDS)}")
    if choice in ("auto", "native") and not (choice == "auto" and native_disabled()):
        if choice == "native" and native_disabled():
            raise NativeBuildError("the native tracer is disabled by TF_AUTOPAR_NO_NATIVE")
        try:
            return _native.NativeBackend()
        except NativeBuildError as exc:
            if choice == "native":
                raise
            _warn.warn_once(
                "tracer-fallback",
                f"native op tracer unavailable, using the tf.profiler fallback (slower): {exc}",
                log.name,
            )
    return _profiler.ProfilerBackend()


class _Recording:
    """The process-wide recording shared by nested traces of one thread."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.owner: int | None = None
        self.depth = 0
        self.backend: Any = None
        self.level = LEVEL_OPS
        self.chunks: list[model.RawChunk] = []
        self.broken = False

    def enter(self, tr: "Trace") -> None:
        with self.lock:
            me = threading.get_ident()
            if self.depth > 0:
                if self.owner != me:
                    raise TraceBusyError(
                        "tf_autopar.trace() is already recording in another thread; TensorFlow's op "
                        "recorder is process-wide, so traces from two threads cannot run at once"
                    )
                if tr.level != self.level:
                    log.info("nested trace: keeping the outer trace's level %d (asked %d)", self.level, tr.level)
            else:
                backend = _make_backend(tr.requested_backend)
                backend.start(tr.level)
                self.backend, self.level, self.owner, self.chunks, self.broken = backend, tr.level, me, [], False
            self.depth += 1
            tr.backend = self.backend.name
            tr.level = self.level
            tr._start_ns = self.backend.now_ns()
            tr._t0 = time.perf_counter()

    def exit(self, tr: "Trace") -> None:
        with self.lock:
            tr._wall_s = time.perf_counter() - tr._t0
            tr._end_ns = self.backend.now_ns()
            self.depth -= 1
            t0 = time.perf_counter()
            try:
                if not self.broken:
                    self.chunks.append(self.backend.stop())
            finally:
                tr.collect_s = time.perf_counter() - t0
                tr._chunks = list(self.chunks)
                tr.incomplete = self.broken
                if self.depth == 0:
                    self.backend, self.owner, self.chunks = None, None, []
            if self.depth == 0:
                return
            try:  # an outer trace is still open: record on
                self.backend.start(self.level)
            except TraceBusyError as exc:
                self.broken = True
                log.warning("could not restart recording for the outer trace (%s); it ends here", exc)


_RECORDING = _Recording()


class Trace:
    """Per-op execution times of the TF work run inside ``with trace() as t:``.

    Results are available after the block: ``ops()``, ``by_type()``, ``heavy_share()``,
    ``timeline()``, ``save_chrome_trace(path)``, ``to_dict()``.
    """

    def __init__(self, cheap_ops: bool = False, backend: str = "auto") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown tracing backend {backend!r}; choose from {', '.join(BACKENDS)}")
        self.requested_backend = backend
        self.level = LEVEL_ALL_OPS if cheap_ops else LEVEL_OPS
        self.backend: str = ""  # "native" or "tf.profiler", set on entry
        self.collect_s = 0.0  # time spent stopping the recorder and draining it at exit
        self.incomplete = False
        self._chunks: list[model.RawChunk] | None = None
        self._start_ns = self._end_ns = 0
        self._t0 = 0.0
        self._wall_s = 0.0
        self._table: model.OpTable | None = None
        self._classify = None

    # ---- context manager --------------------------------------------------------------
    def __enter__(self) -> "Trace":
        if self._chunks is not None or self._start_ns:
            raise RuntimeError("a Trace object records once; call tf_autopar.trace() again")
        _RECORDING.enter(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _RECORDING.exit(self)

    # ---- results ----------------------------------------------------------------------
    def _done(self) -> model.OpTable:
        if self._chunks is None:
            raise RuntimeError("trace results are available after the `with tf_autopar.trace()` block ends")
        if self._table is None:
            self._table = model.op_table(self._chunks, self._start_ns, self._end_ns)
        return self._table

    def _classifier(self):
        if self._classify is None:
            self._classify = model.heavy_classifier()
        return self._classify

    def use_graph(self, graph: Any) -> "Trace":
        """Tell the heavy-op classifier which gathers are embedding look-ups, from the model's
        graph: a GraphDef, a tf.Graph, a ConcreteFunction or a tf.function with one trace.
        (A trace records node names only, not which tensor a gather reads.)"""
        if hasattr(graph, "get_concrete_function"):
            graph = graph.get_concrete_function()
        if hasattr(graph, "graph") and hasattr(graph.graph, "as_graph_def"):
            graph = graph.graph
        if hasattr(graph, "as_graph_def"):
            graph = graph.as_graph_def()
        if not hasattr(graph, "node") or not hasattr(graph, "library"):
            raise ValueError(f"use_graph() needs a GraphDef, tf.Graph or ConcreteFunction, got {type(graph).__name__}")
        self._classify = model.heavy_classifier(model.embedding_gather_names(graph))
        return self

    @property
    def wall_s(self) -> float:
        """Wall time of the traced block."""
        return self._wall_s

    def op_table(self) -> model.OpTable:
        """All kernel executions, columnar (for custom analysis)."""
        return self._done()

    def events(self) -> list[model.OpEvent]:
        """All kernel executions in start order (times in ns since the block started)."""
        return self._done().events()

    def ops(self) -> list[model.OpRecord]:
        """Per graph node: type, name, count, total and median time, main thread."""
        return model.aggregate_ops(self._done())

    def by_type(self) -> list[model.TypeRecord]:
        """The op-type profile (Fathom's view): time per op type, largest first."""
        return model.aggregate_types(self._done(), self._classifier())

    def heavy_share(self) -> model.HeavyShare:
        """Time in heavy ops (conv, matmul, embedding, recurrent) versus the rest."""
        return model.heavy_share(self._done(), self._wall_s, self._classifier())

    def timeline(self) -> dict[str, list[model.OpEvent]]:
        """Per thread, its kernel executions in order."""
        return model.timeline(self.events())

    def chrome_trace(self, include_runtime: bool = False) -> dict:
        runtime = model.runtime_events(self._chunks or [], self._start_ns, self._end_ns) if include_runtime else ()
        meta = {"backend": self.backend, "level": self.level, "wall_s": self._wall_s, "tool": "tf_autopar.trace"}
        return model.chrome_trace(self.events(), runtime, meta)

    def save_chrome_trace(self, path: str | os.PathLike, include_runtime: bool = False) -> Path:
        """Write a Trace Event Format JSON (open in ui.perfetto.dev or chrome://tracing).

        ``include_runtime`` adds TF's runtime events (executor, eager dispatch) next to the ops.
        """
        p = Path(path)
        write_json_atomic(str(p), self.chrome_trace(include_runtime))
        return p

    def to_dict(self, steps: int | None = None) -> dict:
        """JSON-ready summary (``steps`` adds per-step times)."""
        hs = self.heavy_share()
        per = (lambda s: s / steps) if steps else (lambda s: None)
        return {
            "backend": self.backend,
            "level": self.level,
            "wall_s": self._wall_s,
            "collect_s": self.collect_s,
            "steps": steps,
            "incomplete": self.incomplete,
            "heavy_share": {
                "heavy_s": hs.heavy_s,
                "other_s": hs.other_s,
                "op_s": hs.op_s,
                "heavy_fraction": hs.heavy_fraction,
                "wall_s": hs.wall_s,
                "heavy_busy_s": hs.heavy_busy_s,
                "tax_fraction": hs.tax_fraction,
                "by_class": hs.by_class,
                "heavy_types": list(hs.heavy_types),
            },
            "by_type": [
                {
                    "type": r.type,
                    "count": r.count,
                    "ops": r.ops,
                    "total_s": r.total_s,
                    "per_step_s": per(r.total_s),
                    "median_s": r.median_s,
                    "share": r.share,
                    "heavy": r.heavy,
                }
                for r in self.by_type()
            ],
            "ops": [
                {
                    "type": r.type,
                    "name": r.name,
                    "count": r.count,
                    "total_s": r.total_s,
                    "median_s": r.median_s,
                    "thread": r.thread,
                    "kernel": r.kernel,
                    "threads": r.threads,
                }
                for r in self.ops()
            ],
        }


def trace(cheap_ops: bool = False, backend: str = "auto") -> Trace:
    """Record per-op execution times of the TF code run inside the ``with`` block.

    ``cheap_ops=True`` also records the cheap kernels TF runs inline (TraceMe level 3;
    costs more). ``backend``: "auto" (native, else the tf.profiler fallback), "native"
    (raise NativeBuildError if it cannot be built) or "profiler".
    Set TF_AUTOPAR_NO_NATIVE=1 to force the fallback.
    """
    return Trace(cheap_ops=cheap_ops, backend=backend)
