"""Notes for the person at the terminal: progress of slow steps, what was written, how to use
an output. On stderr, so that stdout stays what scripts parse."""
from __future__ import annotations

import sys


def say(command: str, message: str) -> None:
    """One line ``tf-autopar COMMAND: message`` on stderr, flushed at once (it precedes a wait)."""
    print(f"tf-autopar {command}: {message}", file=sys.stderr, flush=True)
