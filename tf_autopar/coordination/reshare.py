"""A worker's share cut again when the host's CPU limits change while it runs. Pure.

The worker keeps what identifies it (its index or rank, the worker count, its lease slot and
where the share came from); only the cut is redone against the host under the new limits, by
the same rules as at the claim (claim.py, slices.py): a sliced worker gets slice ``index`` of
``count`` of the new capacity (under a smaller quota, fewer whole cores are shared out), a
whole-host worker the new budget, an even split ``capacity // count``.
"""

from __future__ import annotations

from tf_autopar.coordination.ranks import LAUNCHER
from tf_autopar.coordination.share import SHARING_NOTE, Share, from_slice, whole
from tf_autopar.coordination.slices import capacity_cores, doubled_up, slice_for
from tf_autopar.topology.model import Topology

#: Shares that are the whole host (as this process sees it): they follow its budget.
_WHOLE_SOURCES = ("placed", "single", LAUNCHER)
NOTE = "re-cut at run time for the host's new CPU limits"


def reshare(share: Share, host: Topology) -> Share:
    """``share`` re-cut for ``host`` (the host topology under its new limits)."""
    note = f"{SHARING_NOTE.sub('', share.note.partition('; ' + NOTE)[0])}; {NOTE}".lstrip("; ")
    lease = share.lease
    if share.source == "even-split":
        budget = max(1, len(capacity_cores(host, share.count)) // max(1, share.count))
        return whole(host, share.source, share.count, share.index, note, budget=budget, lease=lease)
    if share.source in _WHOLE_SOURCES or share.count <= 1 or share.index is None:
        return whole(host, share.source, share.count, share.index, note, lease=lease)
    if share.index >= share.count:  # more processes than the count: it doubles up, as at the claim
        base = doubled_up(host, share.index, share.count)
    else:
        base = slice_for(host, share.index, share.count)
    return from_slice(base, share.count, share.source, host, note, lease, index=share.index)
