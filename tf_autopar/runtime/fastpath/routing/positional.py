"""Restored functions called positionally: ``loaded.serve(x)`` (what ``keras.Model.export`` writes),
a restored tf.function with one input signature or several.

With several, TensorFlow's restored function calls the first of its concrete functions, in their
saved order, whose inputs the call's fit (the same structure, each input's dtype equal and its
shape compatible; function_deserialization.restored_function_body). The fast path serves each
concrete function as a served function of its own (named ``serve[2 of 3]``) and a call goes to the
first of them, in that order, that takes it exactly: for arrays and tensors of exact dtypes this
is the concrete function the original picks. A call none takes runs the original."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime import sessions
from tf_autopar.runtime.fastpath.routing import arrays, classes, reasons
from tf_autopar.runtime.fastpath.routing.base import ATTR, SAVED_MODEL, Declined, Matched

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


class Overloads:
    """The served functions of one restored function, one per concrete function in saved order:
    the object the routed class finds in ATTR. A call goes to the first that takes it."""

    def __init__(self) -> None:
        self.served: list[Function] = []

    def __call__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        first: Any = None
        for served in self.served:
            matched = served.matched(args, kwargs)
            if matched.__class__ is not str:
                return served.answer(target, args, kwargs, matched)
            if first is None:
                first = matched
        # none took it: counted on the first (its reason), the original picks or raises
        head = self.served[0]
        whole = len(self.served) == 1 or first in (reasons.OFF, reasons.GRAPH, reasons.FAILED)  # not about the inputs
        return head.decline(target, args, kwargs, first if whole else reasons.NO_MATCH)


class RestoredFunctionCalls:
    kind = KIND
    source = SAVED_MODEL

    def find(self, loaded: Any) -> list[tuple[str, Any]]:
        out = []
        for name, value in sorted(vars(loaded).items()):
            if name.startswith("_") or type(value).__name__ != "RestoredFunction":
                continue
            concretes = list(getattr(value, "concrete_functions", ()) or ())
            if not concretes or any(specs(c) is None for c in concretes):
                continue  # one not a flat set of tensors: the original's choice could not be followed
            if len(concretes) == 1:
                out.append((name, value))
            else:
                out.extend((f"{name}[{i + 1} of {len(concretes)}]", value) for i in range(len(concretes)))
        return out

    def _index(self, target: Any) -> int:
        """Which concrete function the served function being made serves: they are made and
        installed one after the other in saved order (roster.route), so the count installed."""
        overloads = vars(target).get(ATTR)
        return len(overloads.served) if isinstance(overloads, Overloads) else 0

    def inputs(self, target: Any) -> tuple[Any, list[tuple[str, Any]], Any]:
        concrete = list(target.concrete_functions)[self._index(target)]
        return concrete, specs(concrete) or [], concrete.structured_input_signature[0]

    def trace(self, target: Any) -> Any:
        raise RuntimeError("a restored function's concrete functions are known at load")  # inputs() gives it

    def install(self, target: Any, served: Function) -> None:
        overloads = vars(target).get(ATTR)
        if not isinstance(overloads, Overloads):
            overloads = Overloads()
            classes.swap(target, overloads)  # type: ignore[arg-type]
        overloads.served.append(served)

    def uninstall(self, target: Any, served: Function) -> None:
        classes.restore(target, served)

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | Declined:
        import tensorflow as tf

        if kwargs or len(args) != len(served.arg_structure):
            return reasons.ARGUMENTS
        try:  # nested inputs (a dict for a Keras model with named inputs) flatten as the spec does
            tf.nest.assert_same_structure(served.arg_structure, args)
        except (ValueError, TypeError):
            return reasons.PYTHON if any(isinstance(a, (list, int, float)) for a in args) else reasons.ARGUMENTS
        return arrays.arrays_of(tf.nest.flatten(args), served.feeds)

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with sessions.bypass():  # its trace is the fast path's to plan, not the tf.function hook's to warn about
            return served.original_class.__call__(target, *args, **kwargs)

    def call_args(self, served: Function, values: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        import tensorflow as tf

        return tuple(tf.nest.pack_sequence_as(served.arg_structure, values)), {}

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        return arrays.as_tensors(structure, values)
