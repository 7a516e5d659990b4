"""A Keras model called in inference: ``model(x)``, ``model(x, training=False)``; the call Keras
recommends for small batches (its ``predict`` docstring sends single-batch callers here).

Routed by class swap (classes.py): ``__call__`` is looked up on the type. ``x`` an array or an
eager tensor (a list in input order or a dict by name for several inputs) of exactly the inputs'
dtypes; the outputs come back as eager tensors in the model's structure, as Keras returns them.
Never routed: ``training=True`` (or any training value but None and False), a call while a
GradientTape records (the caller wants gradients through the layers), a call inside another Keras
layer's call (its training flag and losses are the outer call's), a graph call (a tf.function
being traced, symbolic KerasTensors), other keywords (``mask``). Those run Keras's own
``__call__``, counted with the reason.

Not served as Keras would: activity-regularizer losses of the call (``model.losses``) are not
recomputed; a masked model's output mask (``_keras_mask``) is not attached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import sessions
from tf_autopar.runtime.fastpath.routing import arrays, classes, reasons
from tf_autopar.runtime.fastpath.routing.base import ATTR, KERAS_MODEL, Declined, Matched, routed
from tf_autopar.runtime.fastpath.routing.keras_predict import keras_args, matched_inputs, specs
from tf_autopar.runtime.frozen import concrete_for, keras_signature

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

KIND = "keras call"


def _guards() -> tuple[Any, Any]:
    """(is a tape recording, the Keras call context): read per call, imported once."""
    from keras.src.backend.common import global_state
    from tensorflow.python.eager import record

    return record.could_possibly_record, global_state.GLOBAL_STATE_TRACKER


class KerasCall:
    kind = KIND
    source = KERAS_MODEL
    attr = ATTR
    install, uninstall = staticmethod(classes.swap), staticmethod(classes.restore)

    def __init__(self) -> None:
        self._recording: Any = None
        self._keras_state: Any = None

    def find(self, loaded: Any) -> list[tuple[str, Any]]:
        return [] if routed(loaded) or specs(loaded) is None else [("__call__", loaded)]

    def inputs(self, target: Any) -> tuple[Any, list[tuple[str, Any]], Any]:
        return None, specs(target) or [], None  # traced in the builder

    def trace(self, target: Any) -> Any:
        with sessions.bypass():
            return concrete_for(target, tuple(keras_signature(target) or ()))

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | Declined:
        if len(args) != 1:
            return reasons.ARGUMENTS
        if kwargs:
            if len(kwargs) != 1 or "training" not in kwargs:
                return reasons.ARGUMENTS
            training = kwargs["training"]
            if training is not None and training is not False:
                return reasons.TRAINING
        if self._recording is None:
            self._recording, self._keras_state = _guards()
        if self._recording():
            return reasons.TAPE
        if getattr(self._keras_state, "current_call_ctx", None) is not None:
            return reasons.NESTED
        return matched_inputs(served, args[0])

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with sessions.bypass():
            return served.original_class.__call__(target, *args, **kwargs)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (keras_args(served, values),), {"training": False}

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        return arrays.as_tensors(structure, values)
