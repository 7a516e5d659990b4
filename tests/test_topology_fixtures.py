"""detect_topology on every recorded host tree: numbers written down by hand from the specs."""

from __future__ import annotations

import filecmp
import os

import pytest

from tf_autopar.topology import detect_topology

HOSTS = os.path.join(os.path.dirname(__file__), "fixtures", "hosts")


# name: (host_cpus, logical, physical cores, sockets, threads/core, NUMA nodes, quota CPUs, budget, vendor)
EXPECTED = {
    "skylake-2s-24c-48t": (48, 48, 24, 2, 2, 2, None, 48, "Intel"),
    "epyc-4numa-64c": (128, 128, 64, 1, 2, 4, None, 128, "AMD"),
    "arm-graviton-64c": (64, 64, 64, 1, 1, 1, None, 64, "ARM"),
    "container-v2-quota-2.5": (128, 128, 64, 2, 2, 2, 2.5, 2, "Intel"),
    "container-cpuset": (64, 4, 2, 1, 2, 1, None, 4, "Intel"),
    "cgroup-v1-host": (16, 16, 8, 1, 2, 1, 3.0, 3, "Intel"),
    "garbled": (8, 8, 4, 1, 2, 1, None, 8, "Intel"),
    "this-host-2c": (2, 2, 2, 1, 1, 1, None, 2, "AMD"),
    "epyc-2s-128c-16ccx": (256, 256, 128, 2, 2, 2, None, 256, "AMD"),
    "xeon-snc2-2s-80c": (160, 160, 80, 2, 2, 4, None, 160, "Intel"),
    "alderlake-i7-12700": (20, 20, 12, 1, 2, 1, None, 20, "Intel"),
    "arm-rk3588-biglittle": (8, 8, 8, 1, 1, 1, None, 8, "ARM"),
}


def test_every_fixture_has_expectations():
    assert sorted(os.listdir(HOSTS)) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_numbers(name, host_root):
    host, logical, physical, sockets, tpc, numa, quota, budget, vendor = EXPECTED[name]
    t = detect_topology(host_root(name))
    assert t.host_cpus == host
    assert t.logical_cpus == logical
    assert t.physical_cores == physical
    assert len(t.sockets) == sockets
    assert t.threads_per_core == tpc
    assert len(t.numa_nodes) == numa
    assert (t.quota.cpus if t.quota else None) == quota
    assert t.cpu_budget == budget
    assert t.cpu.vendor == vendor
    # every usable CPU is in exactly one core and one NUMA node
    assert sorted(c for core in t.cores for c in core.cpus) == list(t.affinity)
    assert sorted(c for node in t.numa_nodes for c in node.cpus) == list(t.affinity)
    if name != "garbled":
        assert t.warnings == ()


def test_skylake_smt_siblings_numa_and_sparse_core_ids(host_root):
    t = detect_topology(host_root("skylake-2s-24c-48t"))
    first = t.cores[0]
    assert (first.socket, first.core_id, first.cpus, first.numa_node) == (0, 0, (0, 24), 0)
    assert {c.core_id for c in t.cores_on_socket(0)} == {0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13}
    assert len(t.cores_on_socket(1)) == 12
    # core_id repeats across sockets: cpu 12 is socket 1's core 0, sibling 36
    assert any(c.socket == 1 and c.core_id == 0 and c.cpus == (12, 36) for c in t.cores)
    assert [n.cpus for n in t.numa_nodes] == [
        tuple(range(0, 12)) + tuple(range(24, 36)),
        tuple(range(12, 24)) + tuple(range(36, 48)),
    ]
    assert all(c.numa_node == c.socket for c in t.cores)
    assert "avx512f" in t.cpu.isa and "avx512_vnni" not in t.cpu.isa
    assert t.cpu.model == "Intel(R) Xeon(R) Gold 6136 CPU @ 3.00GHz"


