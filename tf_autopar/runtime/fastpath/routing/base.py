"""A calling convention: how one kind of call reaches a served function, and its registry.

A convention finds the functions it serves on a loaded object, installs the route on each (and
takes it away), reads a call's inputs as arrays in placeholder order (or declines the call: the
original then runs it), runs the call the original way, rebuilds a call from arrays, and gives
the frozen outputs back in the form the original returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

#: What a convention is found on (``Convention.source``).
SAVED_MODEL, KERAS_MODEL = "tf.saved_model.load", "keras.models.load_model"
#: The attribute a routed object keeps its Function in.
ATTR = "_tf_autopar_served"

Matched = tuple[list[Any], int]  # (the call's arrays in placeholder order, its batch)
#: Why a call was not routed, in a few words (a constant: counted without formatting on the
#: request path; status() says "312 calls <reason>: not routed").
Declined = str


class Convention(Protocol):
    kind: str  # "signature", "positional", "keras call", "keras predict", ...
    source: str  # SAVED_MODEL or KERAS_MODEL: what find() looks at

    def find(self, loaded: Any) -> list[tuple[str, Any]]:
        """(name, target) of each function on ``loaded`` this convention serves."""
        ...

    def inputs(self, target: Any) -> tuple[Any, list[tuple[str, Any]], Any]:
        """(its concrete function or None until traced, the inputs as (name, TensorSpec) in the
        frozen graph's placeholder order, the structure of its positional arguments or None)."""
        ...

    def trace(self, target: Any) -> Any:
        """Its concrete function, traced now (builder thread) when ``inputs`` gave None."""
        ...

    def install(self, target: Any, served: Function) -> None: ...

    def uninstall(self, target: Any, served: Function) -> None: ...

    def match(self, served: Function, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Matched | Declined:
        """The call's arrays and batch when the fast path serves it exactly as the original would;
        else why not (one of reasons.py's constants)."""
        ...

    def original(self, served: Function, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call as it would have run without us."""
        ...

    def call_args(self, served: Function, arrays: list[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A call of the original with ``arrays`` as its inputs (to compare and time)."""
        ...

    def outputs(self, structure: Any, values: list[Any]) -> Any:
        """The frozen graph's flat outputs in the form the original returns."""
        ...


_conventions: dict[str, Convention] = {}


def register(convention: Convention) -> Convention:
    _conventions[convention.kind] = convention
    return convention


def get(kind: str) -> Convention:
    return _conventions[kind]


def for_source(source: str) -> list[Convention]:
    """The conventions that look at ``source``'s objects, in registration order."""
    return [c for c in _conventions.values() if c.source == source]


def routed(target: Any, attr: str = ATTR) -> bool:
    return vars(target).get(attr) is not None
