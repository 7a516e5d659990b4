"""Ending a child that leads a process group of its own, with everything it started."""

from __future__ import annotations

import os
import signal


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads; a group already gone (or not ours) is no error."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
