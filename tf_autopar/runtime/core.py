"""Old names, kept only until their callers move; nothing new imports this module.

What was here lives in runtime/plans.py (this process's plans), planning/graph_plan.py (the pure
parts) and runtime/state.py (the host and this process's share: ``STATE.host_topology()``,
``STATE.topology()``, ``STATE.use_share()``, ``STATE.use_host()``). Still called by name from
runtime/fastpath.py, sessions.py, frozen.py, quota_watch.py, tuning/inprocess.py, models/child.py,
models/plan_child.py and cli/plan_cmd.py: delete this module once they import the new homes.
"""

from __future__ import annotations

from tf_autopar.planning.graph_plan import (  # noqa: F401
    CACHED_PROFILE_FIELDS,
    cached_profile,
    effective_mode,
    profile_from_dict,
    profile_summary,
)
from tf_autopar.runtime.plans import analyze_graph, calibration_for, plan_for, store_plan, tuned_for  # noqa: F401
from tf_autopar.runtime.state import STATE

host_topology = STATE.host_topology
topology = STATE.topology
use_share = STATE.use_share
use_host = STATE.use_host
