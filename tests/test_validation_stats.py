"""Pure parts of `tf-autopar validate`: statistics, search space, dedupe, summaries, schema."""

from __future__ import annotations

import copy
import math

import pytest

from tf_autopar.planning import baseline_plan
from tf_autopar.topology.model import Core, NumaNode, Topology
from tf_autopar.measure import stats
from tf_autopar.validation import results
from tf_autopar.validation.harness import distinct_slots
from tf_autopar.measure.configs import config_from_plan, thread_config
from tf_autopar.validation.space import baseline_configs, search_space


def topo(sockets: int = 1, cores_per_socket: int = 2, smt: int = 1, runtime: str = "eigen") -> Topology:
    cores: list[Core] = []
    n_cores = sockets * cores_per_socket
    for s in range(sockets):
        for c in range(cores_per_socket):
            # Linux numbering: first all cores' first threads, then the siblings
            core_index = s * cores_per_socket + c
            cpus = tuple(core_index + k * n_cores for k in range(smt))
            cores.append(Core(socket=s, core_id=c, cpus=cpus, numa_node=s))
    affinity = tuple(sorted(x for core in cores for x in core.cpus))
    nodes = tuple(
        NumaNode(s, tuple(sorted(x for core in cores if core.socket == s for x in core.cpus))) for s in range(sockets)
    )
    return Topology(
        host_cpus=len(affinity),
        affinity=affinity,
        cores=tuple(cores),
        numa_nodes=nodes,
        cpu_budget=len(affinity),
        threading_runtime=runtime,
    )


# ------------------------------------------------------------------ statistics


def test_median_quantile_geomean_on_hand_numbers():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert math.isnan(stats.median([]))
    assert stats.median([1.0, float("nan"), 3.0]) == 2.0
    assert stats.quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0
    assert stats.quantile([1.0, 2.0], 0.75) == pytest.approx(1.75)
    assert stats.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert stats.geomean([1.0, 0.0, -1.0, 4.0]) == pytest.approx(2.0)  # non-positive values skipped
    with pytest.raises(ValueError, match="quantile"):
        stats.quantile([1.0], 1.5)


def test_paired_ratios_use_only_rounds_where_both_ran():
    base = {1: 2.0, 2: 4.0, 3: 3.0}
    ours = {1: 1.0, 3: 1.5, 4: 9.0}
    assert stats.paired_ratios(base, ours) == [2.0, 2.0]
    c = stats.Comparison.of(base, ours)
    assert c.value == 2.0 and c.paired.n == 2
    assert c.ratio_of_medians == pytest.approx(3.0 / 1.5)


def test_paired_ratio_cancels_drift_that_medians_keep():
    # the machine slows down 2x per round; ours is always exactly 10% faster within a round
    base = {r: 1.0 * 2**r for r in (1, 2, 3, 4)}
    ours = {r: 0.9 / 1.0 * 2**r for r in (1, 2, 3, 4)}
    c = stats.Comparison.of(base, ours)
    assert c.paired.min == pytest.approx(1 / 0.9) and c.paired.max == pytest.approx(1 / 0.9)
    assert c.value == pytest.approx(1 / 0.9)


def test_best_picks_lowest_median_and_ignores_missing():
    assert stats.best({"a": 2.0, "b": float("nan"), "c": 1.0}) == "c"
    assert stats.best({"a": float("nan")}) is None


def test_below_optimum_reasons():
    def frac(ratios):
        return stats.Comparison(paired=stats.Spread.of(ratios), ratio_of_medians=stats.median(ratios))

    assert stats.below_optimum_reasons(frac([0.97, 0.99, 0.96]), (1, 2), (2, 1)) == []
    r = stats.below_optimum_reasons(frac([0.80, 0.82, 0.85]), (1, 2), (2, 1))
    assert len(r) == 1 and r[0].startswith("width misjudged") and "inter-op 2, ours 1" in r[0]
    r = stats.below_optimum_reasons(frac([0.80, 0.90, 1.05]), (2, 2), (2, 2))
    assert len(r) == 1 and r[0].startswith("noise")
    r = stats.below_optimum_reasons(frac([0.70, 0.90, 1.02]), (1, 2), (2, 2))
    assert [x.split(" ")[0] for x in r] == ["noise", "width"]
    r = stats.below_optimum_reasons(frac([0.8, 0.8, 0.8]), (2, 1), (2, 2))
    assert r == ["intra-op threads differ (optimum 2, ours 1)"]
    r = stats.below_optimum_reasons(frac([0.8]), (1, 1), (2, 2))
    assert r[0].startswith("width misjudged") and r[1].startswith("only 1 paired round")


# ------------------------------------------------------------------ search space


