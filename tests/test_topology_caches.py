"""Cache domains and core types (topology/caches.py) on the recorded hosts and broken variants."""

from __future__ import annotations

import pytest

from tf_autopar.topology import _fs, detect_topology
from tf_autopar.topology.model import EFFICIENCY, PERFORMANCE


def test_epyc_eight_core_complexes_per_socket(host_root):
    t = detect_topology(host_root("epyc-2s-128c-16ccx"), cpu_details=False)
    assert len(t.cache_domains) == 16
    assert {d.level for d in t.cache_domains} == {3}
    assert [d.cache_id for d in t.cache_domains] == list(range(16))
    # CCX k of socket 0 holds cores 8k..8k+7 and their SMT siblings (+128)
    assert t.cache_domains[1].cpus == tuple(range(8, 16)) + tuple(range(136, 144))
    assert t.cache_domains[8].cpus == tuple(range(64, 72)) + tuple(range(192, 200))
    for core in t.cores:
        assert set(core.cpus) <= set(t.cache_domains[core.cache_domain].cpus)
    per_socket = {s: {c.cache_domain for c in t.cores_on_socket(s)} for s in t.sockets}
    assert per_socket == {0: set(range(8)), 1: set(range(8, 16))}
    assert not t.hybrid and t.core_kinds_from == ""


def test_sub_numa_clustering_l3_spans_two_nodes(host_root):
    t = detect_topology(host_root("xeon-snc2-2s-80c"), cpu_details=False)
    assert [len(n.cpus) for n in t.numa_nodes] == [40, 40, 40, 40]
    assert [(d.cache_id, len(d.cpus)) for d in t.cache_domains] == [(0, 80), (1, 80)]
    nodes_of = {d.id: {c.numa_node for c in t.cores if c.cache_domain == d.id} for d in t.cache_domains}
    assert nodes_of == {0: {0, 1}, 1: {2, 3}}


def test_alder_lake_core_types_from_the_pmu_lists(host_root):
    t = detect_topology(host_root("alderlake-i7-12700"), cpu_details=False)
    assert t.hybrid
    perf = [c for c in t.cores if c.kind == PERFORMANCE]
    eff = [c for c in t.cores if c.kind == EFFICIENCY]
    assert [c.cpus for c in perf] == [(i, i + 1) for i in range(0, 16, 2)]
    assert [c.cpus for c in eff] == [(16,), (17,), (18,), (19,)]
    # the flat cpu_capacity map (1024 everywhere) does not override the PMU lists
    assert "cpu_core" in t.core_kinds_from and "cpu_atom" in t.core_kinds_from
    assert [d.cpus for d in t.cache_domains] == [tuple(range(20))]
    assert "avx_vnni" in t.cpu.isa and "avx512f" not in t.cpu.isa


def test_arm_capacity_map(host_root):
    t = detect_topology(host_root("arm-rk3588-biglittle"), cpu_details=False)
    assert t.hybrid and "cpu_capacity" in t.core_kinds_from
    assert [(c.cpus[0], c.kind, c.capacity) for c in t.cores] == (
        [(i, EFFICIENCY, 414) for i in range(4)] + [(i, PERFORMANCE, 1024) for i in range(4, 8)]
    )
    # per-cluster core ids repeat (0-3, 0-1, 0-1): still eight cores
    assert [c.core_id for c in t.cores] == [0, 1, 2, 3, 0, 1, 0, 1]
    # device-tree kernels give no cache id: the domain is known by its CPUs
    assert [(d.cache_id, d.cpus) for d in t.cache_domains] == [(None, tuple(range(8)))]
    assert t.warnings == ()


def test_trees_without_cache_files_have_no_domains_and_no_warning(host_root):
    t = detect_topology(host_root("epyc-4numa-64c"), cpu_details=False)
    assert t.cache_domains == () and all(c.cache_domain is None for c in t.cores)
    assert not t.hybrid and all(c.kind == "" and c.capacity is None for c in t.cores)
    assert t.warnings == ()


