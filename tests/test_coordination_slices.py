"""Core slices per worker and the sharing rule (pure: hand-built topologies)."""

from __future__ import annotations

import contextlib
import signal

from hypothesis import given, settings, strategies as st

import pytest

from tf_autopar.coordination import Share, claim_share
from tf_autopar.coordination.slices import capacity_cores, restrict, slice_for, split
from tf_autopar.planning import plan
from tf_autopar.topology.model import Core, CpuQuota, NumaNode, Topology, place_of


def make_topology(sockets=1, nodes_per_socket=1, cores_per_node=4, smt=1, budget=None, quota=None) -> Topology:
    """CPU ids: core k (global) has CPUs k, k + ncores, ... (Linux-style sibling numbering)."""
    ncores = sockets * nodes_per_socket * cores_per_node
    cores, nodes = [], []
    k = 0
    for s in range(sockets):
        for n in range(nodes_per_socket):
            node_id = s * nodes_per_socket + n
            node_cpus = []
            for _ in range(cores_per_node):
                cpus = tuple(k + t * ncores for t in range(smt))
                cores.append(Core(socket=s, core_id=k, cpus=cpus, numa_node=node_id))
                node_cpus += cpus
                k += 1
            nodes.append(NumaNode(node_id, tuple(sorted(node_cpus))))
    affinity = tuple(range(ncores * smt))
    return Topology(
        host_cpus=len(affinity),
        affinity=affinity,
        cores=tuple(cores),
        numa_nodes=tuple(nodes),
        cpu_budget=budget if budget is not None else len(affinity),
        quota=quota,
    )


def test_two_nodes_two_workers_one_node_each():
    t = make_topology(sockets=2, cores_per_node=4, smt=2)  # cores 0-7, siblings 8-15
    a, b = split(t, 2)
    assert a.cpus == (0, 1, 2, 3, 8, 9, 10, 11) and a.cores == 4
    assert b.cpus == (4, 5, 6, 7, 12, 13, 14, 15) and b.cores == 4
    assert a.shared_with == b.shared_with == 1


def test_uneven_counts_give_the_extra_core_to_the_first_slices():
    t = make_topology(cores_per_node=8)
    assert [s.cpus for s in split(t, 3)] == [(0, 1, 2), (3, 4, 5), (6, 7)]


def test_sharing_rule_more_workers_than_cores():
    t = make_topology(cores_per_node=2)
    slices = split(t, 5)  # cores 0,1 in one group: every worker floats over both, 1 x 1 threads
    assert [s.cpus for s in slices] == [(0, 1)] * 5
    assert [s.shared_with for s in slices] == [5] * 5
    assert all(s.cores == 1 for s in slices)
    # two sockets: a worker floats inside its home core's socket, never across
    t2 = make_topology(sockets=2, cores_per_node=2)
    six = split(t2, 6)  # homes: cores 0, 1, 2, 3, 0, 1
    assert [s.cpus for s in six] == [(0, 1), (0, 1), (2, 3), (2, 3), (0, 1), (0, 1)]
    assert [s.shared_with for s in six] == [4, 4, 2, 2, 4, 4]
    assert [slice_for(t2, i, 6) for i in range(6)] == six


def test_quota_limits_the_cores_shared_out():
    q = CpuQuota(cpus=2.0, quota_us=200000, period_us=100000, cgroup_version=2, path="/x")
    t = make_topology(cores_per_node=8, budget=2, quota=q)
    slices = split(t, 4)  # 2 cores of capacity, 4 workers: sharing rule over cores 0 and 1
    assert [s.cpus for s in slices] == [(0, 1)] * 4
    assert [s.shared_with for s in slices] == [4, 4, 4, 4]


def test_a_fractional_quota_shared_by_workers_is_rounded_up_and_one_process_keeps_the_floor():
    q = CpuQuota(cpus=1.5, quota_us=150000, period_us=100000, cgroup_version=1, path="/x")
    t = make_topology(cores_per_node=2, budget=1, quota=q)
    assert [c.core_id for c in capacity_cores(t)] == [0]  # one process: floor(1.5), measured no worse
    assert [s.cpus for s in split(t, 1)] == [(0,)]
    two = split(t, 2)  # two independent workers: each its own core, the 0.5 CPU is theirs
    assert [s.cpus for s in two] == [(0,), (1,)] and [s.cores for s in two] == [1, 1]
    four = split(t, 4)
    assert [s.cpus for s in four] == [(0, 1)] * 4 and {s.shared_with for s in four} == {4}
    assert slice_for(t, 3, 4) == four[3]
    q25 = CpuQuota(cpus=2.5, quota_us=250000, period_us=100000, cgroup_version=2, path="/x")
    t8 = make_topology(cores_per_node=8, budget=2, quota=q25)
    assert sum(s.cores for s in split(t8, 2)) == 3  # ceil(2.5), not all 8 cores
    assert sum(s.cores for s in split(t8, 1)) == 2


