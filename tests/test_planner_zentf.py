"""AMD's zentf plugin: the plan's ZenDNN and OpenMP variables on recorded hosts. Pure: no zentf, no TF."""

from __future__ import annotations

import dataclasses

import pytest

import tf_autopar.planning.zentf as Z
from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning import plan
from tf_autopar.planning.plan import ThreadPlan
from tf_autopar.topology import ZentfPlugin, detect_topology

ZENTF = ZentfPlugin(
    version="2.21.0.0",
    plugin="/venv/site-packages/tensorflow-plugins/libamdcpu_plugin.so",
    zendnn="v5.2.2",
    tf_version="2.21.0",
    openmp="libiomp5.so",
)
ON = {Z.ENABLE: "1"}
KMP_EXTRAS = (Z.KMP_TPAUSE, *Z.BARRIER_PATTERNS)


def host(host_root, name: str, zentf: ZentfPlugin | None = ZENTF):
    """A recorded host tree with (or without) zentf, whatever this interpreter has installed."""
    return dataclasses.replace(detect_topology(host_root(name), cpu_details=False), zentf=zentf)


@pytest.mark.parametrize("name", ["epyc-2s-128c-16ccx", "epyc-4numa-64c", "this-host-2c"])
def test_latency_plan_sets_the_guides_variables_with_one_team_per_instance(host_root, name):
    p = plan(host(host_root, name), GraphProfile.from_width(1), "latency", env=ON)
    env = p.to_env()
    cpus = len(p.cpus[0]) if p.cpus else p.usable_cpus
    # the OpenMP rule: one team (width 1) gets every CPU of the instance; TF's own pool the same
    # (the guide's TF_NUM_INTRAOP_THREADS = cores; 1 ran slower under zentf)
    assert p.runtime == "openmp" and p.instances == 1
    assert env["OMP_NUM_THREADS"] == str(cpus) == str(p.usable_cpus)
    assert (env["TF_NUM_INTEROP_THREADS"], env["TF_NUM_INTRAOP_THREADS"]) == ("1", str(cpus))
    assert "TF_NUM_INTRAOP_THREADS = cores" in p.settings["intra_op"].reason
    assert env["KMP_BLOCKTIME"] == "1"
    # no pinning: the guide's compact KMP_AFFINITY ran zentf 2-3x slower here (docs/openmp.md)
    assert "KMP_AFFINITY" not in env and "no pinning" in p.settings["kmp_affinity"].reason
    assert {k: env[k] for k in (Z.OMP_DYNAMIC, Z.OMP_PROC_BIND, Z.MATMUL_DIRECT, Z.MATMUL_WEIGHT_CACHE)} == {
        Z.OMP_DYNAMIC: "FALSE",
        Z.OMP_PROC_BIND: "FALSE",
        Z.MATMUL_DIRECT: "1",
        Z.MATMUL_WEIGHT_CACHE: "1",
    }
    assert env[Z.MATMUL_ALGO] == Z.MATMUL_ALGO_LATENCY
    assert env[Z.KMP_TPAUSE] == "0" and all(env[b] == "dist,dist" for b in Z.BARRIER_PATTERNS)
    assert env[Z.OMP_WAIT_POLICY] == "ACTIVE"  # the process has the whole host
    assert any("ZenDNN plans its OpenMP threads" in f for f in p.facts)
    assert any("zentf 2.21.0.0 (ZenDNN v5.2.2" in f for f in p.facts)
    assert all(p.settings[v].source == "planned" and "57300" in p.settings[v].reason for v in p.plugin_env)


@pytest.mark.parametrize("name", ["epyc-2s-128c-16ccx", "epyc-4numa-64c"])
def test_throughput_plan_takes_the_throughput_algo_and_passive_waits(host_root, name):
    p = plan(host(host_root, name), GraphProfile.from_width(1), "throughput", env=ON)
    env = p.to_env()
    assert p.instances > 1
    assert env["OMP_NUM_THREADS"] == env["TF_NUM_INTRAOP_THREADS"] == str(len(p.cpus[0]))  # each stream's CPUs
    assert env[Z.MATMUL_ALGO] == Z.MATMUL_ALGO_THROUGHPUT
    assert env[Z.OMP_WAIT_POLICY] == "PASSIVE"  # streams share the host: waiting threads yield