def test_two_cpu_host_searches_the_full_grid():
    space = search_space(topo())
    assert space.kind == "full"
    assert [c.name for c in space.configs] == ["1x1", "1x2", "2x1", "2x2"]
    assert space.full_size == 4 and "4 of 4" in space.describe()
    assert space.configs[1].env_dict == {"TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "2"}


def test_big_smt_host_gets_the_documented_bounded_grid():
    t = topo(sockets=2, cores_per_socket=28, smt=2)  # 112 logical CPUs
    space = search_space(t)
    assert space.kind == "grid"
    assert space.inter_values == (1, 2, 3, 4, 6, 8, 12, 16)
    assert space.intra_values == (1, 2, 4, 8, 16, 28, 32, 56, 64, 112)
    assert len(space.configs) == 80 and space.full_size == 112 * 112
    assert "80 of 12544" in space.describe()
    assert search_space(t, "none").configs == ()
    with pytest.raises(ValueError, match="unknown search space"):
        search_space(t, "huge")


def test_openmp_build_sweeps_the_openmp_threads_apart_from_tfs_intra_op_pool():
    space = search_space(topo(runtime="openmp"))
    assert [c.name for c in space.configs] == ["1x1", "1x1x2", "1x2x1", "1x2", "2x1", "2x1x2", "2x2x1", "2x2"]
    c = next(c for c in space.configs if c.name == "1x1x2")
    assert (c.intra, c.omp) == (1, 2)
    assert c.env_dict == {
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_NUM_INTRAOP_THREADS": "1",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
    }
    assert space.full_size == 8 and "8 of 8" in space.describe() and "OpenMP [1, 2]" in space.describe()
    big = search_space(topo(sockets=2, cores_per_socket=28, smt=2, runtime="openmp"))
    assert big.intra_values == (1, 56) and big.omp_values == (1, 2, 4, 8, 16, 28, 32, 56, 64, 112)
    assert len(big.configs) == 8 * 2 * 10 and big.full_size == 112**3


def test_identical_configurations_run_once_and_are_reported_as_same():
    t = topo()
    configs = [
        *baseline_configs(t),
        thread_config(1, 2, openmp=False, name="tf_autopar", kind="plan"),
        *search_space(t).configs,
    ]
    order, same_as = distinct_slots(configs, t.threading_runtime, t.affinity)
    # stock TF: Intel's OMP/KMP variables change nothing, so it is the same process as TF's recommendation
    assert same_as == {"intel-recommended": "tf-recommended", "tf_autopar": "tf-recommended", "1x2": "tf-recommended"}
    assert order == ["tf-default", "tf-recommended", "1x1", "2x1", "2x2"]
    # on an OpenMP build the variables matter: Intel's setting runs on its own
    to = topo(runtime="openmp")
    order, same_as = distinct_slots(baseline_configs(to), to.threading_runtime, to.affinity)
    assert "intel-recommended" in order


def test_config_from_a_real_baseline_plan():
    t = topo(sockets=2, cores_per_socket=4)
    c = config_from_plan("tf-recommended", baseline_plan("tf-recommended", t), "baseline")
    assert (c.inter, c.intra) == (2, 8)
    assert c.env_dict == {"TF_NUM_INTEROP_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "8"}
    d = config_from_plan("tf-default", baseline_plan("tf-default", t), "baseline")
    assert d.env == () and d.effective_threads(t.logical_cpus) == (8, 8)


# ------------------------------------------------------------------ row summaries


def _run(rnd, seq, med, status="ok"):
    times = [med] * 3 if status == "ok" else []
    return {
        "round": rnd,
        "seq": seq,
        "status": status,
        "step_times_s": times,
        "median_s": med if status == "ok" else None,
        "stderr_tail": "",
        "cpu_stat": None,
    }


def _cfg(inter, intra, runs=(), same_as=None, kind="search"):
    return {
        "kind": kind,
        "inter": inter,
        "intra": intra,
        "omp": None,
        "env": {},
        "cpus": [],
        "same_as": same_as,
        "runs": list(runs),
    }


def hand_row():
    # rounds 1..3; ours is 1x2, optimum 2x1 (ours reaches ~0.8 of it), default twice as slow as ours
    return {
        "workload": "w",
        "mode": "infer1",
        "batch": 1,
        "size": "tiny",
        "plan": {"status": "ok"},
        "order": ["tf-default", "tf-recommended", "2x1", "2x2"],
        "configs": {
            "tf-default": _cfg(0, 0, [_run(1, 1, 2.0), _run(2, 5, 2.2), _run(3, 9, 1.8)], kind="baseline"),
            "tf-recommended": _cfg(1, 2, [_run(1, 2, 1.0), _run(2, 6, 1.1), _run(3, 10, 0.9)], kind="baseline"),
            "intel-recommended": _cfg(1, 2, same_as="tf-recommended", kind="baseline"),
            "tf_autopar": _cfg(1, 2, same_as="tf-recommended", kind="plan"),
            "2x1": _cfg(2, 1, [_run(1, 3, 0.8), _run(2, 7, 0.88), _run(3, 11, 0.72)]),
            "2x2": _cfg(2, 2, [_run(1, 4, 0.0, "crash"), _run(2, 8, 0.0, "timeout"), _run(3, 12, 5.0)]),
        },
    }


def test_summarize_row_on_hand_numbers():
    s = results.summarize_row(hand_row(), logical_cpus=2)
    assert s["optimum"] == "2x1" and s["ours"] == "tf_autopar"
    assert s["speedup"]["tf-default"]["value"] == pytest.approx(2.0)
    assert s["speedup"]["tf-recommended"]["value"] == pytest.approx(1.0)  # same runs
    assert s["ours_vs_optimum"]["value"] == pytest.approx(0.8)
    assert s["below_optimum"] is True
    assert s["reasons"] == ["width misjudged (optimum inter-op 2, ours 1)"]
    assert s["configs"]["tf-default"]["threads"] == [2, 2]
    assert s["configs"]["2x2"]["status"] == "partial" and s["configs"]["2x2"]["rounds_ok"] == 1
    assert s["configs"]["tf_autopar"]["median_s"] == pytest.approx(1.0)
    assert s["configs"]["tf_autopar"]["spread_s"]["min"] == pytest.approx(0.9)


def test_under_a_quota_the_mean_step_ranks_configurations():
    """A burst-then-throttled run: most steps fast, a few stalled for the rest of the CFS period.
    Its median looks best; its mean (the sustained rate) is what a quota leaves."""
    row = hand_row()
    bursty = row["configs"]["2x1"]
    for run in bursty["runs"]:
        run["step_times_s"] = [0.5] * 8 + [4.0] * 2  # median 0.5, mean 1.2
        run["median_s"] = 0.5
    by_median = results.summarize_row(row, 2)
    by_mean = results.summarize_row(row, 2, results.statistic_for(1.0))
    assert results.statistic_for(None) == "median" and by_median["statistic"] == "median"
    assert by_median["optimum"] == "2x1"
    assert by_mean["statistic"] == "mean" and by_mean["optimum"] == "tf-recommended"  # ours, 1.0 s flat
    assert by_mean["configs"]["2x1"]["median_s"] == pytest.approx(1.2)
    assert by_mean["ours_vs_optimum"]["value"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="statistic"):
        results.summarize_row(row, 2, "p90")


def test_summary_without_a_plan_and_geomeans():
    row = hand_row()
    del row["configs"]["tf_autopar"]
    s = results.summarize_row(row, 2)
    assert s["ours"] is None and s["reasons"] == ["our plan is unavailable"] and s["optimum"] == "2x1"
    good = hand_row()
    good["summary"] = results.summarize_row(good, 2)
    other = hand_row()
    other["workload"] = "v"
    for r in other["configs"]["tf-default"]["runs"]:
        r["median_s"] *= 4  # 8x over ours in this row
    other["summary"] = results.summarize_row(other, 2)
    row["summary"] = s
    g = results.geomeans([good, other, row])
    assert g["speedup"]["tf-default"] == pytest.approx(4.0)  # sqrt(2 * 8)
    assert g["ours_vs_optimum"] == pytest.approx(0.8) and g["rows"] == 2
    assert g["below_optimum"] == ["w/infer1", "v/infer1"]


# ------------------------------------------------------------------ schema


def minimal_doc():
    row = hand_row()
    row["summary"] = results.summarize_row(row, 2)
    return {
        "schema": 1,
        "host": topo().to_dict(),
        "started": "2025-01-01T00:00:00+00:00",
        "interrupted": False,
        "args": {},
        "space": search_space(topo()).to_dict(),
        "rows": [row],
        "geomean": results.geomeans([row]),
    }


def test_schema_accepts_a_good_document_and_names_what_is_wrong():
    results.validate_document(minimal_doc())
    cases = [
        (lambda d: d.pop("rows"), "missing key 'rows'"),
        (lambda d: d["rows"][0].update(mode="predict"), "mode"),
        (lambda d: d["rows"][0]["configs"]["2x1"]["runs"][0].update(status="weird"), "status"),
        (lambda d: d["rows"][0]["configs"]["2x1"]["runs"][0].update(step_times_s=[]), "positive step times"),
        (lambda d: d["rows"][0]["configs"]["tf_autopar"].update(same_as="nope"), "same_as"),
        (lambda d: d["rows"][0]["order"].append("ghost"), "order"),
        (lambda d: d["rows"][0]["configs"]["tf_autopar"]["runs"].append(_run(1, 1, 1.0)), "alias"),
    ]
    for mutate, message in cases:
        d = copy.deepcopy(minimal_doc())
        mutate(d)
        with pytest.raises(ValueError, match=message):
            results.validate_document(d)
