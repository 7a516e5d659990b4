"""Routing by class swap: the function object's class becomes a subclass whose ``__call__`` is
``routed_call``. The user's objects stay theirs (identity, attributes, ``isinstance``);
``restore`` swaps the class back. A signature map that routes would return other objects than
the ones TensorFlow hands out, and a hook inside ``_call_flat`` would also catch calls made while
a graph is being built, which must stay graph calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath.routing.base import ATTR

if TYPE_CHECKING:
    from tf_autopar.runtime.fastpath.function import Function

_routed_classes: dict[type, type] = {}


def routed_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A routed object's ``__call__``: its served function answers (ServedFunction.__call__), or,
    once unrouted, its own class does."""
    served = self.__dict__.get(ATTR)
    if served is None:
        return type(self)._tf_autopar_original.__call__(self, *args, **kwargs)
    return served(self, args, kwargs)


def routed_class(cls: type) -> type:
    """The subclass of ``cls`` whose ``__call__`` is routed_call (made once per class)."""
    sub = _routed_classes.get(cls)
    if sub is None:
        namespace = {
            "__call__": routed_call,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "_tf_autopar_original": cls,
        }
        sub = _routed_classes[cls] = type(cls)(cls.__name__, (cls,), namespace)
    return sub


def swap(target: Any, served: Any) -> None:
    """``served``: what answers the calls (a Function, or positional.Overloads)."""
    target.__dict__[ATTR] = served
    object.__setattr__(target, "__class__", routed_class(type(target)))  # past a Keras layer's attribute tracking


def restore(target: Any, served: Function) -> None:
    vars(target).pop(ATTR, None)
    if type(target) is _routed_classes.get(served.original_class):
        object.__setattr__(target, "__class__", served.original_class)
