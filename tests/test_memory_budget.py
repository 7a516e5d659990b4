"""planning/memory_budget.py: the bytes a build may use under a cgroup limit (or the host's memory),
the margin, sibling workers, and the one-line reason when an estimate does not fit."""

from __future__ import annotations

import pytest

from tf_autopar.planning.memory_budget import (
    MARGIN_MAX,
    MARGIN_MIN,
    budget_for,
    check,
    default_margin,
    format_bytes,
    limit_fact,
    memory_budget,
)

MB = 1 << 20
GB = 1 << 30


@pytest.mark.parametrize(
    "n, text",
    [
        (0, "0 kB"),
        (12 * 1024, "12 kB"),
        (496 * MB, "496 MB"),
        (999 * MB, "999 MB"),
        (1000 * MB, "1.0 GB"),
        (1536 * MB, "1.5 GB"),
        (int(2.9 * GB), "2.9 GB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_default_margin_is_a_tenth_within_bounds():
    assert default_margin(1536 * MB) == int(153.6 * MB)
    assert default_margin(100 * MB) == MARGIN_MIN
    assert default_margin(64 * GB) == MARGIN_MAX
    assert default_margin(None, 2 * GB) == int(0.2 * GB)
    assert default_margin(None) == MARGIN_MIN


def test_under_a_limit_room_is_limit_less_usage_less_margin():
    b = memory_budget(1536 * MB, 512 * MB, margin_bytes=100 * MB)
    assert (b.bytes, b.room_bytes, b.limit_bytes, b.known) == (924 * MB, 1024 * MB, 1536 * MB, True)


def test_the_issues_case_does_not_fit_and_says_why_in_its_words():
    # 1,500 MB container, the default path's 496 MB in use, Xception-sized build (~2.9 GB)
    b = memory_budget(1500 * MB, 500 * MB, margin_bytes=0)
    ok, why = check(b, int(2.9 * GB))
    assert not ok
    assert why == "the frozen copy needs about 2.9 GB; 1.0 GB is left under the container's 1.5 GB limit"
    b = memory_budget(1536 * MB, 512 * MB, margin_bytes=0)
    assert check(b, int(2.9 * GB))[1] == (
        "the frozen copy needs about 2.9 GB; 1.0 GB is left under the container's 1.5 GB limit"
    )


def test_margin_and_workers_are_named_in_the_reason():
    b = memory_budget(4 * GB, 2 * GB, margin_bytes=200 * MB, workers=2)
    assert b.bytes == (2 * GB - 200 * MB) // 2
    ok, why = check(b, GB, what="the build")
    assert not ok
    assert why == (
        "the build needs about 1.0 GB; 2.0 GB is left under the container's 4.0 GB limit "
        "(less a 200 MB margin, shared by 2 workers: 924 MB each)"
    )
    assert check(b, 900 * MB) == (True, "")


def test_usage_over_the_limit_leaves_nothing():
    b = memory_budget(GB, 2 * GB, margin_bytes=0)
    assert b.bytes == 0 and b.room_bytes == 0
    assert check(b, 1)[1] == "the frozen copy needs about 0 kB; 0 kB is left under the container's 1.0 GB limit"


def test_limit_with_unknown_usage_counts_nothing_free():
    b = memory_budget(GB, None)
    assert b.bytes == 0 and b.known and not check(b, MB)[0]


def test_without_a_limit_the_host_available_memory_is_used():
    b = memory_budget(None, 300 * MB, margin_bytes=0, host_available_bytes=8 * GB)
    assert b.bytes == 8 * GB and b.limit_bytes is None
    ok, why = check(b, 9 * GB)
    assert not ok and why == "the frozen copy needs about 9.0 GB; 8.0 GB of the host's memory is available"


def test_nothing_known_fits_and_leaves_the_decision_to_other_bounds():
    b = memory_budget(None, None)
    assert not b.known and b.bytes == 0
    assert check(b, 100 * GB) == (True, "")


def test_workers_below_one_count_as_one_and_scope_words():
    b = memory_budget(2 * GB, GB, margin_bytes=0, workers=0, scope="the pod's")
    assert b.workers == 1 and b.bytes == GB
    assert "under the pod's 2.0 GB limit" in check(b, 2 * GB)[1]


def test_limit_fact():
    assert limit_fact(1536 * MB, 1, "/sys/fs/cgroup/memory/x/memory.limit_in_bytes") == (
        "cgroup v1 memory limit 1.5 GB (/sys/fs/cgroup/memory/x/memory.limit_in_bytes)"
    )


def test_pure_module_imports_nothing_of_the_system():
    import tf_autopar.planning.memory_budget as mod

    names = set(vars(mod))
    assert not names & {"os", "psutil", "subprocess", "open"}


def test_budget_for_a_reading_uses_its_working_set():
    from tf_autopar.topology import MemoryLimit

    m = MemoryLimit(1536 * MB, 612 * MB, 1, "x", reclaimable_bytes=100 * MB)
    b = budget_for(m, margin_bytes=0)
    assert b.room_bytes == 1024 * MB and b.limit_bytes == 1536 * MB
    no_limit = MemoryLimit(None, 612 * MB, 1, "x")
    assert budget_for(no_limit, host_available_bytes=4 * GB, margin_bytes=0).bytes == 4 * GB
    assert budget_for(None, host_available_bytes=4 * GB, margin_bytes=0, workers=2).bytes == 2 * GB
    unknown_usage = MemoryLimit(GB, None, 2, "x")
    assert budget_for(unknown_usage, margin_bytes=0).bytes == 0