def test_a_process_with_part_of_the_host_waits_passively(host_root):
    topo = host(host_root, "container-v2-quota-2.5")
    assert topo.cpu_budget < topo.host_cpus
    p = plan(topo, GraphProfile.from_width(1), "latency", env=ON)
    assert p.to_env()[Z.OMP_WAIT_POLICY] == "PASSIVE"
    assert p.to_env()["OMP_NUM_THREADS"] == str(topo.cpu_budget)


def test_the_users_own_variables_are_kept_and_reported(host_root):
    mine = {
        **ON,
        "OMP_NUM_THREADS": "3",
        "KMP_BLOCKTIME": "0",
        Z.MATMUL_ALGO: "4",
        Z.OMP_WAIT_POLICY: "passive",
        Z.KMP_TPAUSE: "1",
        "KMP_AFFINITY": "compact",
        "TF_NUM_INTRAOP_THREADS": "2",
    }
    p = plan(host(host_root, "epyc-4numa-64c"), GraphProfile.from_width(1), "latency", env=mine)
    env = p.to_env()
    assert {k: env[k] for k in mine} == mine
    for var in (Z.MATMUL_ALGO, Z.OMP_WAIT_POLICY, Z.KMP_TPAUSE):
        assert p.settings[var].source == "user" and var not in p.plugin_env
        assert p.user_settings[var] == mine[var]
    assert p.settings["omp_threads"].source == p.settings["kmp_affinity"].source == "user"
    assert p.settings["intra_op"].source == "user"
    text = p.explain()
    assert "kept from your environment (never overridden)" in text
    assert f"{Z.MATMUL_ALGO}=4" in text and f"{Z.OMP_WAIT_POLICY}=passive" in text
    assert "the guide gives 1" in p.settings[Z.MATMUL_ALGO].reason
    # the variables the user did not set are still planned
    assert env[Z.MATMUL_DIRECT] == "1" and env[Z.OMP_DYNAMIC] == "FALSE"


@pytest.mark.parametrize("mode", ["latency", "throughput"])
def test_nothing_zentf_specific_without_zentf_or_with_it_off(host_root, mode):
    profile = GraphProfile.from_width(1)
    absent = plan(host(host_root, "epyc-2s-128c-16ccx", zentf=None), profile, mode, env=ON)
    off = plan(host(host_root, "epyc-2s-128c-16ccx"), profile, mode, env={})
    stock = plan(host(host_root, "epyc-2s-128c-16ccx", zentf=None), profile, mode, env={})
    for p in (absent, off):
        assert p.plugin_env == {} and p.runtime == stock.runtime == "eigen"
        assert not set(Z.VARIABLES) & (set(p.to_env()) | set(p.settings))
        assert "OMP_NUM_THREADS" not in p.to_env()
        assert (p.inter_op, p.intra_op, p.instances, p.cpus) == (
            stock.inter_op,
            stock.intra_op,
            stock.instances,
            stock.cpus,
        )
    assert not any("zentf" in f for f in absent.facts)
    assert any("installed but off" in f for f in off.facts)


def test_gnu_openmp_plugin_gets_no_kmp_extras_and_recommenders_keep_algo_1(host_root):
    gomp = dataclasses.replace(ZENTF, openmp="libgomp.so.1")
    dlrm_like = dataclasses.replace(GraphProfile.from_width(1), lookups=26)
    p = plan(host(host_root, "epyc-4numa-64c", zentf=gomp), dlrm_like, "throughput", env=ON)
    env = p.to_env()
    assert not set(KMP_EXTRAS) & set(env)
    assert env[Z.MATMUL_ALGO] == Z.MATMUL_ALGO_LATENCY  # the guide's value for recommenders in any mode


def test_a_wide_model_keeps_its_pools_and_divides_the_teams(host_root):
    p = plan(host(host_root, "this-host-2c"), GraphProfile.from_width(2), "latency", env=ON)
    assert p.inter_op == 2 and p.omp_threads == p.intra_op == 1  # 2 teams of 1 on 2 cores
    assert any("TF_NUM_INTEROP_THREADS=1" in f for f in p.facts)


def test_plan_round_trips_its_zentf_variables(host_root):
    p = plan(host(host_root, "this-host-2c"), GraphProfile.from_width(1), "latency", env=ON)
    back = ThreadPlan.from_json(p.to_json())
    assert back.plugin_env == p.plugin_env and back.to_env() == p.to_env()
