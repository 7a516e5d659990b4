"""build_window.py's summary of one process's calls (pure: synthetic calls, no model)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("build_window", ROOT / "benchmarks" / "build_window.py")
window = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(window)

# (start s, ms, served by the fast path): the first call traces, the fifth is the first served
CALLS = [
    [0.0, 900.0, False],
    [0.9, 150.0, False],
    [1.1, 170.0, False],
    [1.3, 400.0, False],
    [1.7, 90.0, True],
    [1.8, 300.0, False],
]


def test_an_enabled_process_counts_the_calls_before_the_first_served_one():
    s = window.summary(CALLS, None)
    assert s["switched_at_s"] == 1.7
    assert s["calls"] == 3 and s["median_ms"] == 170.0 and s["max_ms"] == 400.0  # tracing and later calls left out


def test_the_default_is_timed_over_the_same_seconds():
    calls = [[t, ms, False] for t, ms, _ in CALLS]
    s = window.summary(calls, until=1.2)
    assert s["switched_at_s"] is None and s["calls"] == 2 and s["max_ms"] == 170.0


def test_a_process_the_fast_path_never_served_counts_every_call_but_the_first():
    calls = [[t, ms, False] for t, ms, _ in CALLS]
    s = window.summary(calls, None)
    assert s["calls"] == 5 and s["max_ms"] == 400.0
