"""Explicit user settings are kept and reported; baselines; bad input errors. No TensorFlow."""

from __future__ import annotations


import pytest

from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning import baseline_names, baseline_plan, plan, read_user_settings

try:
    from test_planner_hosts import hosts
except ImportError:  # tests/ imported as a package
    from tests.test_planner_hosts import hosts


# ---------------------------------------------------------------- parsing


def test_reads_only_thread_variables_and_parses_them():
    u = read_user_settings(
        {
            "PATH": "/bin",
            "TF_NUM_INTEROP_THREADS": "4",
            "TF_NUM_INTRAOP_THREADS": " 0 ",
            "OMP_NUM_THREADS": "8,2",
            "MKL_NUM_THREADS": "6",
            "KMP_BLOCKTIME": "infinite",
            "KMP_AFFINITY": "granularity=core,scatter",
            "KMP_HW_SUBSET": "2s,10c",
            "TF_OVERRIDE_GLOBAL_THREADPOOL": "True",
        }
    )
    assert (u.inter_op, u.intra_op, u.omp_threads, u.mkl_threads) == (4, 0, 8, 6)
    assert (u.kmp_blocktime, u.kmp_affinity, u.kmp_hw_subset, u.override_global_threadpool) == (
        "infinite",
        "granularity=core,scatter",
        "2s,10c",
        True,
    )
    assert "PATH" not in u.raw and u.raw["OMP_NUM_THREADS"] == "8,2" and u.raw["TF_NUM_INTRAOP_THREADS"] == "0"


def test_blank_values_count_as_unset_and_none_env_is_empty():
    assert read_user_settings({"TF_NUM_INTEROP_THREADS": "", "OMP_NUM_THREADS": "  "}).raw == {}
    assert read_user_settings(None).raw == {}


def test_blocktime_units():
    assert read_user_settings({"KMP_BLOCKTIME": "0"}).kmp_blocktime == 0
    assert read_user_settings({"KMP_BLOCKTIME": "5ms"}).kmp_blocktime == 5
    assert read_user_settings({"KMP_BLOCKTIME": "50us"}).kmp_blocktime == "50us"


@pytest.mark.parametrize(
    "name, value",
    [
        ("TF_NUM_INTEROP_THREADS", "abc"),
        ("TF_NUM_INTEROP_THREADS", "-3"),
        ("TF_NUM_INTRAOP_THREADS", "2.5"),
        ("OMP_NUM_THREADS", "0"),
        ("OMP_NUM_THREADS", "4,x"),
        ("MKL_NUM_THREADS", "-1"),
        ("KMP_BLOCKTIME", "soon"),
        ("TF_OVERRIDE_GLOBAL_THREADPOOL", "yes"),
    ],
)
def test_impossible_values_raise_naming_the_variable(name, value):
    with pytest.raises(ValueError, match=name):
        read_user_settings({name: value})
    with pytest.raises(ValueError, match=name):
        plan(hosts()["this"], env={name: value})


def test_env_must_be_a_mapping():
    with pytest.raises(ValueError, match="mapping"):
        plan(hosts()["this"], env=["TF_NUM_INTEROP_THREADS=2"])


# ---------------------------------------------------------------- kept, never overridden


def test_user_values_are_kept_with_source_user_and_reported():
    env = {"TF_NUM_INTRAOP_THREADS": "7", "PATH": "/usr/bin"}
    p = plan(hosts()["arm"], width=2, env=env)
    # rule: inter 2, intra 64 (eigen); the user's intra 7 wins
    assert (p.inter_op, p.intra_op) == (2, 7)
    assert p.settings["intra_op"].source == "user" and p.settings["inter_op"].source == "planned"
    assert p.user_settings == {"TF_NUM_INTRAOP_THREADS": "7"}
    text = p.explain()
    assert "kept from your environment" in text and "TF_NUM_INTRAOP_THREADS=7" in text
    assert "the rule would give 64" in text
    assert p.to_env()["TF_NUM_INTRAOP_THREADS"] == "7"


def test_user_inter_op_feeds_the_openmp_division():
    p = plan(hosts("openmp")["arm"], width=2, env={"TF_NUM_INTEROP_THREADS": "4"})
    # the user's 4 pools share 64 cores: OMP 64 // 4 = 16 (TF's own intra-op pool: 1)
    assert (p.inter_op, p.intra_op, p.omp_threads) == (4, 1, 16)


def test_user_zero_means_tf_picks_and_is_kept():
    p = plan(hosts()["this"], width=2, env={"TF_NUM_INTEROP_THREADS": "0"})
    assert p.inter_op == 0 and p.settings["inter_op"].source == "user"
    assert p.to_env()["TF_NUM_INTEROP_THREADS"] == "0"
    assert p.config_proto_fields()["inter_op_parallelism_threads"] == 0


def test_user_openmp_settings_kept_verbatim():
    env = {"OMP_NUM_THREADS": "8,2", "KMP_BLOCKTIME": "infinite", "KMP_AFFINITY": "scatter", "KMP_HW_SUBSET": "1s"}
    p = plan(hosts("openmp")["arm"], width=2, env=env)
    assert p.omp_threads == 8 and p.kmp_affinity == "scatter" and p.kmp_hw_subset == "1s"
    out = p.to_env()
    for key, value in env.items():
        assert out[key] == value
    # MKL_NUM_THREADS is unset by the user: it follows their OMP_NUM_THREADS rather than the rule's 32
    assert out["MKL_NUM_THREADS"] == "8"
    assert p.intra_op == 1  # TF intra-op is the rule's (1 on OpenMP builds), the user did not set it


