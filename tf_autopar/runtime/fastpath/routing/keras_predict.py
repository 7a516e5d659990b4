"""A Keras model's ``predict`` of one batch and its ``predict_on_batch``: ``model.predict(x)`` with
``x`` at most ``batch_size`` (default 32) rows, ``model.predict_on_batch(x)`` with any rows; ``x``
numpy arrays (or, for predict_on_batch, eager tensors): an array, a list in the model's input
order or a dict by input name. Routed by an instance attribute (``predict``, ``predict_on_batch``):
the class and its other methods stay Keras's. Anything else (callbacks, steps, a dataset,
several batches) is Keras's own to handle. Both return numpy, as Keras does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import sessions
from tf_autopar.runtime.fastpath.routing import arrays, reasons
from tf_autopar.runtime.fastpath.routing.base import ATTR, KERAS_MODEL, Declined, Matched, routed
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


def matched_inputs(served: Function, x: Any) -> Matched | Declined:
    """``x``'s arrays and batch for the fast path (its form remembered for call_args), or why not."""
    found = values_of(served, x)
    if found.__class__ is str:
        return found  # type: ignore[return-value]
    values, form = found  # type: ignore[misc]
    matched = arrays.arrays_of(values, served.feeds)
    if matched.__class__ is not str:
        served.keras_form = form
    return matched


def values_of(served: Function, x: Any) -> tuple[list[Any], str] | Declined:
    """The model's inputs in ``x`` (one array, a list in input order, a dict by name) and how they
    were given ("single", "list", "dict"), or why they are not routed."""
    if isinstance(x, dict):
        if len(x) != len(served.specs) or any(n not in x for n, _ in served.specs):
            return reasons.ARGUMENTS
        return [x[n] for n, _ in served.specs], "dict"
    if isinstance(x, (list, tuple)) and len(served.specs) > 1:
        return (list(x), "list") if len(x) == len(served.specs) else reasons.ARGUMENTS
    if len(served.specs) != 1:
        return reasons.ARGUMENTS
    return [x], "single"


def keras_args(served: Function, values: list[Any]) -> Any:
    """The model's input ``x`` as its calls gave it (``served.keras_form``), from arrays."""
    if served.keras_form == "dict":
        return {n: a for (n, _), a in zip(served.specs, values)}
    return values[0] if served.keras_form == "single" else list(values)


class KerasPredict:
    kind = KIND
    source = KERAS_MODEL
    method = "predict"
    attr = ATTR + "_predict"  # a model serves its call, predict and predict_on_batch: one attribute each

    def find(self, loaded: Any) -> list[tuple[str, Any]]:
        return [] if routed(loaded, self.attr) or specs(loaded) is None else [(self.method, loaded)]

    def inputs(self, target: Any) -> tuple[Any, list[tuple[str, Any]], Any]:
        return None, specs(target) or [], None  # traced in the builder: tracing a model is no work for a request

    def trace(self, target: Any) -> Any:
        with sessions.bypass():
            return concrete_for(target, tuple(keras_signature(target) or ()))

    def install(self, target: Any, served: Function) -> None:
        vars(target)[self.attr] = served

        def method(*args: Any, **kwargs: Any) -> Any:
            return served(target, args, kwargs)

        vars(target)[self.method] = method

    def uninstall(self, target: Any, served: Function) -> None:
        vars(target).pop(self.attr, None)
        vars(target).pop(self.method, None)

    def x_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call's ``x``, or arrays.MISSING when its arguments are not routed."""
        if len(args) > 1 or set(kwargs) - PREDICT_KWARGS or (args and "x" in kwargs):
            return arrays.MISSING
        return args[0] if args else kwargs.get("x", arrays.MISSING)

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | Declined:
        import numpy as np

        x = self.x_of(args, kwargs)
        if x is arrays.MISSING:
            return reasons.ARGUMENTS
        found = values_of(served, x)
        if found.__class__ is str:
            return found  # type: ignore[return-value]
        values, form = found  # type: ignore[misc]
        if not all(isinstance(v, np.ndarray) for v in values):  # predict's tensors: Keras's own data adapter
            return reasons.PYTHON if any(isinstance(v, (list, int, float)) for v in values) else reasons.OTHER
        matched = arrays.arrays_of(values, served.feeds)
        if matched.__class__ is str:
            return matched
        limit = kwargs.get("batch_size") or 32
        if not isinstance(limit, int) or matched[1] > limit:  # type: ignore[index]
            return reasons.BIG_BATCH
        served.keras_form = form  # how its calls give their inputs: call_args gives them so
        return matched

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with sessions.bypass():
            return getattr(served.original_class, self.method)(target, *args, **kwargs)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (keras_args(served, values),), {"verbose": 0}

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        import tensorflow as tf

        return tf.nest.pack_sequence_as(structure, list(values))  # predict returns numpy


class KerasPredictOnBatch(KerasPredict):
    """``model.predict_on_batch(x)``: one batch of any size, arrays or eager tensors."""

    kind = "keras predict_on_batch"
    method = "predict_on_batch"
    attr = ATTR + "_predict_on_batch"

    def x_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if len(args) + len(kwargs) != 1 or (kwargs and "x" not in kwargs):
            return arrays.MISSING
        return args[0] if args else kwargs["x"]

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | Declined:
        x = self.x_of(args, kwargs)
        if x is arrays.MISSING:
            return reasons.ARGUMENTS
        return matched_inputs(served, x)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (keras_args(served, values),), {}
