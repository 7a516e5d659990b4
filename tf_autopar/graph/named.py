"""Model names a program may pass instead of a path: ``analyze("alexnet")``, ``enable("alexnet")``.

The library knows no model by name. A package of models registers itself here when it is
imported, so the library never imports it: ``import tf_autopar_workloads`` registers the fifteen
bundled workloads, after which ``tf_autopar.analyze("alexnet")`` and ``tf_autopar.enable("alexnet")``
resolve the name through it. The CLI, ``validate``, ``bench`` and ``tune`` import the bundled
workloads themselves, so names work there without the import.

A provider gives the names it knows and a GraphDef for one of them::

    from tf_autopar.graph import named

    named.register(__name__, names=my_names, graph_def=my_graph_def)
    # my_graph_def(name, *, mode="infer"|"train", size="tiny"|"paper", batch=None) -> GraphDef
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from tensorflow.core.framework.graph_pb2 import GraphDef


class GraphDefFn(Protocol):
    def __call__(self, name: str, *, mode: str, size: str, batch: int | None) -> GraphDef: ...


@dataclass(frozen=True)
class Provider:
    """One registered package of named models."""

    module: str  # importing it registers the provider (a child process resolving names imports it)
    names: Callable[[], list[str]]
    graph_def: GraphDefFn


_PROVIDERS: dict[str, Provider] = {}


def register(module: str, names: Callable[[], list[str]], graph_def: GraphDefFn) -> None:
    """Register (or re-register) the models of ``module``; idempotent, so a re-import is harmless."""
    _PROVIDERS[module] = Provider(module, names, graph_def)


def find(name: str) -> Provider | None:
    """The provider that knows ``name``, or None."""
    for provider in _PROVIDERS.values():
        if name in provider.names():
            return provider
    return None


def names() -> list[str]:
    """Every registered model name, sorted."""
    return sorted({n for p in _PROVIDERS.values() for n in p.names()})


def modules() -> list[str]:
    """The modules that registered providers, for a child process to import before resolving."""
    return list(_PROVIDERS)


def not_a_model(name: str) -> str:
    """The error for a name that is neither a path nor a registered model name, listing the
    names (a misspelt workload is the usual cause)."""
    known = names()
    if not known:
        return (
            f"{name!r} is neither an existing path nor a registered model name (no names are registered: "
            "`import tf_autopar_workloads` registers the bundled workloads)"
        )
    return f"{name!r} is neither an existing path nor a bundled workload (workloads: {', '.join(known)})"


def unknown(name: str) -> ValueError:
    """The ValueError for an unknown name where only a name is accepted."""
    known = names()
    if not known:
        return ValueError(
            f"unknown model name {name!r}: no names are registered "
            "(`import tf_autopar_workloads` registers the bundled workloads)"
        )
    return ValueError(f"unknown workload {name!r}; choose from {', '.join(known)}")
