"""Signature calls by keyword: ``loaded.signatures[name](**inputs)``, each input by its name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath.routing import arrays, classes
from tf_autopar.runtime.fastpath.routing.base import SAVED_MODEL, Matched

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

KIND = "signature"


def specs(concrete: Any) -> list[tuple[str, Any]] | None:
    """The inputs (name, TensorSpec) in placeholder order, or None when not a flat set of tensors."""
    import tensorflow as tf

    sig = getattr(concrete, "structured_input_signature", None)
    if not (isinstance(sig, tuple) and len(sig) == 2):
        return None
    args, kwargs = sig
    if args or not isinstance(kwargs, dict) or not kwargs:
        return None
    names = tf.nest.flatten({k: k for k in kwargs})  # TF flattens a dict in sorted key order
    return arrays.tensor_specs([(n, kwargs[n]) for n in names])


class SignatureCalls:
    kind = KIND
    source = SAVED_MODEL
    install, uninstall = staticmethod(classes.swap), staticmethod(classes.restore)

    def find(self, loaded: Any) -> list[tuple[str, Any]]:
        signatures = getattr(loaded, "signatures", None)
        if signatures is None or not hasattr(signatures, "items"):
            return []
        return [(f"signatures[{n!r}]", c) for n, c in sorted(signatures.items()) if specs(c) is not None]

    def inputs(self, target: Any) -> tuple[Any, list[tuple[str, Any]], Any]:
        return target, specs(target) or [], target.structured_input_signature[0]

    def trace(self, target: Any) -> Any:
        return target

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | None:
        if args or len(kwargs) != len(served.specs):
            return None
        return arrays.arrays_of([kwargs.get(n, arrays.MISSING) for n, _ in served.specs], served.feeds)

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return served.original_class.__call__(target, *args, **kwargs)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {n: a for (n, _), a in zip(served.specs, values)}

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        return arrays.as_tensors(structure, values)
