"""A worker's share cut again when the host's CPU limits change while it runs. Pure.

The worker keeps what identifies it (its index or rank, the worker count, its lease slot and
where the share came from); only the cut is redone against the host under the new limits, by
the same rules as at the claim (coordination/__init__.py, slices.py): a sliced worker gets slice
``index`` of ``count`` of the new capacity (under a smaller quota, fewer whole cores are shared
out), a whole-host worker the new budget, an even split ``capacity // count``.
"""

from __future__ import annotations

import re

from tf_autopar.coordination import LAUNCHER, Share, _from_slice, _whole
from tf_autopar.coordination.slices import Slice, capacity_cores, slice_for
from tf_autopar.topology.model import Topology

#: Shares that are the whole host (as this process sees it): they follow its budget.
_WHOLE_SOURCES = ("placed", "single", LAUNCHER)
NOTE = "re-cut at run time for the host's new CPU limits"
_SHARING = re.compile(r"; \d+ workers for \d+ core\(s\): [^;]*\(sharing rule\)")  # _from_slice adds it anew


def reshare(share: Share, host: Topology) -> Share:
    """``share`` re-cut for ``host`` (the host topology under its new limits)."""
    note = f"{_SHARING.sub('', share.note.partition('; ' + NOTE)[0])}; {NOTE}".lstrip("; ")
    lease = share._lease
    if share.source == "even-split":
        budget = max(1, len(capacity_cores(host, share.count)) // max(1, share.count))
        return _whole(host, share.source, share.count, share.index, note, budget=budget, lease=lease)
    if share.source in _WHOLE_SOURCES or share.count <= 1 or share.index is None:
        return _whole(host, share.source, share.count, share.index, note, lease=lease)
    base = slice_for(host, share.index % share.count, share.count)
    if share.index >= share.count:  # more processes than the count: it doubles up, as at the claim
        base = Slice(
            share.index, base.cpus, max(1, base.cores // 2) if base.shared_with == 1 else 1, base.shared_with + 1
        )
    return _from_slice(base, share.count, share.source, host, note, lease, index=share.index)
