"""A meta-path finder that calls back right after ``tensorflow`` (or ``keras``) is imported.

Keeps enable() before ``import tensorflow`` cheap (no TF import) while still catching the first
Session and the first model load: hooks.py installs the hooks from the callback. The finder
only watches for the names it was armed with, removes itself once it has seen them all, and
is put on ``sys.meta_path`` through enable()'s record, which takes it off at disable().
"""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from tf_autopar.runtime.applied import Applied


class ImportHook:
    """Calls ``on_import(name)`` once the module ``name`` has executed."""

    def __init__(self, record: Applied, on_import: Callable[[str], None]) -> None:
        self.record = record
        self.on_import = on_import
        self.watching: set[str] = set()

    def arm(self, name: str) -> None:
        if not self.watching:
            self.record.add(sys.meta_path, self, "remove tf_autopar's import hook", index=0)  # type: ignore[arg-type]
        self.watching.add(name)

    def disarm(self, name: str) -> None:
        self.watching.discard(name)
        if not self.watching:
            try:
                sys.meta_path.remove(self)  # type: ignore[arg-type]
            except ValueError:
                pass

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.watching:
            return None
        self.disarm(name)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module
        on_import = self.on_import

        def exec_module(module: Any) -> None:
            original_exec(module)
            on_import(name)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
