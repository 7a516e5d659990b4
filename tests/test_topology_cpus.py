"""CPU/core/NUMA readers: grouping rules and the fallbacks for missing or garbled files."""

from __future__ import annotations

import dataclasses
import os

from tf_autopar.topology import detect_topology
from tf_autopar.topology.cpus import CpuPlace, group_cores, guess_places


def test_core_id_repeated_across_dies_is_told_apart_by_siblings():
    # Cascade Lake-AP style: two dies in one package both number their cores from 0.
    places = {
        0: CpuPlace(0, 0, (0, 2)),
        2: CpuPlace(0, 0, (0, 2)),
        1: CpuPlace(0, 0, (1, 3)),
        3: CpuPlace(0, 0, (1, 3)),
    }
    cores = group_cores([0, 1, 2, 3], places, {0: 0, 1: 1, 2: 0, 3: 1})
    assert [(c.cpus, c.numa_node) for c in cores] == [((0, 2), 0), ((1, 3), 1)]


def test_cpus_without_place_become_single_cores():
    cores = group_cores([0, 1], {0: CpuPlace(0, 5, (0,))}, {})
    assert [(c.core_id, c.cpus) for c in cores] == [(5, (0,)), (1, (1,))]


def test_psutil_guess_pairs_i_and_i_plus_cores():
    assert guess_places([0, 4, 1], 8, 4) == {0: CpuPlace(0, 0), 4: CpuPlace(0, 0), 1: CpuPlace(0, 1)}
    assert guess_places([0, 1], 8, 8) == {}  # no SMT: nothing to guess
    assert guess_places([0, 1], 8, None) == {}


def test_no_topology_anywhere_counts_each_cpu_as_a_core(host_variant, make_hosts):
    host = make_hosts.HOSTS["garbled"]
    root = host_variant("garbled", cpu=dataclasses.replace(host.cpu, with_topology_lines=False))
    t = detect_topology(root)
    assert t.physical_cores == 8 and t.threads_per_core == 1
    assert any("counting each logical CPU as a physical core" in w for w in t.warnings)


def test_garbled_core_id_is_named(host_variant):
    root = host_variant("skylake-2s-24c-48t", files={"/sys/devices/system/cpu/cpu3/topology/core_id": "three\n"})
    t = detect_topology(root)
    assert any("cpu3/topology" in w and "not a number" in w for w in t.warnings), t.warnings
    # cpu3's sibling cpu27 names the core (its thread_siblings_list includes 3): still 24 cores
    assert t.logical_cpus == 48 and t.physical_cores == 24
    assert any(core.cpus == (3, 27) for core in t.cores)


def test_offline_cpus_are_dropped_from_the_mask(host_variant):
    root = host_variant("arm-graviton-64c", files={"/sys/devices/system/cpu/online": "0-31\n"})
    t = detect_topology(root)
    assert t.host_cpus == 32 and t.affinity == tuple(range(32)) and t.cpu_budget == 32


def test_garbled_affinity_line_falls_back_to_online(host_variant):
    root = host_variant("arm-graviton-64c", files={"/proc/self/status": "Name:\tx\nCpus_allowed_list:\t0-zz\n"})
    t = detect_topology(root)
    assert t.affinity == tuple(range(64))
    assert any("Cpus_allowed_list" in w for w in t.warnings)
    assert any("assuming all online CPUs" in w for w in t.warnings)


def test_disjoint_mask_and_cpuset_warns_and_keeps_the_mask(host_variant):
    root = host_variant("container-cpuset", files={"/sys/fs/cgroup/cpuset.cpus.effective": "10-11\n"})
    t = detect_topology(root)
    assert t.affinity == (4, 5, 36, 37)
    assert any("no CPU in common" in w for w in t.warnings)


def test_cpu_outside_every_numa_node_is_counted_in_the_first(host_variant):
    root = host_variant("skylake-2s-24c-48t", files={"/sys/devices/system/node/node1/cpulist": "12-23\n"})
    t = detect_topology(root)
    assert sorted(c for n in t.numa_nodes for c in n.cpus) == list(range(48))
    assert any("36-47 are in no NUMA node" in w for w in t.warnings)


def test_pid_reads_that_process_directory(host_variant):
    root = host_variant("container-cpuset")
    os.rename(os.path.join(root, "proc", "self"), os.path.join(root, "proc", "4242"))
    assert detect_topology(root, pid=4242).affinity == (4, 5, 36, 37)


def test_recording_this_machine_reproduces_live_detection(tmp_path, make_hosts):
    dest = make_hosts.record("live", dest=str(tmp_path / "live"))
    live, recorded = detect_topology("/"), detect_topology(dest)
    for name in ("host_cpus", "affinity", "cores", "numa_nodes", "cpu_budget", "cpuset"):
        assert getattr(recorded, name) == getattr(live, name), name
    assert (recorded.quota and recorded.quota.cpus) == (live.quota and live.quota.cpus)
    assert recorded.cpu.vendor == live.cpu.vendor
