"""This process's share of the host, claimed for enable() (tf_autopar.coordination).

The lease slot and the narrowed topology the plans are made for are changes of enable()'s:
both are kept in its record (applied.py), which gives the slot back and plans for the whole
host again at disable().
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tf_autopar.coordination import claim_share as _claim
from tf_autopar.runtime.applied import SHARE
from tf_autopar.runtime.safety import fail_open
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.coordination import Share
    from tf_autopar.runtime.applied import Applied


def claim(record: Applied) -> Share | None:
    """Claim this process's share into ``record`` and plan for it; None when alone or when
    coordination failed (fail open: plan for the whole host)."""
    try:
        share = _claim(STATE.host_topology())
    except Exception as exc:
        fail_open("coordinate with the other processes on this host", exc)
        return None
    record.hold(share)
    STATE.use_share(share.topology(STATE.host_topology()))
    record.on_restore("planning share", _plan_for_host, "plan for the whole host again", kind=SHARE)
    return share


def _plan_for_host() -> None:
    STATE.use_share(None)