def test_restrict_shrinks_mask_cores_nodes_budget_and_plans_the_slice():
    t = make_topology(sockets=2, cores_per_node=4, smt=2)
    r = restrict(t, slice_for(t, 1, 2).cpus)
    assert r.affinity == (4, 5, 6, 7, 12, 13, 14, 15)
    assert [c.core_id for c in r.cores] == [4, 5, 6, 7]
    assert [n.id for n in r.numa_nodes] == [1]
    assert r.cpu_budget == 4
    p = plan(r, width=1, mode="latency")
    assert p.inter_op * p.intra_op <= 4 and p.intra_op == 4
    unknown = plan(r, None, "latency")  # no model: every pool sized to the slice, never the host
    assert (unknown.inter_op, unknown.intra_op) == (4, 4)
    assert restrict(t, (0, 8), budget=1).cpu_budget == 1
    with pytest.raises(ValueError, match="none of CPUs"):
        restrict(t, (99,))


def test_bad_counts():
    t = make_topology()
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="worker count must be a positive integer"):
            split(t, bad)
    with pytest.raises(ValueError, match="outside"):
        slice_for(t, 2, 2)


def test_claim_share_from_ranks_is_the_slice_and_plans_one_by_one_when_shared():
    t = make_topology(cores_per_node=2)
    s = claim_share(t, {"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"})
    assert (s.index, s.count, s.cpus, s.source, s.shared_with, s.pin) == (3, 4, (0, 1), "env:LOCAL_RANK", 4, False)
    assert "sharing rule" in s.note
    p = plan(s.topology(t), None, "latency")
    assert (p.inter_op, p.intra_op) == (1, 1)