def test_epyc_four_numa_nodes(host_root):
    t = detect_topology(host_root("epyc-4numa-64c"))
    assert [n.id for n in t.numa_nodes] == [0, 1, 2, 3]
    assert t.numa_nodes[1].cpus == tuple(range(16, 32)) + tuple(range(80, 96))
    assert sum(1 for c in t.cores if c.numa_node == 3) == 16
    # Zen 2: AVX2, no AVX-512; its "sme" flag (memory encryption) is not ARM's SME
    assert "avx2" in t.cpu.isa and "avx512f" not in t.cpu.isa and "sme" not in t.cpu.isa


def test_arm_without_smt(host_root):
    t = detect_topology(host_root("arm-graviton-64c"))
    assert all(len(c.cpus) == 1 for c in t.cores)
    assert t.cpu.model == "Neoverse-N1"
    assert "asimddp" in t.cpu.isa and "avx2" not in t.cpu.isa


def test_container_quota_comes_from_the_container_group(host_root):
    t = detect_topology(host_root("container-v2-quota-2.5"))
    q = t.quota
    assert (q.quota_us, q.period_us, q.cgroup_version) == (250000, 100000, 2)
    assert q.path.endswith("sys/fs/cgroup/cri-containerd-3f4e5d6c.scope/cpu.max")
    assert t.cpuset is None  # the cpuset covers the whole host


def test_cpuset_container(host_root):
    t = detect_topology(host_root("container-cpuset"))
    assert t.affinity == (4, 5, 36, 37)
    assert t.cpuset == (4, 5, 36, 37)
    assert [c.cpus for c in t.cores] == [(4, 36), (5, 37)]
    assert t.numa_nodes[0].id == 0 and t.numa_nodes[0].cpus == (4, 5, 36, 37)


def test_v1_quota_from_ancestor(host_root):
    t = detect_topology(host_root("cgroup-v1-host"))
    assert (t.quota.quota_us, t.quota.period_us, t.quota.cgroup_version) == (300000, 100000, 1)
    assert t.quota.path.endswith("sys/fs/cgroup/cpu,cpuacct/batch.slice/cpu.cfs_quota_us")


def test_garbled_files_warn_and_fall_back(caplog, monkeypatch, host_root):
    from tf_autopar import _warn

    monkeypatch.setattr(_warn, "SEEN", set())  # as in a fresh process
    with caplog.at_level("WARNING", logger="tf_autopar"):
        t = detect_topology(host_root("garbled"))
        again = detect_topology(host_root("garbled"))  # the same problems: logged once per process
    assert again.warnings == t.warnings
    text = "\n".join(t.warnings)
    assert "cpu.max" in text and "banana" in text
    assert "cpu0/topology missing" in text and "/proc/cpuinfo" in text
    assert "node0/cpulist" in text and "'x'" in text
    assert len(t.warnings) == 3
    assert [r.getMessage() for r in caplog.records if r.name.startswith("tf_autopar")] == list(t.warnings)
    assert [c.cpus for c in t.cores] == [(0, 4), (1, 5), (2, 6), (3, 7)]


def test_committed_trees_match_the_generator(tmp_path, make_hosts, host_root):
    """The declarative specs in make_hosts.py are the source of truth for the committed trees."""
    for name, host in make_hosts.HOSTS.items():
        dest = make_hosts.write_host(host, str(tmp_path / name))
        committed = host_root(name)
        mismatch = []

        def walk(cmp, prefix=""):
            mismatch.extend(prefix + f for f in cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files)  # noqa: B023
            for sub, sub_cmp in cmp.subdirs.items():
                walk(sub_cmp, prefix + sub + "/")

        walk(filecmp.dircmp(dest, committed, ignore=[]))
        assert not mismatch, f"{name}: regenerate with tests/fixtures/make_hosts.py ({mismatch[:5]})"


def test_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        detect_topology(str(tmp_path / "nope"))


def test_empty_root_falls_back_without_crashing(tmp_path):
    t = detect_topology(str(tmp_path))
    assert t.logical_cpus >= 1 and t.cpu_budget >= 1
    assert t.warnings  # says what it could not read
