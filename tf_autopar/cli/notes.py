"""Notes for the person at the terminal: progress of slow steps, what was written, how to use
an output. On stderr, so that stdout stays what scripts parse."""

from __future__ import annotations

import sys
from typing import Callable


def say(command: str, message: str) -> None:
    """One line ``tf-autopar COMMAND: message`` on stderr, flushed at once (it precedes a wait)."""
    print(f"tf-autopar {command}: {message}", file=sys.stderr, flush=True)


def sayer(command: str, quiet: bool = False) -> Callable[[str], None]:
    """``say`` bound to ``command``, for a library's ``progress=`` callback; silent when ``quiet``
    (``--json``: stderr then carries nothing but errors)."""
    if quiet:
        return lambda message: None
    return lambda message: say(command, message)
