"""What enable() applied to each Session and each traced function (see state.py).

A module of its own so that enable() does not define these dataclasses until a session or a
function actually appears.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SessionRecord:
    session: str  # "Session#3"
    graph_nodes: int
    fingerprint: str
    avg_width: int
    heavy_ops: int
    inter_op: int  # in the ConfigProto the session was created with
    intra_op: int
    per_session_threads: bool
    intra_per_session: bool  # the intra-op value really applies to this session alone
    user_fields: tuple[str, ...] = ()  # ConfigProto fields the user set and we kept
    note: str = ""
    analysis_ms: float = 0.0


@dataclass(frozen=True)
class FunctionRecord:
    name: str
    fingerprint: str
    heavy_ops: int
    avg_width: int
    planned_inter: int
    planned_intra: int
    matches_process: bool
    traces: int = 1
    cached: bool = False  # written to the plan cache for the next start
    analysis_ms: float = 0.0


#: Names Keras gives the tf.functions behind predict(), fit() and evaluate(): internal to Keras.
_KERAS_STEPS = ("one_step_on_", "multi_step_on_", "train_function", "test_function", "predict_function")


def user_function_name(name: str) -> str:
    """A traced function as its user knows it: their own tf.function by name, Keras's internal
    step functions as the model call they come from."""
    if name.startswith(_KERAS_STEPS):
        return "a Keras model's predict/fit/evaluate step"
    return f"tf.function {name!r}"
