"""The planner against every fixture host x mode x width x runtime, with numbers worked out
by hand from the rule (tf_autopar/planning/planner.py docstring). No TensorFlow.

Rule recap used for the comments:
- usable = physical cores in the budget (one CPU each); budget < cores takes whole cores
  from one node first and binds to them.
- p = width bounded by usable CPUs (p = 1 without a model).
- eigen: intra = usable CPUs; openmp: OMP = usable // inter, TF intra-op = 1.
- latency keeps min(p, NUMA nodes) nodes (binding when cores are left out).
- throughput: streams = usable // c (c = 1 for <= 8, 2 for <= 32, else 4), inter = min(p, c).
- training: all sockets, tf_data pool = usable.
"""

from __future__ import annotations


import dataclasses

import pytest

from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning import MODES, plan
from tf_autopar.topology.cpulist import format_cpulist

try:
    from test_planner_hosts import hosts, make_topology
except ImportError:  # tests/ imported as a package
    from tests.test_planner_hosts import hosts, make_topology

L, T, TR = "latency", "throughput", "training"
BIG = 100  # a "large" width: more branches than any host has cores

# (host, mode, width, (eigen inter, eigen intra), (openmp inter, OpenMP threads; TF intra = 1), instances, binding of
#  instance 0 as a cpulist or None for no binding)
EXPECTED = [
    # --- skylake: 2 sockets x 12 cores x 2 threads, 1 NUMA node per socket; usable 24 physical cores.
    # width 1: p = 1 < 2 sockets -> socket 0 only (12 cores, CPUs 0-11); eigen intra 12; openmp 12/1 = 12
    ("skylake", L, 1, (1, 12), (1, 12), 1, "0-11"),
    # width 2 >= 2 sockets: both sockets, 24 cores; eigen intra 24; openmp 24/2 = 12
    ("skylake", L, 2, (2, 24), (2, 12), 1, None),
    # width 3: 24 cores, openmp 24/3 = 8 (the paper's example shape)
    ("skylake", L, 3, (3, 24), (3, 8), 1, None),
    # width 100 bounded by 24 usable cores: inter 24; openmp 24/24 = 1
    ("skylake", L, BIG, (24, 24), (24, 1), 1, None),
    # throughput: 24 usable -> 2 cores per stream -> 12 streams; stream 0 = cores 0,1 (socket 0)
    ("skylake", T, 1, (1, 2), (1, 2), 12, "0-1"),
    ("skylake", T, 2, (2, 2), (2, 1), 12, "0-1"),  # inter min(2,2)=2; openmp 2/2 = 1
    ("skylake", T, 3, (2, 2), (2, 1), 12, "0-1"),  # inter min(3,2)=2
    ("skylake", T, BIG, (2, 2), (2, 1), 12, "0-1"),
    # training: all 24 cores of both sockets
    ("skylake", TR, 1, (1, 24), (1, 24), 1, None),
    ("skylake", TR, 2, (2, 24), (2, 12), 1, None),
    ("skylake", TR, 3, (3, 24), (3, 8), 1, None),
    ("skylake", TR, BIG, (24, 24), (24, 1), 1, None),
    # --- epyc: 1 socket, 4 NUMA nodes x 16 cores, SMT 2; usable 64.
    # latency keeps min(p, 4) nodes: width 1 -> node 0 (0-15), 2 -> 0-31, 3 -> 0-47, 100 -> all
    ("epyc", L, 1, (1, 16), (1, 16), 1, "0-15"),
    ("epyc", L, 2, (2, 32), (2, 16), 1, "0-31"),  # openmp 32/2
    ("epyc", L, 3, (3, 48), (3, 16), 1, "0-47"),  # openmp 48/3
    ("epyc", L, BIG, (64, 64), (64, 1), 1, None),
    # throughput: 64 usable -> 4 per stream -> 16 streams (4 per node)
    ("epyc", T, 1, (1, 4), (1, 4), 16, "0-3"),
    ("epyc", T, 2, (2, 4), (2, 2), 16, "0-3"),
    ("epyc", T, 3, (3, 4), (3, 1), 16, "0-3"),  # openmp 4 // 3 = 1
    ("epyc", T, BIG, (4, 4), (4, 1), 16, "0-3"),  # inter min(100, 4) = 4
    ("epyc", TR, 1, (1, 64), (1, 64), 1, None),
    ("epyc", TR, 2, (2, 64), (2, 32), 1, None),
    ("epyc", TR, 3, (3, 64), (3, 21), 1, None),  # 64 // 3 = 21 (one core idle)
    ("epyc", TR, BIG, (64, 64), (64, 1), 1, None),
    # --- arm: 64 cores, no SMT, 1 node: latency never restricted
    ("arm", L, 1, (1, 64), (1, 64), 1, None),
    ("arm", L, 2, (2, 64), (2, 32), 1, None),
    ("arm", L, 3, (3, 64), (3, 21), 1, None),
    ("arm", L, BIG, (64, 64), (64, 1), 1, None),
    ("arm", T, 1, (1, 4), (1, 4), 16, "0-3"),
    ("arm", T, 2, (2, 4), (2, 2), 16, "0-3"),
    ("arm", T, 3, (3, 4), (3, 1), 16, "0-3"),
    ("arm", T, BIG, (4, 4), (4, 1), 16, "0-3"),
    ("arm", TR, 1, (1, 64), (1, 64), 1, None),
    ("arm", TR, 2, (2, 64), (2, 32), 1, None),
    ("arm", TR, 3, (3, 64), (3, 21), 1, None),
    ("arm", TR, BIG, (64, 64), (64, 1), 1, None),
    # --- quota2.5: 2.5-CPU quota on a 2 x 16-core SMT host -> budget 2 -> cores 0,1 of socket 0, bound
    ("quota2.5", L, 1, (1, 2), (1, 2), 1, "0-1"),
    ("quota2.5", L, 2, (2, 2), (2, 1), 1, "0-1"),
    ("quota2.5", L, 3, (2, 2), (2, 1), 1, "0-1"),  # width 3 bounded by 2 usable
    ("quota2.5", L, BIG, (2, 2), (2, 1), 1, "0-1"),
    # throughput: 2 usable -> 1 per stream -> 2 streams of 1x1: CPU 0 and CPU 1
    ("quota2.5", T, 1, (1, 1), (1, 1), 2, "0"),
    ("quota2.5", T, 3, (1, 1), (1, 1), 2, "0"),
    ("quota2.5", T, BIG, (1, 1), (1, 1), 2, "0"),
    ("quota2.5", TR, 2, (2, 2), (2, 1), 1, "0-1"),
    ("quota2.5", TR, 3, (2, 2), (2, 1), 1, "0-1"),
    # --- cpuset4: CPUs 4,5,36,37 = 2 cores x 2 siblings: budget 4 but 2 physical cores usable;
    # both cores used, so no binding needed
    ("cpuset4", L, 1, (1, 2), (1, 2), 1, None),
    ("cpuset4", L, 2, (2, 2), (2, 1), 1, None),
    ("cpuset4", L, 3, (2, 2), (2, 1), 1, None),  # width 3 bounded by 2 usable cores
    ("cpuset4", L, BIG, (2, 2), (2, 1), 1, None),
    ("cpuset4", T, 2, (1, 1), (1, 1), 2, "4"),
    ("cpuset4", T, BIG, (1, 1), (1, 1), 2, "4"),
    ("cpuset4", TR, 1, (1, 2), (1, 2), 1, None),
    ("cpuset4", TR, 3, (2, 2), (2, 1), 1, None),
    # --- quota3v1: 8 cores x 2 SMT, cgroup v1 quota 3 CPUs -> cores 0-2 (one CPU each), bound
    ("quota3v1", L, 1, (1, 3), (1, 3), 1, "0-2"),
    ("quota3v1", L, 2, (2, 3), (2, 1), 1, "0-2"),  # openmp 3 // 2 = 1
    ("quota3v1", L, 3, (3, 3), (3, 1), 1, "0-2"),
    ("quota3v1", L, BIG, (3, 3), (3, 1), 1, "0-2"),
    ("quota3v1", T, 3, (1, 1), (1, 1), 3, "0"),
    ("quota3v1", TR, 3, (3, 3), (3, 1), 1, "0-2"),
    # --- this host: 2 cores, no SMT (docs/measurements.md: 2x2, the default, is best for one process)
    ("this", L, 1, (1, 2), (1, 2), 1, None),
    ("this", L, 2, (2, 2), (2, 1), 1, None),
    ("this", L, 3, (2, 2), (2, 1), 1, None),
    ("this", L, BIG, (2, 2), (2, 1), 1, None),
    # two 1x1 streams (docs/measurements.md, servers table: several servers on defaults oversubscribe)
    ("this", T, 2, (1, 1), (1, 1), 2, "0"),
    ("this", TR, 2, (2, 2), (2, 1), 1, None),
    ("this", TR, BIG, (2, 2), (2, 1), 1, None),
]