def test_user_omp_on_eigen_build_is_still_kept():
    p = plan(hosts("eigen")["this"], env={"OMP_NUM_THREADS": "1"})
    assert p.omp_threads == 1 and p.to_env()["OMP_NUM_THREADS"] == "1"


def test_override_global_threadpool_kept():
    p = plan(hosts()["this"], env={"TF_OVERRIDE_GLOBAL_THREADPOOL": "1"})
    assert p.override_global_threadpool is True
    assert p.to_env()["TF_OVERRIDE_GLOBAL_THREADPOOL"] == "1"


def test_user_value_above_budget_is_kept_with_a_warning():
    p = plan(hosts()["quota2.5"], env={"TF_NUM_INTRAOP_THREADS": "64"})
    assert p.intra_op == 64
    assert "exceeds the budget of 2 CPUs" in p.explain()


@pytest.mark.parametrize("host", sorted(hosts()))
@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
@pytest.mark.parametrize("mode", ["latency", "throughput", "training"])
def test_applying_a_plan_is_idempotent(host, runtime, mode):
    """Planning again with the plan's own environment keeps every number (all become 'user')."""
    t = hosts(runtime)[host]
    first = plan(t, mode=mode, width=3, env={"KMP_HW_SUBSET": "1s"})
    env = first.to_env()
    again = plan(t, mode=mode, width=3, env=env)
    assert again.to_env() == env
    fields = (
        "inter_op",
        "intra_op",
        "omp_threads",
        "mkl_threads",
        "kmp_blocktime",
        "kmp_affinity",
        "instances",
        "cpus",
    )
    assert [getattr(again, f) for f in fields] == [getattr(first, f) for f in fields]


# ---------------------------------------------------------------- baselines

# host: (logical CPUs in mask, sockets, physical cores) - worked out from the host shapes
BASELINE_EXPECTED = {
    "skylake": (48, 2, 24),
    "epyc": (128, 1, 64),
    "arm": (64, 1, 64),
    "quota2.5": (128, 2, 64),  # the quota is ignored by the published recommendations
    "cpuset4": (4, 1, 2),  # 4 CPUs in the mask, 2 physical cores
    "quota3v1": (16, 1, 8),
    "this": (2, 1, 2),
}


@pytest.mark.parametrize("host", sorted(BASELINE_EXPECTED))
@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
def test_baselines_on_every_host(host, runtime):
    logical, sockets, physical = BASELINE_EXPECTED[host]
    t = hosts(runtime)[host]
    d = baseline_plan("tf-default", t)
    assert (d.inter_op, d.intra_op, d.omp_threads, d.to_env()) == (0, 0, None, {})
    assert f"TensorFlow picks: {logical} threads" in d.explain()
    r = baseline_plan("tf-recommended", t)
    assert (r.inter_op, r.intra_op, r.omp_threads) == (sockets, physical, None)
    i = baseline_plan("intel-recommended", t)
    assert (i.inter_op, i.intra_op, i.omp_threads, i.kmp_blocktime, i.kmp_affinity) == (
        sockets,
        physical,
        physical,
        1,
        "granularity=fine,compact,1,0",
    )
    assert i.to_env()["OMP_NUM_THREADS"] == str(physical)
    assert ("change nothing" in i.explain()) == (runtime == "eigen")
    assert {b.name for b in (d, r, i)} == set(baseline_names())
    if t.quota is not None:
        assert "ignored by this baseline" in d.explain()


def test_baselines_ignore_env_but_mention_it():
    b = baseline_plan("tf-recommended", hosts()["skylake"], env={"TF_NUM_INTEROP_THREADS": "4"})
    assert b.inter_op == 2 and b.user_settings == {}
    assert "TF_NUM_INTEROP_THREADS=4" in b.explain()


def test_bad_baseline_name():
    with pytest.raises(ValueError, match="unknown baseline 'mkl'"):
        baseline_plan("mkl", hosts()["this"])


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mode="fast"), "unknown mode 'fast'"),
        (dict(width=0), "width must be a positive integer"),
        (dict(width=-2), "width must be a positive integer"),
        (dict(width=True), "width must be a positive integer"),
        (dict(width=2.0), "width must be a positive integer"),
        (dict(mode="throughput", streams=0), "streams must be a positive integer"),
        (dict(mode="throughput", streams=3), "streams=3 exceeds the budget of 2"),
        (dict(streams=2), "throughput mode only"),
        (dict(width=2, profile=GraphProfile.from_width(2)), "not both"),
        (dict(profile=object()), "no integer avg_width"),
    ],
)
def test_bad_inputs_raise(kwargs, match):
    t = hosts()["this"]
    with pytest.raises(ValueError, match=match):
        plan(t, **kwargs)


def test_topology_without_cores_falls_back_to_affinity_and_empty_raises():
    from tf_autopar.topology.model import Topology

    t = Topology(host_cpus=4, affinity=(0, 1, 2, 3), cores=(), numa_nodes=(), cpu_budget=4)
    assert plan(t, width=2).intra_op == 4
    empty = Topology(host_cpus=0, affinity=(), cores=(), numa_nodes=(), cpu_budget=0)
    with pytest.raises(ValueError, match="no cores"):
        plan(empty)
