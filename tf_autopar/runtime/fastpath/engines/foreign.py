"""What the engines other than TensorFlow's share: the graph handed over, converted once, checked.

- the frozen GraphDef (``FrozenGraph.graph_def``, or re-read from its graph where the planner
  dropped it to save a copy of the constants);
- one conversion per FrozenGraph (``Conversions``: keyed weakly, so a re-freeze's new graph
  converts again and the old conversion goes with the old graph);
- the dtypes TensorFlow gives each output, so an engine's output is cast only where that is
  lossless (int32 -> int64), never where it is not (the equality check then fails, as it should);
- the frozen constants' bytes, from which each engine estimates its copy's memory
  (``estimate_bytes``: factors measured by benchmarks/bench_engine_settings.py --memory);
- ``EngineError``: conversion or compilation failed, naming the engine and the cause (the
  caller falls open to TensorFlow's session).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from tf_autopar.runtime.frozen import FrozenGraph

log = logging.getLogger("tf_autopar.runtime")

T = TypeVar("T")

INSTALL = "pip install 'tf_autopar[engines]'"


class EngineError(RuntimeError):
    """An engine could not take this graph (conversion, compilation): the caller keeps TensorFlow's."""

    def __init__(self, engine: str, stage: str, cause: BaseException | str) -> None:
        why = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
        why = why.strip().splitlines()[0][:500] if why.strip() else type(cause).__name__
        super().__init__(f"{engine}: {stage} failed: {why}")
        self.engine, self.stage = engine, stage


