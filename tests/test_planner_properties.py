"""Properties over random topologies, widths and modes: never more threads than the budget.
No TensorFlow."""

from __future__ import annotations


from hypothesis import given, settings
from hypothesis import strategies as st

from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning import ThreadPlan, plan

try:
    from test_planner_hosts import make_topology
except ImportError:  # tests/ imported as a package
    from tests.test_planner_hosts import make_topology


@st.composite
def cases(draw):
    sockets = draw(st.integers(1, 4))
    nodes = draw(st.integers(1, 2))
    cores = draw(st.integers(1, 12))
    smt = draw(st.integers(1, 2))
    n_cpus = sockets * nodes * cores * smt
    mask = draw(st.sets(st.integers(0, n_cpus - 1), min_size=1, max_size=n_cpus))
    budget = draw(st.integers(1, len(mask)))
    runtime = draw(st.sampled_from(["eigen", "openmp", "unknown"]))
    topology = make_topology(sockets, nodes, cores, smt, affinity=tuple(sorted(mask)), budget=budget, runtime=runtime)
    mode = draw(st.sampled_from(["latency", "throughput", "training"]))
    hyper = draw(st.booleans())
    usable = min(budget, len(mask) if hyper else len(topology.cores))
    streams = draw(st.one_of(st.none(), st.integers(1, usable))) if mode == "throughput" else None
    avg = draw(st.one_of(st.none(), st.integers(1, 100)))
    profile = None
    if avg is not None:
        profile = GraphProfile(heavy_ops=avg * 3, depth=3, avg_width=avg, max_width=avg + draw(st.integers(0, 5)))
    tf_data = draw(st.one_of(st.none(), st.booleans()))
    return topology, mode, profile, streams, hyper, tf_data, usable


@settings(max_examples=300, deadline=None)
@given(cases())
def test_never_more_threads_than_the_budget(case):
    topology, mode, profile, streams, hyper, tf_data, usable = case
    p = plan(topology, profile, mode, streams=streams, use_hyperthreads=hyper, tf_data=tf_data)
    forced = bool(tf_data)  # tf.data raises inter-op to 2 even on 1 CPU

    assert p.usable_cpus <= topology.cpu_budget
    per_instance = len(p.cpus[0]) if p.cpus else p.usable_cpus
    assert p.instances * per_instance <= usable

    # binding: disjoint, inside the mask, equal slices, whole budget slots only
    flat = [cpu for group in p.cpus for cpu in group]
    assert len(flat) == len(set(flat))
    assert set(flat) <= set(topology.affinity)
    assert len({len(g) for g in p.cpus}) <= 1
    if not hyper:  # one logical CPU per physical core
        core_of = {cpu: (c.socket, c.core_id) for c in topology.cores for cpu in c.cpus}
        assert len({core_of[cpu] for cpu in flat}) == len(flat)
    if mode == "throughput":
        assert len(p.cpus) == p.instances and p.instances * per_instance == p.usable_cpus
        if streams is not None:
            assert p.instances == streams
    else:
        assert p.instances == 1

    # threads
    assert p.inter_op >= 1
    # no model: Eigen plans TF's default within the budget (every usable CPU), OpenMP one pool
    width_cap = profile.avg_width if profile is not None else (1 if p.runtime == "openmp" else usable)
    assert p.inter_op <= max(width_cap, 2 if forced else 1)
    if not (forced and p.inter_op == 2):
        assert p.inter_op <= per_instance
    if p.runtime == "openmp":
        assert p.intra_op == 1 or p.intra_op == p.omp_threads  # TF's own pool: 1, unless the ops are small
        assert p.inter_op * p.omp_threads <= max(per_instance, p.inter_op)
        if not (forced and p.inter_op == 2):
            assert p.inter_op * p.omp_threads <= per_instance
    else:
        assert p.omp_threads is None
        assert p.intra_op == per_instance <= usable

    # latency plans span more NUMA nodes only with as many branches
    if mode == "latency" and p.cpus:
        node_of = {cpu: c.numa_node for c in topology.cores for cpu in c.cpus}
        assert len({node_of[cpu] for cpu in p.cpus[0]}) <= max(1, min(width_cap, usable))
    if mode == "training":
        assert p.tf_data_threads == p.usable_cpus
    if tf_data or (tf_data is None and profile is not None and profile.uses_tf_data):
        assert p.inter_op >= 2

    assert ThreadPlan.from_json(p.to_json()) == p
    assert p.explain().startswith(f"tf_autopar plan, {mode} mode")
