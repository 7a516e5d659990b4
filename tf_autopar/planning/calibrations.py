"""Small-op thresholds measured on processors this project has run on. Pure data.

``tf-autopar calibrate`` measures a host's own threshold and the plan cache keeps it; a host
without one uses the entry for its processor model (``/proc/cpuinfo``'s "model name") when it
is listed here, else the planner's SMALL_OP_WORK (fitted on an AMD EPYC host), said as a guess.
Each entry names the measurement it came from (benchmarks/results/).
"""

from __future__ import annotations

from typing import Any

MEASURED: dict[str, dict[str, Any]] = {
    # 2-core KVM guest (AVX-512, AMX), TF 2.21: `tf-autopar calibrate --rounds 3`, 25 s;
    # benchmarks/results/calibrate_xeon_2c.json. One thread: 344 us per 19.5 M-MAC convolution against
    # 415 us with two; at 37.7 M two threads won, 461 against 600 us.
    "Intel(R) Xeon(R) Processor": {
        "small_op_work": 27_131_904,
        "date": "2026-11-30",
        "where": "measured on this processor model",
        "why": "one thread held up to 19.5 M multiply-adds, the budget won from 37.7 M on",
    },
}


def for_processor(model: str | None) -> dict[str, Any] | None:
    """The measured entry for this processor model, or None."""
    entry = MEASURED.get((model or "").strip())
    return dict(entry) if entry else None
