"""TensorFlow's frozen sessions with XLA auto-clustering (``global_jit_level=ON_1``).

A candidate where it can win, never a default: in issue 46 the BERT-style encoder b4 was 1.41x
faster than the frozen session and MobileNetV2 b1 7x slower; on a 2-core EPYC loaded by other
jobs (benchmarks/bench_engine_settings.py, results/engine_settings_epyc.json and _2.json, two
runs of 7 interleaved rounds at 1x2) MobileNetV2 b1 28-29x and EfficientNet-B0 b1 31x slower,
the encoder 0.80x and 0.64x, DLRM b64 1.14x and 0.33x: it wins only where live timing says so. On CPU, TensorFlow honours a session's ``global_jit_level`` only
when the process started with ``TF_XLA_FLAGS=--tf_xla_cpu_global_jit`` (read once, when
TensorFlow starts); in such a process the other sessions stay unclustered, so auto-clustering
is per session and this engine is available only there.

XLA compiles a cluster per input shape on the first call that brings it: the build's first
run (the output check) pays it for the bucket's batch, another batch in the bucket pays it on
its own first call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath.engines.tf_session import FrozenSessions

if TYPE_CHECKING:
    from tf_autopar.runtime.frozen import FrozenGraph

NAME = "tensorflow-xla"
FLAG = "--tf_xla_cpu_global_jit"


def flag_set() -> bool:
    """Whether the process's environment asks TensorFlow for XLA auto-clustering on CPU."""
    return FLAG in os.environ.get("TF_XLA_FLAGS", "").split()


def open_sessions(frozen: FrozenGraph, inter_op: int, intra_op: int, count: int) -> list[Any]:
    """``count`` sessions like FrozenGraph.open_sessions, with auto-clustering on."""
    import tensorflow as tf

    from tf_autopar.runtime import sessions

    config = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=inter_op, intra_op_parallelism_threads=intra_op, use_per_session_threads=True
    )
    config.graph_options.optimizer_options.global_jit_level = tf.compat.v1.OptimizerOptions.ON_1
    with sessions.bypass():
        return [tf.compat.v1.Session(graph=frozen.graph, config=config) for _ in range(max(1, count))]


class XlaSessions(FrozenSessions):
    """FrozenSessions whose sessions auto-cluster with XLA."""

    def __init__(self, frozen: FrozenGraph, setting: tuple[int, int, int]) -> None:
        super().__init__(frozen, setting, NAME, open_sessions(frozen, *setting))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "engine": NAME, "global_jit_level": "ON_1"}


class TensorFlowXla:
    """The engine."""

    name = NAME
    precision = "f32"

    def available(self) -> str:
        if flag_set():
            return ""
        return (
            f"XLA auto-clustering on CPU needs TF_XLA_FLAGS={FLAG} in the environment before TensorFlow "
            "starts (it is not)"
        )

    def build(self, frozen: FrozenGraph, setting: tuple[int, int, int]) -> XlaSessions:
        from tf_autopar.runtime.fastpath.engines.foreign import EngineError

        why = self.available()
        if why:
            raise EngineError(NAME, "setup", why)
        return XlaSessions(frozen, setting)
