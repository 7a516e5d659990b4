"""Small-op thresholds measured on processors this project has run on. Pure data.

``tf-autopar calibrate`` measures a host's own threshold and the plan cache keeps it; a host
without one uses the entry for its processor model (``/proc/cpuinfo``'s "model name") when it
is listed here, else the planner's SMALL_OP_WORK (fitted on an AMD EPYC host), said as a guess.
Each entry names the measurement it came from (benchmarks/results/).
"""
from __future__ import annotations

from typing import Any

MEASURED: dict[str, dict[str, Any]] = {}


def for_processor(model: str | None) -> dict[str, Any] | None:
    """The measured entry for this processor model, or None."""
    entry = MEASURED.get((model or "").strip())
    return dict(entry) if entry else None
