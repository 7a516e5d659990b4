"""benchmarks/live_ceiling.py's floor: the figures docs/tuning.md quotes are computed here.

Pure: synthetic rows in the shape bench_live.py records, no TensorFlow.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_spec = importlib.util.spec_from_file_location("live_ceiling", ROOT / "benchmarks" / "live_ceiling.py")
live_ceiling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(live_ceiling)


def _row(times_ms: list[float], sweep_ms: dict[str, float], switched: float = 3.0) -> dict:
    n = len(times_ms)
    live = {
        "times_ms": [50.0] * 5 + times_ms,
        "phases": ["original"] * 5 + ["tuned"] * n,
        "status": f"batch 1: frozen session, ..., switched after {switched:.1f} s",
        "done_s": 12.0,
    }
    return {"model": "m", "batch": 1, "live": live, "sweep": {"sweep_ms": {**sweep_ms, "original": 99.0}}}


def test_the_pair_noise_is_the_spread_of_log_ratios_and_a_stall_does_not_own_it():
    rng = random.Random(1)
    times = [10.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(4000)]
    sigma, pairs = live_ceiling.pair_sigma(times)
    assert abs(sigma - 0.05 * math.sqrt(2)) < 0.006 and pairs >= 3990  # two calls' noise in each ratio
    stalled = list(times)
    stalled[100:110] = [1000.0] * 10
    assert abs(live_ceiling.pair_sigma(stalled)[0] - sigma) < 0.003
    assert math.isnan(live_ceiling.pair_sigma([10.0, 11.0])[0])  # too few to say


def test_pairs_grow_with_the_noise_and_shrink_with_the_gap():
    rng = random.Random(2)
    quiet = [10.0 * math.exp(rng.gauss(0, 0.02)) for _ in range(400)]
    noisy = [10.0 * math.exp(rng.gauss(0, 0.2)) for _ in range(400)]
    sweep = {"1x1": 10.0, "1x2": 10.0, "2x1": 20.0, "2x2": 10.5}
    q, n = live_ceiling.row_ceiling(_row(quiet, sweep)), live_ceiling.row_ceiling(_row(noisy, sweep))
    assert q["best"] == "1x1" and set(q["pairs"]) == {"1x2", "2x1", "2x2"}
    for other in ("1x2", "2x2"):
        assert n["pairs"][other] > 10 * q["pairs"][other]  # ~ sigma squared
    assert n["pairs"]["2x1"] < n["pairs"]["2x2"] < n["pairs"]["1x2"]  # a far setting is ruled out sooner
    d = live_ceiling.TOLERANCE  # an equal setting: rule out 3% at two standard errors
    assert n["pairs"]["1x2"] == math.ceil((2 * n["sigma"] / d) ** 2)
    floor = sum(p * 2 * n["call_ms"] / 1e3 for p in n["pairs"].values())
    assert math.isclose(n["floor_s"], floor) and n["switch_s"] == 3.0


def test_a_row_without_a_run_or_without_tuned_calls_says_so():
    assert "error" in live_ceiling.row_ceiling({"model": "m", "batch": 1, "live": {"error": "x"}, "sweep": {}})
    r = live_ceiling.row_ceiling(_row([], {"1x1": 10.0, "1x2": 11.0}))
    assert math.isnan(r["sigma"]) and math.isnan(r["pairs"]["1x2"])
    host = {"cpu_model": "c", "cpus": 2, "tf_version": "t", "date": "d"}
    never = live_ceiling.summarise({"host": host, "rows": [_row([], {"1x1": 10.0, "1x2": 11.0})]})
    assert never.splitlines()[-1].endswith("| unknown: no calls after tuning to measure the noise on |")
    rng = random.Random(3)
    slow = [1000.0 * math.exp(rng.gauss(0, 0.3)) for _ in range(60)]  # 1 s calls, 30% noise
    beyond = live_ceiling.summarise({"host": host, "rows": [_row(slow, {"1x1": 1000.0, "1x2": 1000.0})]})
    assert beyond.splitlines()[-1].endswith("| no: beyond this host's noise |")
