"""Thread planning: ``plan()`` (the rule, see planner.py) and ``baseline_plan()`` (published
recommendations), both returning a ThreadPlan that can explain and render itself.
graph_plan.py gives a graph's plan from what was measured for it (the runtime's way in) and the
profile summary a plan is kept with."""

from __future__ import annotations

from tf_autopar.planning.baselines import BASELINES, Baseline, baseline_plan
from tf_autopar.planning.baselines import names as baseline_names
from tf_autopar.planning.modes import MODES
from tf_autopar.planning.plan import FORMATS, Setting, ThreadPlan
from tf_autopar.planning.planner import plan
from tf_autopar.planning.user_settings import UserSettings, read_user_settings

__all__ = [
    "BASELINES",
    "Baseline",
    "FORMATS",
    "MODES",
    "Setting",
    "ThreadPlan",
    "UserSettings",
    "baseline_names",
    "baseline_plan",
    "plan",
    "read_user_settings",
]