USABLE = {"skylake": 24, "epyc": 64, "arm": 64, "quota2.5": 2, "cpuset4": 2, "quota3v1": 3, "this": 2}


def _id(row):
    return f"{row[0]}-{row[1]}-w{row[2]}"


def test_every_host_and_mode_is_covered():
    covered = {(row[0], row[1]) for row in EXPECTED}
    assert covered == {(h, m) for h in hosts() for m in MODES}


@pytest.mark.parametrize("row", EXPECTED, ids=_id)
@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
def test_expected_numbers(row, runtime):
    host, mode, width, eigen, openmp, instances, binding = row
    p = plan(hosts(runtime)[host], mode=mode, width=width)
    assert p.mode == mode and p.instances == instances and p.runtime == runtime
    if runtime == "eigen":
        assert (p.inter_op, p.intra_op) == eigen
        assert p.omp_threads is None and p.kmp_blocktime is None and p.kmp_affinity is None
    else:
        assert (p.inter_op, p.intra_op, p.omp_threads) == (openmp[0], 1, openmp[1])
        assert p.kmp_blocktime == 1 and p.kmp_affinity == "granularity=fine,compact,1,0"
    if binding is None:
        assert p.cpus == ()
    else:
        assert format_cpulist(p.cpus[0]) == binding
    assert len(p.cpus) == (instances if binding is not None else 0)
    if mode == "training":
        assert p.tf_data_threads == USABLE[host]
    else:
        assert p.tf_data_threads is None


