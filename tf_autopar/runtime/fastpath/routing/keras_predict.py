"""A Keras model's ``predict`` of one batch: ``model.predict(x)`` with ``x`` at most ``batch_size``
(default 32) rows of numpy arrays: an array, a list in the model's input order or a dict by input
name. Routed by an instance attribute ``predict``: the class and its other methods stay Keras's.
Anything else (callbacks, steps, a dataset, several batches) is Keras's own to handle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import sessions
from tf_autopar.runtime.fastpath.routing import arrays
from tf_autopar.runtime.fastpath.routing.base import ATTR, KERAS_MODEL, Matched, routed
from tf_autopar.runtime.frozen import concrete_for, keras_signature

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

KIND = "keras predict"
#: predict() arguments a routed call may carry (others, e.g. callbacks or steps, go to Keras itself)
PREDICT_KWARGS = frozenset({"x", "batch_size", "verbose"})


def specs(model: Any) -> list[tuple[str, Any]] | None:
    """A Keras model's declared inputs as (name, TensorSpec) with a free batch, or None."""
    inputs = getattr(model, "inputs", None)
    signature = keras_signature(model)
    if not inputs or not signature:
        return None
    return [(str(getattr(t, "name", f"input {i}")), spec) for i, (t, spec) in enumerate(zip(inputs, signature))]


class KerasPredict:
    kind = KIND
    source = KERAS_MODEL

    def find(self, loaded: Any) -> list[tuple[str, Any]]:
        return [] if routed(loaded) or specs(loaded) is None else [("predict", loaded)]

    def inputs(self, target: Any) -> tuple[Any, list[tuple[str, Any]], Any]:
        return None, specs(target) or [], None  # traced in the builder: tracing a model is no work for a request

    def trace(self, target: Any) -> Any:
        with sessions.bypass():
            return concrete_for(target, tuple(keras_signature(target) or ()))

    def install(self, target: Any, served: Function) -> None:
        vars(target)[ATTR] = served

        def predict(*args: Any, **kwargs: Any) -> Any:
            return served(target, args, kwargs)

        vars(target)["predict"] = predict

    def uninstall(self, target: Any, served: Function) -> None:
        vars(target).pop(ATTR, None)
        vars(target).pop("predict", None)

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | None:
        import numpy as np
        import tensorflow as tf

        if len(args) > 1 or set(kwargs) - PREDICT_KWARGS or (args and "x" in kwargs):
            return None
        x = args[0] if args else kwargs.get("x")
        if isinstance(x, dict):
            if sorted(x) != sorted(n for n, _ in served.specs):
                return None
            values, form = [x[n] for n, _ in served.specs], "dict"
        elif isinstance(x, (list, tuple)):
            values, form = list(x), "list"
        else:
            values, form = [x], "single"
        if len(values) != len(served.specs) or not all(isinstance(v, np.ndarray) for v in values):
            return None
        batch = values[0].shape[0] if values[0].ndim else 0
        limit = kwargs.get("batch_size") or 32
        if not isinstance(limit, int) or batch < 1 or batch > limit or any(v.shape[:1] != (batch,) for v in values):
            return None
        found = [arrays.exact_array(v, feed, np, tf) for v, feed in zip(values, served.feeds)]
        if any(a is None for a in found):
            return None
        served.keras_form = form  # how predict's calls give their inputs: call_args gives them so
        return found, batch

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with sessions.bypass():
            return served.original_class.predict(target, *args, **kwargs)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if served.keras_form == "dict":
            return ({n: a for (n, _), a in zip(served.specs, values)},), {"verbose": 0}
        return (values[0] if served.keras_form == "single" else list(values),), {"verbose": 0}

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        import tensorflow as tf

        return tf.nest.pack_sequence_as(structure, list(values))  # predict returns numpy
