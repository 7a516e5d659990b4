"""Engines: what runs a frozen graph for the fast path, behind one protocol and a registry.

An engine builds a runner from a frozen graph (runtime/frozen.py's FrozenGraph: a GraphDef with
its variables folded into constants, its input and output tensor names) and a session setting
(inter-op, intra-op, streams); the runner runs arrays in placeholder order to the flat outputs,
describes its configuration for status(), and closes. TensorFlow's own frozen sessions
(tf_session.py) are the first engine and the default; OpenVINO (f32, and bf16 opt-in) and ONNX
Runtime (openvino_engine.py, onnxruntime_engine.py) come with the ``engines`` extra
(``pip install 'tf_autopar[engines]'``). Registering them imports neither: each engine's
``available()`` says "" when it can build, else why not, and ``build`` raises
``EngineError`` (naming the engine and the cause) when it cannot take the graph.

To add an engine: one module here with a class that has ``name``, ``precision``, ``available``
and ``build`` (its runner: ``bytes``, the estimated memory of its copy, where it is not TF's),
optionally ``convert`` (the conversion, in a child: conversion.py) with ``converted`` (whether it
is made: the fast path runs it in the background, converting.py), ``need_bytes`` (what a build
adds at its peak, in this process and in that child: the memory rule asks it before the build;
without it a TensorFlow session's estimate counts), optionally ``static_shapes = True`` (its
``build`` takes ``shapes=``, the bucket's call's, for a copy compiled for them, and ``need_bytes``
``static=True`` to count it), its runner optionally ``linger_s`` (how long its threads stay busy
after a call returns: a live trial leaves the other's calls in that time untimed), one
``register(...)`` line below, and its test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from tf_autopar.runtime.fastpath.engines.foreign import EngineError
from tf_autopar.runtime.streams import Retired

if TYPE_CHECKING:
    from tf_autopar.runtime.frozen import FrozenGraph

Setting = tuple[int, int, int]  # (inter-op threads, intra-op threads, streams)
#: A candidate: a Setting for TensorFlow's sessions (the default engine, so that its keys read as
#: before), (inter, intra, streams, engine name) for any other engine.
Key = tuple[Any, ...]

__all__ = [
    "DEFAULT",
    "Engine",
    "EngineError",
    "Key",
    "Retired",
    "Runner",
    "Setting",
    "engine_of",
    "get",
    "key_for",
    "names",
    "register",
    "setting_of",
]


class Runner(Protocol):
    """A built engine: the frozen graph, ready to run at one setting."""

    #: how many concurrent streams (sessions) it serves calls on
    streams: int

    def run(self, arrays: list[Any]) -> list[Any]:
        """The flat outputs (numpy arrays) for inputs in placeholder order. Thread-safe; raises
        ``Retired`` once closed (the caller then answers the original way)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Its configuration for status: at least ``engine``, ``inter_op``, ``intra_op``, ``streams``."""
        ...

    def close(self) -> None:
        """Release it: idle resources now, busy ones when their call returns."""
        ...


class Engine(Protocol):
    name: str
    #: "f32", or "bf16" for a reduced-precision variant (a candidate only where the user opted in)
    precision: str

    def available(self) -> str:
        """ "" when it can build here, else why not in a few words (the extra not installed, ...)."""
        ...

    def build(self, frozen: FrozenGraph, setting: Setting) -> Runner:
        """A runner of ``frozen`` at ``setting`` (built on the builder thread, never on a request)."""
        ...


_engines: dict[str, Engine] = {}


def register(engine: Engine) -> Engine:
    """Make ``engine`` available under its ``name`` (a later one of the same name replaces it)."""
    _engines[engine.name] = engine
    return engine


def get(name: str | None = None) -> Engine:
    """The engine called ``name`` (default: DEFAULT); KeyError naming the registered ones otherwise."""
    key = name or DEFAULT
    try:
        return _engines[key]
    except KeyError:
        raise KeyError(f"no fast-path engine {key!r}; registered: {', '.join(sorted(_engines))}") from None


def registered() -> dict[str, Engine]:
    """The engines in registration order (a copy)."""
    return dict(_engines)


def names() -> tuple[str, ...]:
    return tuple(sorted(_engines))


def engine_of(key: Key) -> str:
    """The engine a candidate key names."""
    return str(key[3]) if len(key) > 3 else DEFAULT


def setting_of(key: Key) -> Setting:
    return int(key[0]), int(key[1]), int(key[2])


def key_for(name: str, setting: Setting) -> Key:
    """The key of ``name`` at ``setting``: the bare setting for the default engine."""
    return tuple(setting) if name == DEFAULT else (*setting, name)


# ------------------------------------------------------------------ the registered engines
from tf_autopar.runtime.fastpath.engines import onnxruntime_engine, openvino_engine, tf_session, tf_xla  # noqa: E402

DEFAULT = tf_session.NAME
register(tf_session.TensorFlowSessions())
register(openvino_engine.OpenVINO("f32"))
register(openvino_engine.OpenVINO("bf16"))
register(onnxruntime_engine.OnnxRuntime())
register(onnxruntime_engine.OnnxRuntime(spin=True))
register(tf_xla.TensorFlowXla())  # available only in a process started with TF_XLA_FLAGS=--tf_xla_cpu_global_jit
