"""Signature calls: ``loaded.signatures[name](**inputs)`` by keyword, and positionally as
TensorFlow's SavedModel guide calls them (``infer(tf.constant(x))``).

A signature takes positional arguments only as tensors, and only as many as it allows (one, when
it has a single input: a SignatureDef's inputs are unordered, so several are keyword-only); they
bind to its argument keywords in order (ConcreteFunction._call_with_flat_signature). A call the
fast path serves is one the original would bind the same way; any other (numpy arrays
positionally, too many arguments, a name given twice) goes to the original, which raises its own
error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath.routing import arrays, classes, reasons
from tf_autopar.runtime.fastpath.routing.base import SAVED_MODEL, Declined, Matched

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


def positional_names(concrete: Any, names: list[str]) -> tuple[str, ...]:
    """The inputs a call may give positionally, in order: the signature's argument keywords up to
    the positional arguments it allows, when they are its inputs' names (else none)."""
    keywords = [str(k) for k in (getattr(concrete, "_arg_keywords", None) or ())]
    allowed = getattr(concrete, "_num_positional_args", 0)
    if not isinstance(allowed, int) or allowed < 1 or not set(keywords[:allowed]) <= set(names):
        return ()
    return tuple(keywords[:allowed])


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
        found = specs(target) or []
        # the "argument structure" of a signature: the names its positional arguments bind to
        return target, found, positional_names(target, [n for n, _ in found])

    def trace(self, target: Any) -> Any:
        return target

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | Declined:
        if args:
            return self._positional(served, args, kwargs)
        if len(kwargs) != len(served.specs):
            return reasons.ARGUMENTS
        return arrays.arrays_of([kwargs.get(n, arrays.MISSING) for n, _ in served.specs], served.feeds)

    def _positional(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | Declined:
        import tensorflow as tf

        names = served.arg_structure
        if len(args) > len(names) or len(args) + len(kwargs) != len(served.specs):
            return reasons.ARGUMENTS
        for value in args:
            if not isinstance(value, tf.Tensor):  # the original raises: "expected argument #0 to be a Tensor"
                return reasons.PYTHON if isinstance(value, (list, tuple, int, float)) else reasons.NUMPY_POSITIONAL
        bound = dict(zip(names, args))
        if any(n in kwargs for n in bound):
            return reasons.ARGUMENTS  # a name given twice: the original raises
        bound.update(kwargs)
        return arrays.arrays_of([bound.get(n, arrays.MISSING) for n, _ in served.specs], served.feeds)

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return served.original_class.__call__(target, *args, **kwargs)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {n: a for (n, _), a in zip(served.specs, values)}

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        return arrays.as_tensors(structure, values)
