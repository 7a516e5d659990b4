"""The fast path's pure decisions (runtime/fastpath/rules.py, the memory rule of fastpath/memory.py)
and the fair hand-out of sessions (runtime/streams.py), without TensorFlow."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tf_autopar.runtime.fastpath import memory, rules
from tf_autopar.runtime.streams import Retired, StreamPool


def test_buckets_are_powers_of_two_at_or_above_the_batch():
    assert [rules.bucket_of(b) for b in (1, 2, 3, 4, 5, 8, 9, 64, 65)] == [1, 2, 4, 4, 8, 8, 16, 64, 128]
    with pytest.raises(ValueError, match="at least 1"):
        rules.bucket_of(0)


@given(st.integers(1, 1 << 40))
def test_every_batch_lies_in_its_bucket_above_the_previous_one(batch):
    b = rules.bucket_of(batch)
    assert b & (b - 1) == 0 and b // 2 < batch <= b


def test_memory_bound_counts_the_graph_and_each_session():
    mb = 1 << 20
    assert memory.frozen_extra_bytes(100 * mb, 1) == 200 * mb
    assert memory.frozen_extra_bytes(100 * mb, 3) == 400 * mb
    assert memory.memory_verdict(100 * mb, 1, None, 2048 * mb) == (True, "")
    ok, why = memory.memory_verdict(1500 * mb, 1, None, 2048 * mb)
    assert not ok and "3,000 MB" in why and "TF_AUTOPAR_FAST_PATH_MAX_MB" in why
    ok, why = memory.memory_verdict(10 * mb, 1, 200 * mb, 2048 * mb)  # 20 MB fits, but not the build's moment
    assert not ok and "for a moment" in why and "half" in why
    ok, why = memory.memory_verdict(100 * mb, 3, 7000 * mb, 2048 * mb)  # build 2.95 GB in 3.5 GB; keeps 400 MB
    assert ok, why
    ok, why = memory.memory_verdict(100 * mb, 1, 5000 * mb, 2048 * mb)  # build 2.95 GB > 2.5 GB
    assert not ok and "for a moment" in why
    assert memory.build_peak_bytes(88 * mb) >= 2329 * mb  # Xception's measured build peak lies inside the estimate


def test_the_memory_bound_reads_ascii_megabytes_only():
    assert memory.max_extra_bytes({}) == memory.MAX_EXTRA_MB << 20
    assert memory.max_extra_bytes({memory.MAX_EXTRA_VAR: "10"}) == 10 << 20
    for bad in ("-1", "1.5", "٣", "lots"):
        with pytest.raises(ValueError, match=memory.MAX_EXTRA_VAR):
            memory.max_extra_bytes({memory.MAX_EXTRA_VAR: bad})


def test_outputs_agree_within_the_documented_tolerance():
    a = np.array([[1.0, -2.0, 1000.0]], np.float32)
    assert rules.outputs_differ([a + 1e-3], [a]) == ""  # 1e-6 of the largest value
    assert "differs by" in rules.outputs_differ([a + 1.0], [a])  # 1e-3 of it
    assert "dtype" in rules.outputs_differ([a.astype(np.float64)], [a]) or "float64" in rules.outputs_differ(
        [a.astype(np.float64)], [a]
    )
    assert "2 outputs" in rules.outputs_differ([a, a], [a])
    ints = np.array([1, 2, 3])
    assert rules.outputs_differ([ints], [ints.copy()]) == ""
    assert "1 of 3 values differ" in rules.outputs_differ([np.array([1, 2, 4])], [ints])
    words = np.array([b"a", b"b"], dtype=object)
    assert rules.outputs_differ([words], [words.copy()]) == ""
    assert "differ" in rules.outputs_differ([np.array([b"a", b"c"], dtype=object)], [words])
    nan = np.array([np.nan, 1.0])
    assert rules.outputs_differ([nan], [nan.copy()]) == ""
    assert "non-finite" in rules.outputs_differ([np.array([0.0, 1.0])], [nan])


def test_switch_only_when_the_frozen_path_is_not_slower_in_paired_rounds():
    switch, speedup, spread = rules.switch_verdict([10, 11, 30, 10, 10], [5, 6, 14, 5, 5])
    assert switch and speedup == pytest.approx(2.0) and spread > 1
    switch, speedup, _ = rules.switch_verdict([10] * 5, [11, 12, 10.5, 11, 11])
    assert not switch and speedup < 1
    assert rules.switch_verdict([], [])[0] is False
    # one noisy round cannot carry the verdict: the median of the pairs decides
    assert not rules.switch_verdict([10, 10, 10, 10, 100], [12, 12, 12, 12, 1])[0]


def test_observed_batches_in_words_and_from_an_untrusted_cache():
    assert rules.batch_words({1: 4087, 8: 125}) == "batch 1 in 97% of 4,212 calls"
    assert rules.batch_words({8: 3, 1: 1}) == "batch 5-8 in 75% of 4 calls"
    assert rules.batch_words({}) == ""
    assert rules.dominant_bucket({"1": 5, "8": 9}) == 8
    assert rules.dominant_bucket({"3": 100, "x": 9, "٣": 50, "-4": 7, "16": True, "2": 1.5, "4": -1}) is None
    assert rules.dominant_bucket({"4": 2, "2": 2}) == 2  # a tie goes to the smaller batch


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.one_of(st.text(max_size=6), st.integers()),
        st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=4), st.none(), st.booleans()),
    )
)
def test_dominant_bucket_is_a_power_of_two_or_none_for_any_cached_mapping(counts):
    found = rules.dominant_bucket(counts)
    assert found is None or (1 <= found <= 1 << 30 and found & (found - 1) == 0)


class _Session:
    """Stands in for a tf.compat.v1.Session: run() takes a little time, counts concurrency."""

    def __init__(self, gauge: list[int]) -> None:
        self.gauge, self.closed = gauge, False

    def run(self, fetches, feeds):
        self.gauge[0] += 1
        self.gauge[1] = max(self.gauge[1], self.gauge[0])
        time.sleep(0.001)
        self.gauge[0] -= 1
        return fetches

    def close(self):
        self.closed = True


def _hammer(pool: StreamPool, threads: int, seconds: float) -> list[int]:
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        while time.monotonic() < stop:
            pool.run(["y"], {})
            counts[i] += 1

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts


def test_streams_go_to_callers_first_come_first_served():
    """Eight threads on two streams: a stream given back goes to the longest waiter, so no thread
    is starved (with a plain Condition one thread took almost every call)."""
    gauge = [0, 0]
    pool = StreamPool([_Session(gauge), _Session(gauge)])
    counts = _hammer(pool, 8, 0.6)
    assert min(counts) >= max(counts) / 5, counts
    assert gauge[1] <= 2  # never more runs at once than streams


def test_one_session_is_shared_by_concurrent_callers():
    gauge = [0, 0]
    pool = StreamPool([_Session(gauge)])
    counts = _hammer(pool, 4, 0.3)
    assert gauge[1] > 1 and min(counts) > 0  # not serialised: the session's pools are shared, as TF's are


def test_retired_pool_closes_its_sessions_and_wakes_waiters():
    gauge = [0, 0]
    sessions = [_Session(gauge), _Session(gauge)]
    pool = StreamPool(sessions)
    held = [pool._acquire(), pool._acquire()]
    errors = []

    def waiter():
        try:
            pool.run(["y"], {})
        except Retired:
            errors.append("retired")

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    pool.retire()
    t.join(2)
    assert errors == ["retired"]
    for s in held:
        pool._release(s)
    assert all(s.closed for s in sessions)
    with pytest.raises(Retired):
        pool.run(["y"], {})
    single = StreamPool([_Session(gauge)])
    single.retire()
    assert single.sessions[0].closed


def test_a_bucket_kept_on_the_original_path_is_checked_again_twice_then_never():
    assert rules.retry_delay(1) == rules.RETRY_S and rules.retry_delay(2) == 2 * rules.RETRY_S
    assert rules.retry_delay(rules.RETRIES + 1) is None and rules.retry_delay(0) is None


def test_status_names_the_neighbour_that_passed_where_the_plan_lost():
    """The bucket's line says whose setting serves: the rule's, or the neighbour that passed the
    switch check after the rule's lost it (not "planned by the rule")."""
    from types import SimpleNamespace

    from tf_autopar.runtime.fastpath.bucket import Bucket as _Bucket
    from tf_autopar.runtime.fastpath.report import plan_source as _plan_source

    plan = SimpleNamespace(tuned=None)
    kept = _Bucket(1, plan=plan, key=(1, 2, 1), tuned="done", tried=["a", "b", "c"])
    assert _plan_source(kept) == "planned by the rule, which held against 3 neighbour(s) tuned live"
    passed = _Bucket(1, plan=plan, key=(2, 2, 1), lost=[(1, 2, 1)], tuned="done", tried=["a", "b"])
    assert _plan_source(passed) == (
        "the neighbour that passed its switch check where the setting planned by the rule (1x2) lost; "
        "it held against the 2 setting(s) tried tuned live"
    )
    retried_and_won = _Bucket(1, plan=plan, key=(1, 2, 1), lost=[(1, 2, 1)])
    assert _plan_source(retried_and_won) == "planned by the rule"