def test_placed_process_keeps_its_placement():
    t = make_topology(cores_per_node=8)
    bound = restrict(t, (2, 3))  # e.g. taskset/numactl/mpirun bound it already; host_cpus stays 8
    s = claim_share(bound, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (s.source, s.cpus, s.pin, s.budget) == ("placed", (2, 3), False, 2)
    s = claim_share(t, {"TF_AUTOPAR_INSTANCE": "1", "TF_AUTOPAR_INSTANCES": "2"})
    assert (s.source, s.pin) == ("env:TF_AUTOPAR_INSTANCE", False)


def test_share_is_frozen():
    s = Share(0, 1, (0,), "single")
    with pytest.raises(AttributeError):
        s.index = 1  # type: ignore[misc]


shapes = st.builds(
    make_topology,
    sockets=st.integers(1, 2),
    nodes_per_socket=st.integers(1, 2),
    cores_per_node=st.integers(1, 6),
    smt=st.integers(1, 2),
)


@settings(max_examples=150, deadline=None)
@given(t=shapes, n=st.integers(1, 30), data=st.data())
def test_properties(t, n, data):
    budget = data.draw(st.integers(1, t.physical_cores))
    t = restrict(t, t.affinity, budget) if budget < t.physical_cores else t
    t = Topology(**{**t.__dict__, "host_cpus": len(t.affinity)})
    slices = split(t, n)
    cap = min(t.physical_cores, t.cpu_budget)
    assert len(slices) == n
    assert all(set(s.cpus) <= set(t.affinity) and s.cpus for s in slices)
    core_of = {cpu: c.core_id for c in t.cores for cpu in c.cpus}
    for s in slices:  # whole physical cores: every sibling of a used core is in the slice
        used = {core_of[c] for c in s.cpus}
        assert len(used) == s.cores or n > cap  # the sharing rule: budget 1, unpinned over its group
        assert set(s.cpus) == {cpu for c in t.cores if c.core_id in used for cpu in c.cpus}
    if n <= cap:
        cpus = [c for s in slices for c in s.cpus]
        assert len(cpus) == len(set(cpus)), "slices overlap"
        sizes = [s.cores for s in slices]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == cap
        assert all(s.shared_with == 1 for s in slices)
    else:
        assert all(s.cores == 1 for s in slices)
        assert sum(1 for s in slices if s.cpus == slices[0].cpus) == slices[0].shared_with
        place = {cpu: place_of(c) for c in t.cores for cpu in c.cpus}
        assert all(len({place[c] for c in s.cpus}) == 1 for s in slices), "a shared slice crosses groups"
        groups = {s.cpus for s in slices}
        cpus = [c for g in groups for c in g]
        assert len(cpus) == len(set(cpus)) and len({core_of[c] for c in cpus}) == cap  # every core used, once
    # slices fit in one NUMA node whenever every node holds a whole number of equal slices
    if n <= cap and cap == t.physical_cores and cap % n == 0:
        size = cap // n
        per_node = {}
        for c in t.cores:
            per_node[c.numa_node] = per_node.get(c.numa_node, 0) + 1
        if all(v % size == 0 for v in per_node.values()):
            node_of = {cpu: c.numa_node for c in t.cores for cpu in c.cpus}
            assert all(len({node_of[c] for c in s.cpus}) == 1 for s in slices)


def test_apply_affinity_all_threads_moves_existing_threads():
    import os
    import threading

    from tf_autopar.coordination import apply_affinity

    host = sorted(os.sched_getaffinity(0))
    if len(host) < 2:
        pytest.skip("needs two CPUs")
    stop = threading.Event()
    seen: list[set[int]] = []
    t = threading.Thread(target=lambda: (stop.wait(), seen.append(os.sched_getaffinity(0))))
    t.start()
    try:
        share = Share(1, 2, (host[1],), "env:LOCAL_RANK", pin=True, budget=1)
        assert apply_affinity(share, all_threads=True) is True
        assert apply_affinity(Share(0, 1, tuple(host), "single")) is False  # pin=False: nothing to do
    finally:
        stop.set()
        t.join(10)
        apply_affinity(Share(0, 1, tuple(host), "single", pin=True), all_threads=True)  # restore every thread
    assert seen == [{host[1]}]  # the thread started before the call was moved too


@settings(max_examples=60, deadline=None)
@given(t=shapes, n=st.integers(1, 40), data=st.data())
def test_slice_for_is_split_without_building_it(t, n, data):
    i = data.draw(st.integers(0, n - 1))
    assert slice_for(t, i, n) == split(t, n)[i]


@contextlib.contextmanager
def deadline(seconds: float):
    """TimeoutError after ``seconds``: code that loops over a huge count fails here instead of
    eating the machine's memory."""

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_huge_count_costs_what_a_small_one_does():
    """WEB_CONCURRENCY=10**12 (a typo): one slice, computed as for 2; no list of 10**12 slices."""
    t = make_topology(cores_per_node=2)
    with deadline(2):
        s = slice_for(t, 10**12 - 1, 10**12)
    assert (s.cpus, s.cores, s.shared_with) == ((0, 1), 1, 10**12)


def test_counts_read_from_outside_are_warned_about_and_capped(tmp_path):
    from tf_autopar import _warn
    from tf_autopar.coordination.slices import MAX_WORKERS_PER_CORE, bound_count

    t = make_topology(cores_per_node=2)
    assert bound_count(2, t, "WEB_CONCURRENCY=2") == (2, "")
    n, note = bound_count(5, t, "WEB_CONCURRENCY=5")
    assert (
        n == 5 and note == "WEB_CONCURRENCY=5: 5 workers for the 2 usable cores: they share cores, 1 x 1 threads each"
    )
    n, note = bound_count(10**12, t, "WEB_CONCURRENCY=1000000000000")
    assert n == 2 * MAX_WORKERS_PER_CORE and "capped at 16" in note and len(note) < 200
    assert bound_count(10**12, t, "LOCAL_WORLD_SIZE=1000000000000", cap=False)[0] == 10**12
    before = len(_warn.ISSUED)
    with deadline(5):
        share = claim_share(t, {"WEB_CONCURRENCY": str(10**12), "TF_AUTOPAR_GROUP": "huge"}, lease_dir=str(tmp_path))
    with share:
        assert share.count == 16 and share.shared_with == 16 and share.budget == 1
    issued = _warn.ISSUED[before:]
    assert len(issued) == 1 and "WEB_CONCURRENCY=1000000000000" in issued[0] and len(issued[0]) < 200
    with deadline(2):
        ranked = claim_share(t, {"LOCAL_RANK": "7", "LOCAL_WORLD_SIZE": str(10**12)})
    assert (ranked.index, ranked.count, ranked.cpus, ranked.shared_with) == (7, 10**12, (0, 1), 10**12)