def missing(module: str) -> str:
    """Why ``module`` cannot be used ("" when it is installed): the engines' ``available()``.
    Found, not imported: tf2onnx imports TensorFlow and OpenVINO forks at import (openvino_import),
    and a process that only plans (validate's parent, enable() before any model) must do neither;
    a broken install fails at conversion instead, which falls open."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError) as exc:  # also sys.modules[module] = None
        return f"{module} is not installed ({exc}): {INSTALL}"
    return "" if found else f"{module} is not installed: {INSTALL}"


@contextlib.contextmanager
def telemetry_off() -> Iterator[None]:
    """OpenVINO's first import sends a usage event (openvino.tools.ovc: openvino_telemetry, in a
    process started with ``multiprocessing``'s fork, unless ``CI=true``): in a serving process
    that is a fork of a process full of TensorFlow's threads, and a thread pool that holds the
    interpreter's exit until the send gives up (no network: a validate child waited 180 s and was
    killed). The import is the one the fast path makes on the user's behalf, so it is made with
    ``CI=true`` for its duration (openvino_telemetry's own switch); a program that imported
    OpenVINO itself keeps its own choice."""
    had = os.environ.get("CI")
    if had is None:
        os.environ["CI"] = "true"
    try:
        yield
    finally:
        if had is None:
            os.environ.pop("CI", None)


def openvino_module() -> Any:
    """``openvino``, imported with telemetry_off the first time."""
    import sys

    if "openvino" in sys.modules and sys.modules["openvino"] is not None:
        return sys.modules["openvino"]
    with _import_lock, telemetry_off():
        import openvino

        return openvino


_import_lock = threading.Lock()


def graph_def(frozen: FrozenGraph) -> Any:
    """The GraphDef a converter gets: with functional loops where the frozen one has TF1's
    (FrozenGraph.functional_graph_def), else the frozen GraphDef (re-read from the graph when the
    planner dropped its copy)."""
    functional = frozen.functional_graph_def()
    if functional is not None:
        return functional
    gd = getattr(frozen, "graph_def", None)
    return gd if gd is not None else frozen.graph.as_graph_def()


def output_dtypes(frozen: FrozenGraph) -> list[Any]:
    """numpy dtypes of the frozen outputs as TensorFlow gives them (None where TF has no numpy one)."""
    out = []
    for name in frozen.outputs:
        try:
            out.append(frozen.graph.get_tensor_by_name(name).dtype.as_numpy_dtype)
        except Exception:  # e.g. a string or resource output: leave the engine's
            out.append(None)
    return out


def as_tf_dtype(value: Any, want: Any) -> Any:
    """``value`` (a numpy array) in TensorFlow's dtype where the cast is lossless; as it is otherwise."""
    import numpy as np

    if want is None or value.dtype == want:
        return value
    try:
        if np.can_cast(value.dtype, want, casting="safe"):
            return value.astype(want)
    except TypeError:
        pass
    return value


_constants: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def constant_bytes(frozen: FrozenGraph) -> int:
    """Bytes of the frozen graph's constants (from their shapes; no copy made), counted once per
    graph: each room check, a conversion's reserved peak and each runner ask again, and the walk
    holds the interpreter lock (14 ms on NASNetMobile's 5,719 ops, 2-core EPYC) on the builder
    thread, beside the requests' own Python."""
    known = _constants.get(frozen)
    if known is None:
        known = _constants[frozen] = _count_constants(frozen)
    return known


def _count_constants(frozen: FrozenGraph) -> int:
    total = 0
    for op in frozen.graph.get_operations():
        if op.type != "Const":
            continue
        t = op.outputs[0]
        n = t.shape.num_elements()
        if n is None:
            continue
        try:
            total += n * t.dtype.size
        except Exception:  # strings: no fixed size
            continue
    return total


_used: set[str] = set()
_used_lock = threading.Lock()


def first_use(engine: str) -> bool:
    """True once per process and engine: the build that loads the engine's libraries."""
    with _used_lock:
        if engine in _used:
            return False
        _used.add(engine)
        return True


def loaded(engine: str) -> bool:
    """Whether a build of ``engine`` has loaded its libraries in this process (first_use without taking it)."""
    with _used_lock:
        return engine in _used


def need_bytes(
    frozen: FrozenGraph,
    conversions: Conversions[Any],
    engine: str,
    per_copy: float,
    libraries: int,
    child: tuple[int, float],
    kept: Callable[[], bool],
    copies: int = 1,
) -> tuple[int, int]:
    """What building an engine's runner of ``frozen`` will add at its peak, before it is built:
    (in this process: ``copies`` compiled copies at ``per_copy`` x the constants each, the
    converted model read back (once the constants) and the libraries' first load where not done
    yet; the conversion child's peak, ``child`` = (base bytes, x the constants), where the graph
    is not converted yet and ``kept()`` finds none of it kept on disk, asked only then:
    conversion.kept digests the graph)."""
    constants = constant_bytes(frozen)
    converted = conversions.has(frozen)
    process = estimate_bytes(constants, per_copy, 1.0, copies, not converted, 0 if loaded(engine) else libraries)
    if converted or kept():
        return process, 0
    return process, child[0] + int(constants * child[1])


def estimate_bytes(
    constants: int, per_copy: float, conversion: float, copies: int, converted: bool, libraries: int
) -> int:
    """What a runner adds to RSS: ``copies`` compiled copies at ``per_copy`` x the constants, the
    conversion (``conversion`` x) where this build made it, the libraries' first use where this
    is the process's first build of the engine (``libraries`` bytes, else 0)."""
    return int(constants * (per_copy * copies + (conversion if converted else 0.0))) + libraries


class Conversions(Generic[T]):
    """One conversion per FrozenGraph, made on first use and dropped with the graph."""

    def __init__(self) -> None:
        self._done: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._making: dict[int, threading.Lock] = {}

    def has(self, frozen: FrozenGraph) -> bool:
        """Whether ``frozen`` is converted already."""
        with self._lock:
            return frozen in self._done

    def get(self, frozen: FrozenGraph, convert: Callable[[FrozenGraph], T]) -> tuple[T, bool]:
        """(the conversion, whether this call made it); two builders of one graph convert once."""
        with self._lock:
            found = self._done.get(frozen)
            if found is not None:
                return found, False
            making = self._making.setdefault(id(frozen), threading.Lock())
        with making:
            with self._lock:
                found = self._done.get(frozen)
            if found is not None:
                return found, False
            try:
                made = convert(frozen)
                with self._lock:
                    self._done[frozen] = made
            finally:
                with self._lock:
                    self._making.pop(id(frozen), None)
            return made, True


@contextlib.contextmanager
def quiet(*loggers: str, level: int = logging.ERROR) -> Iterator[None]:
    """Raise these Python loggers to ``level`` for the block (converters log every step at INFO)."""
    saved = [(lg, lg.level) for lg in (logging.getLogger(n) for n in loggers)]
    for lg, _ in saved:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, old in saved:
            lg.setLevel(old)
