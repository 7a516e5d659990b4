"""Host calibration of the small-op threshold (tuning/calibrate.py): pure decision, real store."""

from __future__ import annotations

import os

import pytest

from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning import plan
from tf_autopar.planning.planner import SMALL_OP_WORK
from tf_autopar.runtime import cache
from tf_autopar.tuning.calibrate import SIDES, calibrate, threshold, work_of

WORKS = [work_of(s) for s in SIDES]


def ladder(crossover: float, gain: float = 1.6) -> tuple[dict[int, float], dict[int, float]]:
    """Per-op times: one thread at 10 ns per M multiply-adds plus nothing; the budget pays a 20 us
    fixed cost but runs the arithmetic ``gain`` times faster, so it wins above ``crossover``."""
    one = {w: w * 1e-8 for w in WORKS}
    fixed = crossover * 1e-8 * (1 - 1 / gain)
    many = {w: fixed + w * 1e-8 / gain for w in WORKS}
    return one, many


def test_threshold_sits_between_the_last_loss_and_the_first_lasting_win():
    one, many = ladder(crossover=20e6)
    value, why = threshold(one, many)
    below = max(w for w in WORKS if w < 20e6)
    above = min(w for w in WORKS if many[w] * 1.05 < one[w])
    assert below <= value <= above and "won from" in why


def test_threshold_edge_cases():
    one, many = ladder(crossover=1e3)  # the budget wins everywhere
    assert threshold(one, many)[0] == WORKS[0]
    one, many = ladder(crossover=1e12)  # never
    value, why = threshold(one, many)
    assert value is None and "never beaten" in why
    noisy_one, noisy_many = ladder(crossover=5e6)
    noisy_many[WORKS[-2]] = noisy_one[WORKS[-2]] * 1.2  # a late loss: the win must last to the top
    assert threshold(noisy_one, noisy_many)[0] > WORKS[-3]
    assert threshold({}, {})[0] is None


def test_calibrate_stores_for_this_host_and_the_planner_uses_it(tmp_path, monkeypatch):
    from tf_autopar.topology import detect_topology

    t = detect_topology(cpu_details=False)
    if t.cpu_budget < 2:
        pytest.skip("needs a budget of 2 CPUs")
    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path))
    one, many = ladder(crossover=30e6)
    calls = []

    def run(intra, rnd):
        calls.append((intra, rnd))
        return one if intra == 1 else many

    entry = calibrate(2, run=run)
    assert calls == [(1, 1), (t.cpu_budget, 1), (1, 2), (t.cpu_budget, 2)]  # interleaved rounds
    assert 16e6 < entry["small_op_work"] < 45e6
    stored = cache.lookup_calibration(cache.host_key(t))
    assert stored["small_op_work"] == entry["small_op_work"]
    # a typical op of 10.8 M (MobileNetV2 at batch 1): 1 thread under this calibration, all CPUs by default
    prof = GraphProfile(heavy_ops=53, depth=53, avg_width=1, max_width=1, typical_op_work=10_800_000)
    assert plan(t, prof, env={}, calibration=stored).intra_op == 1
    default = plan(t, prof, env={})
    assert default.intra_op == t.cpu_budget and f"{SMALL_OP_WORK / 1e6:.1f} M" in default.explain()
    assert "calibrated on this host" in plan(t, prof, env={}, calibration=stored).explain()
    assert os.path.exists(tmp_path / "plans.json")
