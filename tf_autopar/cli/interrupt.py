"""SIGTERM ends a command as Ctrl-C does: one mechanism for every command that starts children.

The commands that measure (bench, tune, validate, characterize, calibrate, trace's children,
the planning children of plan and analyze) run each child in its own session, so a terminal's
Ctrl-C reaches only this process, and they clean up on KeyboardInterrupt: the running child's
process group is killed and reaped (measure/runner.py), temporary directories are removed
(``Bench.close``, the characterize staging directory), partial results are kept. A supervisor's
SIGTERM (systemd, Kubernetes, ``kill``) must do the same, not end this process alone and leave
its children running under pid 1 with their files behind: ``sigterm_interrupts`` raises
KeyboardInterrupt for it. Later SIGTERMs while that cleanup runs are ignored, so a second one
cannot cut it short. SIGINT keeps Python's own handling (KeyboardInterrupt, or nothing when the
process was started with SIGINT ignored, as a background job is).
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Iterator


def _interrupt(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup that follows runs to its end
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (once); the previous handler comes back after."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
