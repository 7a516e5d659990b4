"""Hand-built Topology objects of the fixture hosts the planner is tested on.

Other test_planner_* modules import HOSTS / make_topology from here. CPU numbering follows
Linux on x86: core i (counted across sockets and nodes) is CPU i, its SMT sibling is CPU
i + number of cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tf_autopar.topology.model import Core, CpuQuota, NumaNode, Topology


def make_topology(
    sockets: int = 1,
    nodes_per_socket: int = 1,
    cores_per_node: int = 2,
    smt: int = 1,
    *,
    affinity: tuple[int, ...] | None = None,
    budget: int | None = None,
    quota: float | None = None,
    runtime: str = "eigen",
    cgroup_version: int = 2,
) -> Topology:
    total = sockets * nodes_per_socket * cores_per_node
    mask = set(range(total * smt)) if affinity is None else set(affinity)
    cores = []
    nodes: dict[int, list[int]] = {}
    for i in range(total):
        node = i // cores_per_node
        socket = node // nodes_per_socket
        cpus = tuple(cpu for cpu in (i + k * total for k in range(smt)) if cpu in mask)
        if cpus:
            cores.append(
                Core(socket=socket, core_id=i % (nodes_per_socket * cores_per_node), cpus=cpus, numa_node=node)
            )
            nodes.setdefault(node, []).extend(cpus)
    cpu_quota = None
    if quota is not None:
        cpu_quota = CpuQuota(
            cpus=quota,
            quota_us=int(quota * 100000),
            period_us=100000,
            cgroup_version=cgroup_version,
            path="/sys/fs/cgroup/cpu.max",
        )
    if budget is None:
        budget = len(mask) if quota is None else min(len(mask), max(1, int(quota)))
    return Topology(
        host_cpus=total * smt,
        affinity=tuple(sorted(mask)),
        cores=tuple(cores),
        numa_nodes=tuple(NumaNode(id=n, cpus=tuple(sorted(c))) for n, c in sorted(nodes.items())),
        cpu_budget=budget,
        quota=cpu_quota,
        cpuset=tuple(sorted(mask)) if affinity is not None else None,
        threading_runtime=runtime,
    )


def hosts(runtime: str = "eigen") -> dict[str, Topology]:
    return {
        # The paper's server: 2 x 12-core Skylake, 2 threads per core, one NUMA node per socket.
        "skylake": make_topology(2, 1, 12, 2, runtime=runtime),
        # 64-core EPYC in NPS4: 1 socket, 4 NUMA nodes of 16 cores, SMT 2 (128 CPUs).
        "epyc": make_topology(1, 4, 16, 2, runtime=runtime),
        # 64-core ARM server (Graviton-like): no SMT, 1 node.
        "arm": make_topology(1, 1, 64, 1, runtime=runtime),
        # Container with a 2.5-CPU quota on a 2 x 32-core SMT host (128 CPUs): budget 2.
        "quota2.5": make_topology(2, 1, 32, 2, quota=2.5, runtime=runtime),
        # Container with cpuset 4,5,36,37 on a 32-core SMT host: 4 CPUs = 2 cores x 2 siblings.
        "cpuset4": make_topology(1, 1, 32, 2, affinity=(4, 5, 36, 37), runtime=runtime),
        # 8-core SMT host (16 CPUs) under a cgroup v1 quota of 3 CPUs.
        "quota3v1": make_topology(1, 1, 8, 2, quota=3.0, cgroup_version=1, runtime=runtime),
        # This machine: 2 cores, no SMT.
        "this": make_topology(1, 1, 2, 1, runtime=runtime),
    }


HOSTS = hosts()


def test_fixture_hosts_have_the_intended_shape():
    h = hosts()
    assert (h["skylake"].physical_cores, h["skylake"].logical_cpus, h["skylake"].sockets) == (24, 48, (0, 1))
    assert h["skylake"].cores_on_socket(1)[0].cpus == (12, 36)
    assert (h["epyc"].physical_cores, h["epyc"].logical_cpus, len(h["epyc"].numa_nodes)) == (64, 128, 4)
    assert (h["arm"].physical_cores, h["arm"].threads_per_core) == (64, 1)
    assert (h["quota2.5"].cpu_budget, h["quota2.5"].logical_cpus, h["quota2.5"].physical_cores) == (2, 128, 64)
    assert [c.cpus for c in h["cpuset4"].cores] == [(4, 36), (5, 37)] and h["cpuset4"].cpu_budget == 4
    assert (h["quota3v1"].cpu_budget, h["quota3v1"].quota.cgroup_version) == (3, 1)
    assert (h["this"].cpu_budget, h["this"].physical_cores) == (2, 2)


@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
def test_runtime_is_set_on_every_host(runtime):
    assert {t.threading_runtime for t in hosts(runtime).values()} == {runtime}


TF_FREE_MODULES = (
    "test_planner_hosts",
    "test_planner_rule",
    "test_planner_user_settings",
    "test_planner_formats",
    "test_planner_properties",
    "test_planner_cli",
)


def test_planner_and_its_tests_import_no_tensorflow():
    """In a fresh interpreter (other suites in this session may have imported TF): import the
    planner, the CLI and these test modules, plan every host, and check TF stayed out."""
    tests_dir = Path(__file__).resolve().parent
    code = (
        "import sys\n"
        f"for m in {TF_FREE_MODULES!r}: __import__(m)\n"
        "import tf_autopar, tf_autopar.planning, tf_autopar.cli.plan_cmd\n"
        "from test_planner_hosts import hosts\n"
        "for t in hosts('openmp').values():\n"
        "    for mode in ('latency', 'throughput', 'training'):\n"
        "        tf_autopar.plan(t, mode=mode, width=3).format('python')\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tests_dir), str(tests_dir.parent), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
