"""Properties over every parser of outside input: environment variables, cgroup and sysfs files,
lease slots, cache entries, CLI numbers. Each input either yields a bounded valid value or one
clear refusal (a ValueError, an argparse error, a warning of one short line); never a hang, an
allocation of the input's size or another exception. Pure and fast: no TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tf_autopar._numbers import MAX_SECONDS, MAX_STEPS, count, seconds
from tf_autopar.coordination import rendezvous
from tf_autopar.coordination.lease import MAX_SLOTS, _holds_slot, _slot_index
from tf_autopar.coordination.ranks import COUNTS, PAIRS, detect_ranks
from tf_autopar.coordination.slices import MAX_WORKERS_PER_CORE, bound_count, slice_for
from tf_autopar.planning import plan
from tf_autopar.planning.user_settings import ENV_VARS, read_user_settings
from tf_autopar.planning import graph_plan
from tf_autopar.runtime import cache
from tf_autopar.topology.cgroup import parse_cpu_max
from tf_autopar.topology.cpulist import MAX_CPU_ID, parse_cpulist
from tf_autopar.topology.model import Core, NumaNode, Topology

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Text an environment, a file or a command line may hold: digits of other scripts, signs,
# spaces, huge numbers, floats' specials, JSON fragments.
numberish = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(
        [
            "",
            " ",
            "+3",
            "-0",
            "0x10",
            "1e3",
            "inf",
            "nan",
            "-inf",
            "3.0",
            "1_000",
            "٣",
            "²",
            "３",
            "3٣",
            "max",
            "null",
            "9" * 5000,
        ]
    ),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
)


def topo(cores: int) -> Topology:
    return Topology(
        host_cpus=cores,
        affinity=tuple(range(cores)),
        cores=tuple(Core(0, i, (i,)) for i in range(cores)),
        numa_nodes=(NumaNode(0, tuple(range(cores))),),
        cpu_budget=cores,
    )


# ---------------------------------------------------------------- environment


@FAST
@given(
    values=st.dictionaries(st.sampled_from([v for pair in PAIRS for v in pair] + list(COUNTS)), numberish, max_size=6)
)
def test_rank_and_count_variables_give_a_valid_rank_or_a_short_warning(values):
    r = detect_ranks(values)
    assert r.size is None or r.size >= 1
    assert r.rank is None or (r.size is not None and 0 <= r.rank < r.size)
    assert all(isinstance(w, str) and len(w) < 160 for w in r.warnings)  # names the value, cut short


@FAST
@given(n=st.integers(1, 10**18), cores=st.integers(1, 64))
def test_a_worker_count_is_bounded_and_its_slice_costs_the_same(n, cores):
    t = topo(cores)
    capped, note = bound_count(n, t, f"WEB_CONCURRENCY={n}")
    assert 1 <= capped <= max(n, 1) and capped <= cores * MAX_WORKERS_PER_CORE
    assert (note == "") == (n <= cores) and len(note) < 200
    s = slice_for(t, n - 1, n)  # any count: one slice, O(cores)
    assert s.cores == 1 or n <= cores  # shared: one thread's budget, floating over its group
    assert s.shared_with >= 1 and (s.shared_with > 1) == (n > cores)


@FAST
@given(text=numberish)
def test_the_rendezvous_window_is_between_0_and_its_bound(text, monkeypatch):
    from tf_autopar import _warn

    monkeypatch.setattr(_warn, "SEEN", set())  # this test's warnings are its own, not the next test's
    monkeypatch.setattr(_warn, "ISSUED", [])
    value = rendezvous.window_s({rendezvous.WINDOW_VAR: text})
    assert 0 <= value <= rendezvous.MAX_WINDOW_S and math.isfinite(value)
    assert all(len(w) < 160 for w in _warn.ISSUED)


@FAST
@given(var=st.sampled_from(ENV_VARS), text=numberish)
def test_thread_variables_parse_to_ascii_numbers_or_a_value_error_naming_them(var, text):
    try:
        settings_ = read_user_settings({var: text})
    except ValueError as exc:
        assert var in str(exc)
        return
    value = settings_.value(
        next(
            k for k, v in __import__("tf_autopar.planning.user_settings", fromlist=["KNOBS"]).KNOBS.items() if v == var
        )
    )
    if isinstance(value, int) and not isinstance(value, bool) and var != "KMP_BLOCKTIME":
        digits = text.strip().split(",")[0].lstrip("+")
        assert digits.isascii() and digits.isdigit() and value == int(digits)


# ---------------------------------------------------------------- cgroup and sysfs files


@FAST
@given(text=st.one_of(numberish, st.tuples(numberish, numberish).map(" ".join)))
def test_cpu_max_gives_a_positive_quota_and_period_or_a_value_error(text):
    try:
        quota, period = parse_cpu_max(text)
    except ValueError:
        return
    assert period >= 1 and (quota is None or quota >= 1)


@FAST
@given(
    text=st.one_of(
        numberish,
        st.lists(st.one_of(numberish, st.tuples(numberish, numberish).map("-".join)), max_size=4).map(",".join),
    )
)
def test_a_cpu_list_is_bounded_cpu_ids_or_a_value_error(text):
    try:
        cpus = parse_cpulist(text)
    except ValueError as exc:
        assert "cpulist" in str(exc) or "CPU" in str(exc)
        return
    assert all(0 <= c <= MAX_CPU_ID for c in cpus) and list(cpus) == sorted(set(cpus))


# ---------------------------------------------------------------- lease slots

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=True), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)
slot_records = st.fixed_dictionaries(
    {},
    optional={
        "pid": st.one_of(st.sampled_from([1, os.getpid(), 0, -1, 10**12, True]), json_values),
        "fd": st.one_of(st.integers(-3, 50), json_values),
        "time": st.one_of(st.floats(allow_nan=True), json_values),
        "rank": st.one_of(st.integers(-2, 10**13), json_values),
        "cohort": st.one_of(st.integers(-2, 10**13), json_values),
    },
)


@FAST
@given(record=st.one_of(slot_records, json_values))
def test_an_unlocked_slot_is_no_peer_whatever_it_says(record):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "slot-1.lock")
        with open(path, "w") as fh:
            json.dump(record, fh)
        assert _holds_slot(record, os.stat(path), path) is False
    if isinstance(record, dict):
        t = rendezvous._claim_time(record)
        assert t is None or (math.isfinite(t) and t >= 0)
        decided = rendezvous._decided(record)
        assert decided is None or 0 <= decided[0] < decided[1] <= MAX_SLOTS


@FAST
@given(name=st.one_of(st.text(max_size=40), st.integers(0, 10**40).map(lambda i: f"slot-{i}.lock")))
def test_slot_file_names_give_an_index_below_max_slots_or_none(name):
    index = _slot_index(name)
    assert index is None or 0 <= index < MAX_SLOTS


# ---------------------------------------------------------------- cache entries

profile_fields = st.fixed_dictionaries(
    {
        "heavy_ops": st.integers(0, 400),
        "depth": st.integers(0, 60),
        "avg_width": st.integers(0, 64),
        "max_width": st.integers(0, 64),
        "nodes": st.integers(0, 10**5),
        "functions": st.integers(0, 50),
        "training": st.booleans(),
        "uses_tf_data": st.booleans(),
        "loops": st.booleans(),
        "sizes_known": st.booleans(),
        "source": st.text(max_size=10),
        "fingerprint": st.text(max_size=10),
        "typical_op_work": st.one_of(st.none(), st.integers(0, 10**12)),
        "assumptions": st.lists(st.text(max_size=5), max_size=3),
        "lookups": st.integers(0, 100),
        "lookup_work": st.one_of(st.none(), st.integers(0, 10**12)),
        "contraction_work": st.one_of(st.none(), st.integers(0, 10**12)),
    }
)


@FAST
@given(
    profile=profile_fields,
    field=st.sampled_from(sorted(cache.PROFILE_CHECKS)),
    value=json_values,
    cores=st.integers(1, 16),
    mode=st.sampled_from(["latency", "throughput", "training"]),
)
def test_a_cached_profile_that_passes_its_check_plans_and_one_that_fails_is_named(profile, field, value, cores, mode):
    garbled = {**profile, field: value}
    problem = cache.entry_problem("profiles", {"profile": garbled})
    if problem:
        assert field in problem and len(problem) < 120
        return
    profile_read = graph_plan.cached_profile(garbled)
    p = plan(topo(cores), profile_read, mode)  # what enable() then does with it
    # Each pool within the cores (stock TF's inter-op threads share one intra-op pool, so the
    # product is no thread count: 3x3 on 3 cores is a model-less plan's every CPU in each); a
    # tf.data model's inter-op pool has at least 2 threads, on one core too (the iterator-restore
    # deadlock the planner's tf.data floor avoids).
    inter_limit = max(cores, 2) if profile_read.uses_tf_data else cores
    assert 1 <= p.inter_op <= inter_limit and 1 <= p.intra_op <= cores, (p.inter_op, p.intra_op, cores)
    if p.inter_op > cores:
        assert "tf.data" in p.explain() or "tf.data" in str(p), p


@FAST
@given(
    section=st.sampled_from(cache.SECTIONS),
    entry=st.one_of(
        json_values,
        st.dictionaries(
            st.sampled_from(
                [
                    "inter_op",
                    "intra_op",
                    "omp_threads",
                    "small_op_work",
                    "fingerprint",
                    "heavy_ops",
                    "updated",
                    "profile",
                ]
            ),
            json_values,
            max_size=5,
        ),
    ),
)
def test_every_cache_entry_is_accepted_or_refused_in_one_short_line(section, entry):
    problem = cache.entry_problem(section, entry)
    assert isinstance(problem, str) and len(problem) < 160
    if not problem and section == "tuned":
        assert 1 <= entry["inter_op"] <= cache.MAX_THREADS and 1 <= entry["intra_op"] <= cache.MAX_THREADS


# ---------------------------------------------------------------- CLI numbers


@FAST
@given(text=numberish, hi=st.sampled_from([MAX_STEPS, 1 << 20, 10**15]))
@example(text="\x1f\x1f" + "\U0002ebe1" * 7, hi=MAX_STEPS)  # each shown as 10 characters: 121 in all, once
def test_cli_counts_are_ascii_and_bounded_or_an_argparse_error(text, hi):
    try:
        value = count(hi)(text)
    except argparse.ArgumentTypeError as exc:
        assert len(str(exc)) < 120
        return
    assert 0 <= value <= hi and text.strip().isascii() and text.strip().isdigit()


@FAST
@given(text=st.one_of(numberish, st.floats(allow_nan=True, allow_infinity=True).map(repr)))
def test_cli_seconds_are_finite_and_bounded_or_an_argparse_error(text):
    try:
        value = seconds()(text)
    except argparse.ArgumentTypeError as exc:
        assert len(str(exc)) < 120
        return
    assert math.isfinite(value) and 0 <= value <= MAX_SECONDS
