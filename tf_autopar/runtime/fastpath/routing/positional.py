"""Restored functions called positionally: ``loaded.serve(x)`` (what ``keras.Model.export`` writes),
a restored tf.function with a single input signature."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import sessions
from tf_autopar.runtime.fastpath.routing import arrays, classes
from tf_autopar.runtime.fastpath.routing.base import SAVED_MODEL, Matched

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

KIND = "positional"


def specs(concrete: Any) -> list[tuple[str, Any]] | None:
    """The inputs (name, TensorSpec) in placeholder order, or None when not a flat set of tensors."""
    import tensorflow as tf

    sig = getattr(concrete, "structured_input_signature", None)
    if not (isinstance(sig, tuple) and len(sig) == 2):
        return None
    args, kwargs = sig
    if kwargs or not args:
        return None
    return arrays.tensor_specs(
        [(getattr(s, "name", "") or f"input {i}", s) for i, s in enumerate(tf.nest.flatten(args))]
    )


class RestoredFunctionCalls:
    kind = KIND
    source = SAVED_MODEL
    install, uninstall = staticmethod(classes.swap), staticmethod(classes.restore)

    def find(self, loaded: Any) -> list[tuple[str, Any]]:
        out = []
        for name, value in sorted(vars(loaded).items()):
            if name.startswith("_") or type(value).__name__ != "RestoredFunction":
                continue
            concretes = list(getattr(value, "concrete_functions", ()) or ())
            if len(concretes) == 1 and specs(concretes[0]) is not None:
                out.append((name, value))
        return out

    def inputs(self, target: Any) -> tuple[Any, list[tuple[str, Any]], Any]:
        concrete = list(target.concrete_functions)[0]
        return concrete, specs(concrete) or [], concrete.structured_input_signature[0]

    def trace(self, target: Any) -> Any:
        return list(target.concrete_functions)[0]

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | None:
        import tensorflow as tf

        if kwargs or len(args) != len(served.arg_structure):
            return None
        try:  # nested inputs (a dict for a Keras model with named inputs) flatten as the spec does
            tf.nest.assert_same_structure(served.arg_structure, args)
        except (ValueError, TypeError):
            return None
        return arrays.arrays_of(tf.nest.flatten(args), served.feeds)

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with sessions.bypass():  # its trace is the fast path's to plan, not the tf.function hook's to warn about
            return served.original_class.__call__(target, *args, **kwargs)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        import tensorflow as tf

        return tuple(tf.nest.pack_sequence_as(served.arg_structure, values)), {}

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        return arrays.as_tensors(structure, values)
