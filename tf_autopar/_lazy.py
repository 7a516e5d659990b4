"""Lazy re-exports for package ``__init__`` files: a name is imported from its module at first
use, so importing the package never imports TensorFlow (or anything heavy) on its own."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, resolving each of ``exports`` (name -> module)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        names = set(vars(importlib.import_module(package))) | set(exports)
        return sorted(names)

    return __getattr__, __dir__
