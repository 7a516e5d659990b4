"""The one child entry point and its protocol: ``python -m tf_autopar.measure.child MODULE:FUNCTION [ARG ...]``.

Why one: every measurement runs in a fresh process (TensorFlow fixes its pools at start), and
each child must answer its parent the same way. The parent names what to run (loky's model:
the child imports the function by its qualified name), so this module knows nothing of what
it runs and every package may use it without importing upward. ``FUNCTION(args)`` gets the
remaining arguments and returns a dict.

The protocol, on stdout (TensorFlow's logging goes to stderr):

- success: exit status 0 and one JSON object, the function's dict;
- failure: one JSON object ``{"error": MESSAGE, "exit": CODE}``, the line
  ``tf-autopar: error: MESSAGE`` on stderr, and exit status CODE: ``EXIT_BAD_INPUT`` (2) when
  the function raised ``ChildError`` for input it cannot use (the parent shows MESSAGE to the
  user), its own code for other ``ChildError``s, ``EXIT_FAILED`` (1, the traceback on stderr)
  for anything else.

The parent's side is runner.py: ``run_child`` reads the object (``ChildResult.payload``, or the
failure's ``ChildResult.reported``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any, Callable, Sequence

MODULE = "tf_autopar.measure.child"
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
ERROR_PREFIX = "tf-autopar: error: "


class ChildError(ValueError):
    """Raised by a child function: ``message`` for the parent, ``code`` the exit status (a
    ValueError: the same functions serve the CLI, which reports bad input as such)."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def command(target: str, args: Sequence[str] = ()) -> list[str]:
    """The command line that runs ``target`` ("module:function") with ``args`` in a fresh process."""
    resolve_name(target)  # a typo fails here, in the parent, not as a child's crash
    return [sys.executable, "-m", MODULE, target, *args]


def resolve_name(target: str) -> tuple[str, str]:
    module, sep, function = target.partition(":")
    if not sep or not module or not function.isidentifier():
        raise ValueError(f"child target {target!r}: expected MODULE:FUNCTION")
    return module, function


def emit(payload: dict[str, Any]) -> None:
    """Success: the one JSON object for the parent."""
    sys.stdout.write(json.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Failure: the error object on stdout, the message on stderr; returns the exit status."""
    sys.stderr.write(f"{ERROR_PREFIX}{message}\n")
    sys.stderr.flush()
    emit({"error": message, "exit": code})
    return code


def run(function: Callable[[list[str]], dict[str, Any]], args: Sequence[str]) -> int:
    """Call ``function(args)`` under the protocol; returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        payload = function(list(args))
    except ChildError as exc:
        return fail(str(exc), exc.code)
    except Exception as exc:  # noqa: BLE001 - any failure becomes the error object; traceback on stderr
        traceback.print_exc()
        return fail(f"{type(exc).__name__}: {exc}", EXIT_FAILED)
    if not isinstance(payload, dict):
        return fail(f"the child function returned {type(payload).__name__}, not a dict", EXIT_FAILED)
    emit(payload)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        return fail(f"usage: python -m {MODULE} MODULE:FUNCTION [ARG ...]")
    try:
        module, name = resolve_name(argv[0])
        function = getattr(importlib.import_module(module), name)
    except (ValueError, ImportError, AttributeError) as exc:
        return fail(f"cannot run {argv[0]!r}: {exc}", EXIT_FAILED)
    return run(function, argv[1:])


if __name__ == "__main__":
    # Run as the module the child functions import (this file as __main__ is a second copy whose
    # ChildError they would not raise).
    sys.exit(importlib.import_module(MODULE).main())
