"""TensorFlow's engine: the frozen graph in ``tf.compat.v1.Session``s with pools of their own.

One session per stream, each with the setting's inter-op and intra-op pools
(``FrozenGraph.open_sessions``); concurrent callers are handed them first come, first served
(streams.StreamPool). Close retires them: idle sessions close now, busy ones when their call
returns, and a caller about to use them gets ``Retired``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.streams import StreamPool

if TYPE_CHECKING:
    from tf_autopar.runtime.frozen import FrozenGraph

NAME = "tensorflow"


class FrozenSessions:
    """A runner: a StreamPool of sessions over one frozen graph at one setting."""

    precision = "f32"

    def __init__(
        self, frozen: FrozenGraph, setting: tuple[int, int, int], name: str = NAME, sessions: list[Any] | None = None
    ) -> None:
        """``sessions``: opened by the caller (XLA's), else the frozen graph's own at ``setting``."""
        self.setting, self.name = setting, name
        self.inputs, self.outputs = list(frozen.inputs), list(frozen.outputs)
        self.pool = StreamPool(frozen.open_sessions(*setting) if sessions is None else sessions)
        self._run = self.pool.bind(self.outputs, self.inputs)

    @property
    def streams(self) -> int:
        return len(self.pool.sessions)

    def run(self, arrays: list[Any]) -> list[Any]:
        return self._run(arrays)

    def describe(self) -> dict[str, Any]:
        inter, intra, _ = self.setting
        return {
            "engine": self.name,
            "inter_op": inter,
            "intra_op": intra,
            "streams": self.streams,
            "threads": (inter + intra) * self.streams,  # the pools' threads, every session's
            "precision": self.precision,
        }

    def close(self) -> None:
        self.pool.retire()


class TensorFlowSessions:
    """The engine: builds FrozenSessions."""

    name = NAME
    precision = "f32"

    def available(self) -> str:
        """Always "": TensorFlow is what the fast path runs on."""
        return ""

    def build(self, frozen: FrozenGraph, setting: tuple[int, int, int]) -> FrozenSessions:
        return FrozenSessions(frozen, setting, self.name)