def test_unknown_runtime_is_planned_as_eigen():
    t = make_topology(1, 1, 8, 1, runtime="unknown")
    p = plan(t, width=2)
    assert (p.inter_op, p.intra_op, p.omp_threads, p.runtime) == (2, 8, None, "eigen")
    assert "planned as Eigen" in p.explain()


# ---------------------------------------------------------------- throughput layout


def test_skylake_streams_stay_on_their_socket():
    p = plan(hosts()["skylake"], mode="throughput", width=1)
    # 12 streams of 2 cores: the first 6 on socket 0 (CPUs 0-11), the rest on socket 1 (12-23)
    assert [format_cpulist(c) for c in p.cpus] == [f"{i}-{i + 1}" for i in range(0, 24, 2)]
    assert not any("cross" in f for f in p.facts)


def test_epyc_streams_four_per_node():
    p = plan(hosts()["epyc"], mode="throughput")
    for i, group in enumerate(p.cpus):
        assert {cpu // 16 for cpu in group} == {i // 4}  # node n holds cores 16n..16n+15


def test_explicit_streams_two_on_skylake_one_per_socket():
    p = plan(hosts("openmp")["skylake"], mode="throughput", width=3, streams=2)
    # 24 / 2 = 12 cores per stream, one socket each; inter min(3, 12) = 3; OpenMP teams 12 // 3 = 4
    assert [format_cpulist(c) for c in p.cpus] == ["0-11", "12-23"]
    assert (p.instances, p.inter_op, p.intra_op, p.omp_threads) == (2, 3, 1, 4)


def test_explicit_streams_that_cannot_fit_a_node_cross_and_say_so():
    p = plan(hosts()["epyc"], mode="throughput", streams=3)
    # 64 // 3 = 21 cores per stream, 1 idle; nodes have 16 cores, so slices cross nodes
    assert p.instances == 3 and [len(c) for c in p.cpus] == [21, 21, 21]
    assert p.usable_cpus == 63
    assert any("1 CPU(s) left idle" in f for f in p.facts)
    assert any("cross a NUMA node" in f for f in p.facts)
    assert len(set().union(*map(set, p.cpus))) == 63


def test_streams_on_quota_host_are_the_budget_cores():
    p = plan(hosts()["quota2.5"], mode="throughput")
    assert p.cpus == ((0,), (1,))


def test_cpuset_with_siblings_uses_physical_cores_unless_asked():
    t = hosts()["cpuset4"]
    p = plan(t, mode="throughput")
    assert p.cpus == ((4,), (5,))  # 2 cores, one CPU each, though the budget is 4
    h = plan(t, mode="throughput", use_hyperthreads=True)
    # 4 logical CPUs -> 4 streams of 1; fill order keeps a core's siblings together
    assert h.cpus == ((4,), (36,), (5,), (37,))
    assert plan(t, width=2, use_hyperthreads=True).intra_op == 4


# ---------------------------------------------------------------- hyperthreads


def test_hyperthreads_counted_when_asked():
    t = hosts()["skylake"]
    p = plan(t, width=1, use_hyperthreads=True)
    # 48 logical CPUs; width 1 -> socket 0 only: its 12 cores x 2 siblings = 24 CPUs (0-11, 24-35)
    assert (p.inter_op, p.intra_op) == (1, 24)
    assert format_cpulist(p.cpus[0]) == "0-11,24-35"
    assert "hyperthreads counted" in p.explain()
    train = plan(t, mode="training", width=2, use_hyperthreads=True)
    assert (train.inter_op, train.intra_op, train.cpus) == (2, 48, ())


def test_physical_cores_only_by_default_and_says_why():
    p = plan(hosts()["skylake"], mode="training")
    assert p.intra_op == 24  # not 48
    assert "hyperthreads help little" in p.explain()


def test_budget_smaller_than_cores_takes_whole_cores_with_hyperthreads():
    t = make_topology(2, 1, 4, 2, quota=3.0)  # 8 cores x 2; budget 3
    p = plan(t, mode="training", use_hyperthreads=True)
    # core 0 = CPUs (0, 8), core 1 = (1, 9): the first 3 in fill order are 0, 8, 1
    assert p.cpus == ((0, 1, 8),) and p.intra_op == 3


# ---------------------------------------------------------------- tf.data


def test_tf_data_forces_two_inter_op_threads():
    this = hosts()["this"]
    p = plan(this, width=1, tf_data=True)  # width 1: p would be 1
    assert (p.inter_op, p.intra_op) == (2, 2)
    assert "deadlock" in p.explain()
    one_core = make_topology(1, 1, 1, 1, runtime="openmp")
    q = plan(one_core, width=1, tf_data=True)  # even on 1 core
    assert (q.inter_op, q.intra_op, q.omp_threads) == (2, 1, 1)


def test_tf_data_from_profile_and_explicit_false():
    prof = GraphProfile(heavy_ops=4, depth=4, avg_width=1, max_width=1, uses_tf_data=True)
    assert plan(hosts()["arm"], prof).inter_op == 2
    assert plan(hosts()["arm"], prof, tf_data=False).inter_op == 1


def test_tf_data_does_not_spread_latency_plan_across_sockets():
    p = plan(hosts("openmp")["skylake"], width=1, tf_data=True)
    # width 1 keeps socket 0 (12 cores); the tf.data floor makes inter 2, so OMP 12 // 2 = 6
    assert (p.inter_op, p.omp_threads, format_cpulist(p.cpus[0])) == (2, 6, "0-11")


# ---------------------------------------------------------------- profiles and facts


def test_profile_width_fact_and_bounds():
    prof = GraphProfile(heavy_ops=9, depth=3, avg_width=3, max_width=4)
    p = plan(hosts("openmp")["skylake"], prof)
    assert (p.inter_op, p.omp_threads) == (3, 8)
    assert "model width 3 (9 heavy ops / depth 3)" in p.explain()
    # an average above the max width is bounded by the max width
    odd = GraphProfile(heavy_ops=10, depth=2, avg_width=5, max_width=3)
    assert plan(hosts()["arm"], odd).inter_op == 3


def test_no_model_is_said():
    assert "no model given" in plan(hosts()["arm"]).explain()


@pytest.mark.parametrize("host", ["skylake", "epyc", "arm", "quota2.5", "cpuset4", "quota3v1", "this"])
@pytest.mark.parametrize("mode", MODES)
def test_no_model_is_tensorflows_default_within_the_budget(host, mode):
    """Without a model, an Eigen plan never serialises a wide graph: it is the plan for a graph
    wider than the host (every usable CPU an inter-op thread, as TF's default within the budget);
    OpenMP builds, where each inter-op thread starts a team, keep the width-1 plan."""

    def key(p):
        return (p.inter_op, p.intra_op, p.omp_threads, p.instances, p.cpus)

    eigen, openmp = hosts("eigen")[host], hosts("openmp")[host]
    assert key(plan(eigen, None, mode)) == key(plan(eigen, width=BIG, mode=mode))
    assert key(plan(openmp, None, mode)) == key(plan(openmp, width=1, mode=mode))
    if mode != "throughput" and len(eigen.affinity) > 1:
        assert plan(eigen, None, mode).inter_op > 1


def test_quota_explanation_mentions_throttling():
    text = plan(hosts()["quota2.5"], width=2).explain()
    assert "quota 2.5 CPUs -> budget 2" in text
    assert "128 threads" in text and "throttled" in text


def test_runtime_explanations():
    assert "shared" in plan(hosts("eigen")["arm"], width=2).explain()
    text = plan(hosts("openmp")["arm"], width=2).explain()
    assert "OpenMP teams, one per inter-op thread" in text and "64 CPUs / 2 = 32 OpenMP thread(s)" in text
    assert "TensorFlow's own intra-op pool" in text


def test_latency_restriction_is_explained():
    text = plan(hosts()["skylake"], width=1).explain()
    assert "1 of 2 NUMA nodes (1 of 2 sockets)" in text


def test_topology_warnings_are_reported():
    import dataclasses

    t = dataclasses.replace(hosts()["this"], warnings=("bad cpulist '0-3,x'",))
    assert "topology warning: bad cpulist '0-3,x'" in plan(t).explain()


# --- small ops: the typical heavy op's work decides one intra-op thread (planner.SMALL_OP_WORK)


def _sized(width: int, work: int | None) -> GraphProfile:
    return GraphProfile(heavy_ops=4 * width, depth=4, avg_width=width, max_width=width, typical_op_work=work)


@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
def test_small_ops_get_one_intra_op_thread_and_keep_their_width(runtime):
    from tf_autopar.planning.planner import SMALL_OP_WORK

    host = hosts(runtime)["skylake"]
    small = plan(host, _sized(2, SMALL_OP_WORK - 1))
    assert (small.inter_op, small.intra_op) == (2, 1)
    # OpenMP: the teams still get the division (a team did not lose on small ops; docs/openmp.md)
    assert small.omp_threads == (12 if runtime == "openmp" else None)
    assert "small ops" in small.explain() and "multiply-adds" in small.explain()
    big = plan(host, _sized(2, SMALL_OP_WORK))
    assert (big.intra_op, big.omp_threads) == ((24, None) if runtime == "eigen" else (1, 12))
    assert "small ops" not in big.explain()


def test_unknown_op_work_keeps_the_width_rule():
    """A None batch leaves the work unknown: the planner claims nothing about op size."""
    host = hosts()["arm"]
    assert plan(host, _sized(1, None)).intra_op == plan(host, width=1).intra_op


def test_small_ops_respect_the_users_intra_op_setting():
    p = plan(hosts()["skylake"], _sized(1, 1000), env={"TF_NUM_INTRAOP_THREADS": "6"})
    assert p.intra_op == 6 and p.settings["intra_op"].source == "user"
    assert "the rule would give 1" in p.explain()


def test_small_ops_in_training_and_throughput_modes():
    host = hosts()["skylake"]
    assert plan(host, _sized(1, 1000), "training").intra_op == 1
    # 24 CPUs -> 12 streams of 2 CPUs: each stream's ops run on one thread when small
    streams = plan(host, _sized(1, 1000), "throughput")
    assert (streams.instances, streams.intra_op) == (12, 1) and "small ops" in streams.explain()
    assert plan(host, _sized(1, 10**9), "throughput").intra_op == 2


def test_tiny_ops_run_on_one_inter_op_thread_too():
    from tf_autopar.planning.planner import TINY_OP_WORK

    host = hosts()["skylake"]
    tiny = plan(host, _sized(4, TINY_OP_WORK - 1))
    assert (tiny.inter_op, tiny.intra_op) == (1, 1) and "tiny ops" in tiny.explain()
    assert plan(host, _sized(4, TINY_OP_WORK)).inter_op == 4
    # tf.data still gets its two inter-op threads
    assert plan(host, _sized(4, TINY_OP_WORK - 1), tf_data=True).inter_op == 2


# --- training: ops under TRAIN_SMALL_OP_WORK get >= 2 inter-op threads where the graph is 2-wide


def _chain(work: int | None, max_width: int = 2) -> GraphProfile:
    """A chain net's training graph: average width 1, 2-wide where the gradients pair up."""
    return GraphProfile(heavy_ops=15, depth=10, avg_width=1, max_width=max_width, typical_op_work=work, training=True)


def test_training_with_mid_size_ops_pairs_the_gradients():
    from tf_autopar.planning.planner import SMALL_OP_WORK, TRAIN_SMALL_OP_WORK

    this = hosts()["this"]
    mid = plan(this, _chain(85_000_000), "training")  # DeepQ's training graph: 2x2
    assert (mid.inter_op, mid.intra_op) == (2, 2)
    assert "input and weight gradients" in mid.explain() and "small ops" not in mid.explain()
    small = plan(this, _chain(SMALL_OP_WORK - 1), "training")  # ops too small for two threads each: 2x1
    assert (small.inter_op, small.intra_op) == (2, 1) and "small ops" in small.explain()
    # the same graph planned for inference keeps the width rule: 1 inter-op thread
    assert (plan(this, _chain(85_000_000)).inter_op, plan(this, _chain(85_000_000)).intra_op) == (1, 2)
    # at the limit, the width rule as before
    big = plan(this, _chain(TRAIN_SMALL_OP_WORK), "training")
    assert (big.inter_op, big.intra_op) == (1, 2) and "gradients" not in big.explain()


def test_training_pairs_need_a_two_wide_graph_and_leave_tiny_and_wide_graphs_alone():
    from tf_autopar.planning.planner import TINY_OP_WORK

    this = hosts()["this"]
    chain = plan(this, _chain(1_000_000, max_width=1), "training")  # nothing to pair: every CPU per op
    assert (chain.inter_op, chain.intra_op) == (1, 2)
    tiny = plan(this, _chain(TINY_OP_WORK - 1), "training")
    assert (tiny.inter_op, tiny.intra_op) == (1, 1)
    wide = plan(
        hosts()["skylake"],
        GraphProfile(heavy_ops=40, depth=10, avg_width=4, max_width=27, typical_op_work=1_000_000, training=True),
        "training",
    )
    assert (wide.inter_op, wide.intra_op) == (4, 6)  # already wider than a pair: the width rule stands
    unknown = plan(this, _chain(None), "training")
    assert (unknown.inter_op, unknown.intra_op) == (1, 2)  # unknown work: nothing claimed


@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
def test_training_pairs_divide_a_big_host_instead_of_idling_it(runtime):
    """2x1 is what 2 cores measured for small ops; 24 cores get 2 x 12, not 22 idle cores."""
    p = plan(hosts(runtime)["skylake"], _chain(1_000_000), "training")
    if runtime == "eigen":
        assert (p.inter_op, p.intra_op, p.omp_threads) == (2, 12, None)
        assert "divided among the 2 inter-op threads: 12 per op" in p.explain()
    else:  # the OpenMP teams get the division; TensorFlow's own pool stays at 1
        assert (p.inter_op, p.intra_op, p.omp_threads) == (2, 1, 12)
        assert "24 CPUs / 2 = 12 OpenMP thread(s) per team" in p.explain()
    # inference keeps one thread per small op (TF's pool; OpenMP teams: the division)
    assert plan(hosts(runtime)["skylake"], _chain(1_000_000)).intra_op == 1


def test_training_pairs_respect_the_users_inter_op_setting():
    p = plan(hosts()["this"], _chain(1_000_000), "training", env={"TF_NUM_INTEROP_THREADS": "1"})
    assert (p.inter_op, p.intra_op) == (1, 2) and p.settings["inter_op"].source == "user"


def test_loops_get_a_second_inter_op_thread_unless_their_ops_are_tiny():
    this = hosts()["this"]
    rnn = GraphProfile(heavy_ops=6, depth=6, avg_width=1, max_width=1, typical_op_work=8_388_608, loops=True)
    p = plan(this, rnn, env={})
    assert p.inter_op == 2 and "While loops" in p.explain()
    assert plan(this, dataclasses.replace(rnn, loops=False), env={}).inter_op == 1
    assert plan(this, dataclasses.replace(rnn, typical_op_work=50_000), env={}).inter_op == 1  # tiny ops
    assert plan(make_topology(1, 1, 1, 1), rnn, env={}).inter_op == 1  # one CPU


def test_calibration_replaces_the_small_op_threshold():
    this = hosts()["this"]
    prof = GraphProfile(heavy_ops=53, depth=53, avg_width=1, max_width=1, typical_op_work=13_500_000)
    assert plan(this, prof, env={}).intra_op == 2  # over the default 8 M
    measured = {
        "small_op_work": 27_131_904,
        "date": "2026-11-30",
        "where": "measured on this processor model",
        "why": "test",
    }
    p = plan(this, prof, env={}, calibration=measured)
    assert p.intra_op == 1 and "27.1 M multiply-adds, measured on this processor model" in p.explain()


# --- OpenMP builds: what intel-tensorflow 2.14 measured (docs/openmp.md)


def test_openmp_teams_are_sized_for_the_onednn_width_not_the_lookups():
    """DLRM at batch 2048: 26 embedding look-ups beside a chain of 7 matrix multiplies. Its
    width (4, bounded to 2 here) comes from look-ups that run on TensorFlow's threads; only one
    OpenMP team runs at a time, so it gets both cores (2x1x1 ran 1.3x slower than 2x1x2) and one
    inter-op pool (2x1x2 ran 1.1x slower than 1x1x2 on DLRM and DCN-V2)."""
    dlrm = GraphProfile(
        heavy_ops=33,
        depth=7,
        avg_width=4,
        max_width=27,
        typical_op_work=268_435_456,
        heavy_op_types={"GatherV2": 26, "MatMul": 6, "BatchMatMulV2": 1},
        lookups=26,
    )
    p = plan(hosts("openmp")["this"], dlrm)  # the look-ups' share unknown: TF's pool keeps 1 thread
    assert (p.inter_op, p.intra_op, p.omp_threads) == (1, 1, 2)
    assert "embedding look-ups" in p.explain() and "one per OpenMP team that runs at once" in p.explain()
    # on the 2-socket Skylake host: still one team at a time, with every usable core
    big = plan(hosts("openmp")["skylake"], dlrm)
    assert big.inter_op == 1 and big.intra_op == 1 and big.omp_threads == big.usable_cpus > 2
    # a wide convolutional graph (NASNet: no look-ups): the paper's division, 2 teams of 1
    nasnet = GraphProfile(
        heavy_ops=40,
        depth=20,
        avg_width=2,
        max_width=5,
        typical_op_work=30_000_000,
        heavy_op_types={"Conv2D": 30, "DepthwiseConv2dNative": 10},
    )
    assert (lambda q: (q.inter_op, q.intra_op, q.omp_threads))(plan(hosts("openmp")["this"], nasnet)) == (2, 1, 1)
    # stock TF: nothing changes for the look-ups
    assert plan(hosts("eigen")["this"], dlrm).omp_threads is None


def test_openmp_lookup_bound_models_split_their_lookups_over_tensorflows_pool():
    """Look-ups run on TensorFlow's own pool on an OpenMP build. DLRM at batch 2048 (analysed:
    1.7 M elements read, 1.0 G multiply-adds elsewhere, about 14% of a step): TF's pool gets the
    team's threads and one inter-op pool, 1x2x2. DCN-V2 at batch 2048 reads 0.85 M elements
    against 1.85 G multiply-adds (4%), BERT at batch 16 1.0 M against 7.0 G (1.5%): TF's pool
    keeps 1 thread. Stock TF: no change."""
    from tf_autopar.planning.planner import LOOKUP_BOUND_SHARE, lookup_share

    this = hosts("openmp")["this"]
    dlrm = GraphProfile(
        heavy_ops=33,
        depth=7,
        avg_width=4,
        max_width=27,
        typical_op_work=268_435_456,
        lookups=26,
        lookup_work=1_703_936,
        contraction_work=1_017_184_256,
    )
    dcn = dataclasses.replace(dlrm, heavy_ops=32, lookups=26, lookup_work=851_968, contraction_work=1_849_546_752)
    bert = GraphProfile(
        heavy_ops=35,
        depth=26,
        avg_width=1,
        max_width=4,
        typical_op_work=50_000_000,
        lookups=2,
        lookup_work=1_048_576,
        contraction_work=6_980_370_432,
    )
    assert lookup_share(dlrm) >= LOOKUP_BOUND_SHARE > lookup_share(dcn) > lookup_share(bert)
    p = plan(this, dlrm)
    assert (p.inter_op, p.intra_op, p.omp_threads) == (1, 2, 2)
    assert "look-ups take about" in p.explain() and "split" in p.explain()
    assert (lambda q: (q.inter_op, q.intra_op, q.omp_threads))(plan(this, dcn)) == (1, 1, 2)
    assert (lambda q: (q.inter_op, q.intra_op, q.omp_threads))(plan(this, bert)) == (1, 1, 2)
    assert lookup_share(dataclasses.replace(dlrm, contraction_work=None)) is None  # a shape unknown: no claim
    eigen = plan(hosts("eigen")["this"], dlrm)
    assert eigen.omp_threads is None and "look-ups take" not in eigen.explain()
    # the user's inter-op count is kept; the look-ups still get TensorFlow's pool
    mine = plan(this, dlrm, env={"TF_NUM_INTEROP_THREADS": "2"})
    assert mine.inter_op == 2 and mine.intra_op == 2 and mine.settings["inter_op"].source == "user"


def test_recurrent_models_keep_one_pool_on_openmp_builds():
    lstm = GraphProfile(heavy_ops=6, depth=6, avg_width=1, max_width=1, typical_op_work=20_000_000, loops=True)
    omp, eigen = plan(hosts("openmp")["this"], lstm), plan(hosts("eigen")["this"], lstm)
    assert (omp.inter_op, omp.intra_op, omp.omp_threads) == (1, 1, 2)
    assert "keeps 1 inter-op pool" in omp.explain()
    assert eigen.inter_op == 2  # the Eigen build overlaps a loop's iterations on a second pool
