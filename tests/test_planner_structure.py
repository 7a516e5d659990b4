"""The plan's CPU sets respect cache domains and core types, on every recorded host (no TensorFlow).

The two properties of issue 31's goal, checked on each tree under tests/fixtures/hosts/ and on
restricted variants where the fill order matters:
- no stream, instance or latency plan split across cache domains when one domain holds it, and
  one that must cross spans as few as its size allows;
- no latency plan on efficiency cores while performance cores are free.
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest

import tf_autopar
from tf_autopar.coordination import slices
from tf_autopar.planning import planner
from tf_autopar.topology import detect_topology
from tf_autopar.topology.model import EFFICIENCY, PERFORMANCE, Core, Topology, cut_nested

HOSTS = os.path.join(os.path.dirname(__file__), "fixtures", "hosts")
RECORDED = sorted(os.listdir(HOSTS))


def recorded(name: str, runtime: str = "eigen") -> Topology:
    return dataclasses.replace(detect_topology(os.path.join(HOSTS, name), cpu_details=False), threading_runtime=runtime)


def domain_of(t: Topology) -> dict[int, int]:
    """CPU -> its cache domain (every CPU of a core shares its core's domain)."""
    return {cpu: c.cache_domain for c in t.cores for cpu in c.cpus if c.cache_domain is not None}


def kind_of(t: Topology) -> dict[int, str]:
    return {cpu: c.kind for c in t.cores for cpu in c.cpus}


def free_cores_per_domain(t: Topology, cpus: set[int] | None = None) -> dict[int, int]:
    """Usable physical cores per cache domain (limited to the cores with a CPU in ``cpus``)."""
    out: dict[int, int] = {}
    for c in t.cores:
        if c.cache_domain is not None and (cpus is None or set(c.cpus) & cpus):
            out[c.cache_domain] = out.get(c.cache_domain, 0) + 1
    return out


def check_cut(t: Topology, groups: list[tuple[int, ...]], size: int, what: str) -> None:
    """As many groups inside one domain as the domains' free cores allow; the others span at most
    one domain more than their size needs."""
    dom = domain_of(t)
    if not dom:
        return
    spans = [len({dom[c] for c in g if c in dom}) for g in groups]
    # same-kind domains only: a stream never needs to mix kinds to fit
    fits = sum(n // size for n in free_cores_per_domain(t).values())
    assert sum(1 for k in spans if k == 1) >= min(len(groups), fits), f"{what}: spans {spans}, {fits} fit"
    # what a domain leaves after its own streams: a crossing group needs at most size / that pieces
    free = free_cores_per_domain(t).values()
    piece = min((n % size for n in free if n % size), default=max(free))
    for k in spans:
        assert k <= math.ceil(size / min(piece, size)) + 1, f"{what}: a {size}-core group spans {k} domains"


@pytest.mark.parametrize("name", RECORDED)
@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
def test_throughput_streams_stay_in_one_domain_and_one_core_type(name, runtime):
    t = recorded(name, runtime)
    p = tf_autopar.plan(t, width=2, mode="throughput")
    groups = list(p.cpus)
    size = p.usable_cpus // p.instances
    check_cut(t, groups, size, f"{name} default streams")
    kinds = kind_of(t)
    if t.hybrid:
        fast = sum(1 for c in t.cores if c.kind == PERFORMANCE)
        slow = sum(1 for c in t.cores if c.kind == EFFICIENCY)
        pure = [g for g in groups if len({kinds[c] for c in g}) == 1]
        assert len(pure) == len(groups), f"{name}: a default stream mixes core types: {groups}"
        assert len(groups) == fast // size + slow // size  # efficiency cores add streams of their own
        assert any(kinds[g[0]] == EFFICIENCY for g in groups)
        assert "on efficiency cores (instance" in p.explain()


@pytest.mark.parametrize("name", RECORDED)
def test_every_stream_count_cuts_inside_domains_where_they_fit(name):
    t = recorded(name)
    usable = tf_autopar.plan(t, width=1, mode="throughput").usable_cpus
    for streams in sorted({1, 2, 3, 5, 7, max(1, usable // 3), max(1, usable // 6), usable}):
        if streams > usable:
            continue
        p = tf_autopar.plan(t, width=1, mode="throughput", streams=streams)
        assert p.instances == streams
        assert len({c for g in p.cpus for c in g}) == sum(len(g) for g in p.cpus)  # disjoint
        check_cut(t, list(p.cpus), usable // streams, f"{name} streams={streams}")


@pytest.mark.parametrize("name", RECORDED)
@pytest.mark.parametrize("width", [1, 2, 4])
def test_latency_plans_use_performance_cores_first(name, width):
    t = recorded(name)
    p = tf_autopar.plan(t, width=width, mode="latency")
    cpus = set(p.cpus[0]) if p.cpus else set(t.affinity)
    kinds = kind_of(t)
    if t.hybrid:
        assert {kinds[c] for c in cpus} == {PERFORMANCE}, f"{name}: latency plan on {sorted(cpus)}"
        assert "efficiency core" in p.explain() and "left out" in p.explain()
        assert p.intra_op <= sum(1 for c in t.cores if c.kind == PERFORMANCE)


@pytest.mark.parametrize("name", RECORDED)
def test_a_budget_takes_the_fewest_domains_and_the_fast_cores(name):
    """A quota's budget (or a worker's share) smaller than the host: whole cores from one domain
    where one holds them, performance cores before efficiency cores. Budgets that cover the
    whole host have nothing to choose and are left out."""
    host = recorded(name)
    for budget in (b for b in (1, 2, 3, 4, 6, 8, 12) if b < host.physical_cores):
        _check_budget(name, host, budget)


def _check_budget(name: str, host: Topology, budget: int) -> None:
    t = dataclasses.replace(host, cpu_budget=budget)
    for mode in ("latency", "training"):
        p = tf_autopar.plan(t, width=1, mode=mode)
        cpus = set(p.cpus[0])
        fast = sum(1 for c in t.cores if c.kind == PERFORMANCE)
        expect = min(budget, fast) if t.hybrid and mode == "latency" else budget
        assert len(cpus) == expect
        check_cut(t, [tuple(cpus)], expect, f"{name} budget {budget} {mode}")
        if t.hybrid:
            kinds = kind_of(t)
            assert sum(1 for c in cpus if kinds[c] == PERFORMANCE) == min(budget, fast)


@pytest.mark.parametrize("name", RECORDED)
def test_launcher_and_worker_slices_stay_in_domains(name):
    """(More workers than cores share cores instead: not a cut, left out.)"""
    t = recorded(name)
    for count in (c for c in (2, 3, 4, 6, 16) if c <= t.physical_cores):
        _check_slices(name, t, count)


def _check_slices(name: str, t: Topology, count: int) -> None:
    parts = slices.split(t, count)
    assert len(parts) == count
    smallest = min(p.cores for p in parts)
    # whole cores: one CPU per core to compare with the domains' core counts
    firsts = {c.cpus[0] for c in t.cores}
    groups = [tuple(cpu for cpu in p.cpus if cpu in firsts) for p in parts]
    check_cut(t, [g[:smallest] for g in groups], smallest, f"{name} {count} slices")


def test_epyc_streams_of_three_cores_no_longer_straddle_complexes():
    """The case the node-only cut got wrong: 3-core streams on 8-core complexes. Cut by node
    alone, the third stream took cores 6, 7 and 8 (two complexes); now each complex holds two
    streams and only its two leftover cores join a crossing stream."""
    t = recorded("epyc-2s-128c-16ccx")
    p = tf_autopar.plan(t, width=1, mode="throughput", streams=42)
    dom = domain_of(t)
    spans = [len({dom[c] for c in g}) for g in p.cpus]
    assert spans.count(1) == 32 and max(spans) == 2
    assert p.cpus[:3] == ((0, 1, 2), (3, 4, 5), (8, 9, 10))
    assert "32 of 42 streams inside one cache domain; 10 span 2 domains" in p.explain()


def test_epyc_budget_inside_one_complex_under_a_cpuset_that_favours_two(host_variant):
    """A cpuset of cores 5-7 (CCX 0) and 8-15 (CCX 1): a 4-core budget takes CCX 1, not 5-8."""
    t = dataclasses.replace(
        detect_topology(host_variant("epyc-2s-128c-16ccx", affinity="5-15"), cpu_details=False),
        cpu_budget=4,
        threading_runtime="eigen",
    )
    p = tf_autopar.plan(t, width=1, mode="latency")
    assert p.cpus == ((8, 9, 10, 11),)
    assert "latency plan inside one cache domain (L3 1)" in p.explain()


def test_snc_streams_stay_inside_a_node_and_the_socket_cache():
    t = recorded("xeon-snc2-2s-80c")
    p = tf_autopar.plan(t, width=1, mode="throughput", streams=4)
    nodes = {cpu: c.numa_node for c in t.cores for cpu in c.cpus}
    assert [sorted({nodes[c] for c in g}) for g in p.cpus] == [[0], [1], [2], [3]]
    p = tf_autopar.plan(t, width=1, mode="throughput", streams=3)  # 26 cores: no node holds one
    dom = domain_of(t)
    assert [len({dom[c] for c in g}) for g in p.cpus] == [1, 1, 2]


def test_hybrid_default_streams_and_an_asked_count_that_must_mix():
    t = recorded("alderlake-i7-12700")
    p = tf_autopar.plan(t, width=1, mode="throughput")
    assert p.cpus == ((0, 2), (4, 6), (8, 10), (12, 14), (16, 17), (18, 19))
    assert "4 of 6 streams on performance cores, 2 on efficiency cores (instances 4-5: CPUs 16-19)" in p.explain()
    p = tf_autopar.plan(t, width=1, mode="throughput", streams=2)  # 6 cores each: one must mix
    kinds = kind_of(t)
    assert [sorted({kinds[c] for c in g}) for g in p.cpus] == [[PERFORMANCE], [EFFICIENCY, PERFORMANCE]]
    assert "1 mixed (instances 1)" in p.explain()


def test_arm_latency_plan_on_the_big_cores_although_the_little_ones_come_first():
    t = recorded("arm-rk3588-biglittle")
    p = tf_autopar.plan(t, width=1, mode="latency")
    assert p.cpus == ((4, 5, 6, 7),) and p.intra_op == 4
    t2 = dataclasses.replace(t, cpu_budget=6)  # a quota beyond the big cores: latency keeps the 4
    assert tf_autopar.plan(t2, width=1, mode="latency").cpus == ((4, 5, 6, 7),)
    # training keeps every core (today's rule, unmeasured on hybrid hosts)
    assert tf_autopar.plan(t2, width=1, mode="training").cpus == ((0, 1, 4, 5, 6, 7),)


def test_a_worker_share_of_efficiency_cores_is_planned_on_them():
    t = recorded("alderlake-i7-12700")
    share = slices.restrict(t, (16, 17, 18, 19))
    assert not share.hybrid and share.core_kinds_from == ""
    p = tf_autopar.plan(share, width=1, mode="latency")
    assert p.intra_op == 4 and "left out" not in p.explain()
    assert [d.cpus for d in share.cache_domains] == [(16, 17, 18, 19)]


def test_hosts_without_cache_or_type_information_plan_as_before():
    """The node-only cut, by hand, for a 3-stream split of a 4-node EPYC tree without caches."""
    t = recorded("epyc-4numa-64c")
    p = tf_autopar.plan(t, width=1, mode="throughput", streams=3)
    assert p.cpus == (
        tuple(range(0, 16)) + tuple(range(16, 21)),
        tuple(range(21, 32)) + tuple(range(32, 42)),
        tuple(range(42, 48)) + tuple(range(48, 63)),
    )
    assert not any("cache" in f or "hybrid" in f for f in p.facts)


def test_cut_nested_is_pure_and_prefers_the_finest_group():
    items = list(range(10))
    place = {i: (0, i // 5, i // 3) for i in items}  # two nodes of 5, domains of 3 (split by the nodes)
    out = cut_nested(items, [3, 3, 3], place.__getitem__)
    assert out == [[0, 1, 2], [6, 7, 8], [3, 4, 5]]
    # pieces 3+3+3+3 left over, 5 per slice: each slice takes two pieces, not 3+2 then 1+3+1
    place2 = {i: (0, i // 8) for i in range(32)}
    out = cut_nested(list(range(32)), [5] * 6, place2.__getitem__)
    assert [len({i // 8 for i in sl}) for sl in out] == [1, 1, 1, 1, 2, 2]
    assert cut_nested([], [1], place.__getitem__) == []


def test_fractional_quota_rule_is_floor_today_and_one_more_when_switched(monkeypatch):
    from test_planner_hosts import make_topology

    t = make_topology(1, 1, 2, 1, quota=1.5)
    p = tf_autopar.plan(t, width=1, mode="latency")
    assert (p.inter_op, p.intra_op) == (1, 1)
    assert any("bench_fractional_quota.py" in f for f in p.facts)
    monkeypatch.setattr(planner, "FRACTIONAL_QUOTA_EXTRA_THREAD", True)
    p = tf_autopar.plan(t, width=1, mode="latency")
    assert p.intra_op == 2 and p.usable_cpus == 2
    whole = make_topology(1, 1, 4, 1, quota=2.0)  # a whole quota has no remainder to spend
    assert tf_autopar.plan(whole, width=1, mode="latency").intra_op == 2
    narrow = make_topology(1, 1, 2, 1, quota=1.5, budget=1, affinity=(0,))  # no core for it
    assert tf_autopar.plan(narrow, width=1, mode="latency").intra_op == 1


def test_core_defaults_keep_hand_built_topologies_plain():
    c = Core(socket=0, core_id=0, cpus=(0,))
    assert (c.cache_domain, c.kind, c.capacity) == (None, "", None)


def test_plan_cache_key_tells_hosts_apart_by_domains_and_core_types_only_where_they_have_them(host_variant):
    from tf_autopar.runtime.cache import topology_key

    plain = recorded("epyc-4numa-64c")
    assert topology_key(plain) == topology_key(dataclasses.replace(plain, cache_domains=()))
    epyc = recorded("epyc-2s-128c-16ccx")
    assert topology_key(epyc) != topology_key(dataclasses.replace(epyc, cache_domains=epyc.cache_domains[:1]))
    adl = recorded("alderlake-i7-12700")
    flat = dataclasses.replace(adl, cores=tuple(dataclasses.replace(c, kind="") for c in adl.cores))
    assert topology_key(adl) != topology_key(flat)
