"""Which hooks enable() installs, and when: now if TensorFlow (and Keras) is imported, else right
after it is (import_hook.py).

The hooks are modules implementing ``applied.Hook``: sessions.py (per-Session pools),
functions.py (tf.function at first trace), model_loads.py (planning at model load). Each is
installed into enable()'s record, which undoes its patches at disable(); one whose install
fails is left out with one warning (fail open), the others still go in.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NamedTuple

from tf_autopar.runtime import controller, functions, model_loads, sessions
from tf_autopar.runtime.import_hook import ImportHook
from tf_autopar.runtime.safety import fail_open
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.runtime.applied import Applied, Hook


class Wanted(NamedTuple):
    """enable()'s sessions=, functions=, loaders= arguments."""

    sessions: bool = True
    functions: bool = True
    loaders: bool = True

    def hooks(self) -> list[Hook]:
        chosen = ((self.sessions, sessions), (self.functions, functions), (self.loaders, model_loads))
        return [hook for want, hook in chosen if want]


def install(record: Applied, wanted: Wanted) -> None:
    """Install the wanted hooks into ``record`` now if TensorFlow is imported, else when it is."""
    if not any(wanted):
        return
    later = ImportHook(record, lambda name: _on_import(record, wanted, name))
    if controller.tf_loaded() and "tensorflow.python.client.session" in sys.modules:
        install_now(record, wanted)
    else:
        later.arm("tensorflow")
    if wanted.loaders and "keras" not in sys.modules:
        later.arm("keras")


def install_now(record: Applied, wanted: Wanted) -> None:
    for hook in wanted.hooks():
        if record.installed(hook):
            continue
        try:
            record.install(hook)
        except Exception as exc:  # its partial changes are undone already (Applied.install)
            fail_open(f"install the hook for {hook.PATCH_NAME}", exc)


def _on_import(record: Applied, wanted: Wanted, name: str) -> None:
    """Right after ``import tensorflow`` (all hooks) or ``import keras`` (its model loaders)."""
    if not STATE.enabled or STATE.applied is not record:
        return  # disabled since, or a later enable() has its own record
    try:
        with STATE.lock:
            if name == "tensorflow":
                install_now(record, wanted)
            elif wanted.loaders and record.installed(model_loads):
                model_loads.install_keras(record)
    except Exception as exc:
        fail_open(f"install its {name} hooks", exc)