def test_one_shared_list_read_per_domain(host_root, monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(_fs, "read_hook", seen.append)
    detect_topology(host_root("epyc-2s-128c-16ccx"), cpu_details=False)
    assert sum(p.endswith("/shared_cpu_list") for p in seen) == 16


def test_a_restricted_mask_limits_the_domains(host_variant):
    # a cpuset straddling CCX 0 and 1 of socket 0: cores 6-9 and their siblings
    root = host_variant("epyc-2s-128c-16ccx", affinity="6-9,134-137")
    t = detect_topology(root, cpu_details=False)
    assert [d.cpus for d in t.cache_domains] == [(6, 7, 134, 135), (8, 9, 136, 137)]
    assert [d.cache_id for d in t.cache_domains] == [0, 1]


@pytest.mark.parametrize(
    "path, content, expect",
    [
        ("/sys/devices/system/cpu/cpu8/cache/index3/shared_cpu_list", "8-15,banana\n", "shared_cpu_list"),
        ("/sys/devices/system/cpu/cpu8/cache/index3/shared_cpu_list", "0-7\n", "does not list CPU 8"),
    ],
)
def test_a_garbled_shared_list_warns_once_and_a_neighbour_places_its_cpu(
    host_variant, path, content, expect, monkeypatch
):
    from tf_autopar import _warn

    monkeypatch.setattr(_warn, "SEEN", set())
    root = host_variant("epyc-2s-128c-16ccx", files={path: content})
    t = detect_topology(root, cpu_details=False)
    assert len(t.warnings) == 1 and expect in t.warnings[0] and "ignored" in t.warnings[0]
    # CPU 9's list names CCX 1 whole, CPU 8 included
    assert len(t.cache_domains) == 16 and 8 in t.cache_domains[1].cpus
    assert len(t.cores) == 128


def test_a_garbled_level_leaves_that_cpu_on_its_l2(host_variant):
    root = host_variant("epyc-2s-128c-16ccx", files={"/sys/devices/system/cpu/cpu8/cache/index3/level": "three\n"})
    t = detect_topology(root, cpu_details=False)
    assert len(t.warnings) == 1 and "cpu8/cache/index3/level" in t.warnings[0]
    assert [d.level for d in t.cache_domains if 8 in d.cpus] == [2]


def test_a_lone_cpu_no_list_names_is_in_no_domain(host_variant):
    files = {f"/sys/devices/system/cpu/cpu{i}/cache/index3/shared_cpu_list": "0-6\n" for i in range(7)}
    files["/sys/devices/system/cpu/cpu7/cache/index3/shared_cpu_list"] = "0-7,banana\n"
    root = host_variant("arm-rk3588-biglittle", files=files)
    t = detect_topology(root, cpu_details=False)
    assert [d.cpus for d in t.cache_domains] == [tuple(range(7))]
    assert len(t.warnings) == 1 and "CPUs 7 are in no cache domain" in t.warnings[0]


def test_partial_cache_information_warns(host_variant):
    # a VM that describes the caches of its first four CPUs only
    files = {f"/sys/devices/system/cpu/cpu{i}/cache/index3/shared_cpu_list": "0-3\n" for i in range(4)}
    root = host_variant(
        "arm-rk3588-biglittle", files=files, drop=tuple(f"/sys/devices/system/cpu/cpu{i}/cache" for i in range(4, 8))
    )
    t = detect_topology(root, cpu_details=False)
    assert [d.cpus for d in t.cache_domains] == [(0, 1, 2, 3)]
    assert len(t.warnings) == 1 and "no last-level cache information for CPUs 4-7" in t.warnings[0]


def test_garbled_capacity_falls_back_to_one_core_type(host_variant):
    root = host_variant("arm-rk3588-biglittle", files={"/sys/devices/system/cpu/cpu4/cpu_capacity": "fast\n"})
    t = detect_topology(root, cpu_details=False)
    assert not t.hybrid and t.core_kinds_from == ""
    assert len(t.warnings) == 1 and "cpu_capacity" in t.warnings[0] and "'fast'" in t.warnings[0]


def test_garbled_pmu_list_falls_back_to_capacity(host_variant):
    root = host_variant("alderlake-i7-12700", files={"/sys/devices/cpu_atom/cpus": "16-x\n"})
    t = detect_topology(root, cpu_details=False)
    assert not t.hybrid  # every capacity is 1024: one type
    assert len(t.warnings) == 1 and "cpu_atom/cpus" in t.warnings[0]


def test_nearly_equal_capacities_are_one_type(host_variant):
    # a favoured core's turbo bin (1024 against 980) is not an efficiency core
    root = host_variant("arm-rk3588-biglittle", capacities=(980,) * 7 + (1024,))
    assert not detect_topology(root, cpu_details=False).hybrid


def test_a_mask_of_one_core_type_is_not_hybrid(host_variant):
    t = detect_topology(host_variant("alderlake-i7-12700", affinity="16-19"), cpu_details=False)
    assert not t.hybrid and t.core_kinds_from == "" and t.warnings == ()
