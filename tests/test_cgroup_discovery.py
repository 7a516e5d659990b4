"""One cgroup discovery: the topology reader (the quota planning sees) and validate --cpu-quota
(where it creates quota groups) find the cpu controller at the same place, on recorded trees."""

from __future__ import annotations

import os

import pytest

from tf_autopar.topology import detect_topology
from tf_autopar.topology._fs import HostFS, Notes
from tf_autopar.topology.cgroup import Hierarchy, cpu_hierarchies, process_groups
from tf_autopar.measure.cgroup import CgroupUnavailable, CpuController, find_cpu_controller

V1_MOUNTS = (
    "/ /sys/fs/cgroup/systemd cgroup rw,xattr,name=systemd",
    "/ /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct",
    "/ /sys/fs/cgroup/cpuset cgroup rw,cpuset",
)
V1_CGROUP = "11:cpuset:/\n4:cpu,cpuacct:/batch.slice\n1:name=systemd:/batch.slice\n"


def answers(root: str) -> tuple[CpuController, set[tuple[int, str]]]:
    """(validation's controller, the (version, mount) of each cpu group the topology reader reads)."""
    fs = HostFS(root)
    groups = process_groups(fs, Notes(), "cpu")
    return find_cpu_controller(fs=fs), {(g.version, os.path.realpath(fs.path(g.mountpoint))) for g in groups}


def at(root: str, mountpoint: str) -> str:
    return os.path.realpath(os.path.join(root, mountpoint.lstrip("/")))


def test_v1_recorded_host(host_root):
    root = host_root("cgroup-v1-host")
    controller, topo = answers(root)
    assert controller == CpuController(1, at(root, "/sys/fs/cgroup/cpu,cpuacct"))
    assert topo == {(1, controller.path)}
    assert detect_topology(root).quota.path.startswith(controller.path + os.sep)


def test_v2_container(host_variant):
    root = host_variant(
        "container-v2-quota-2.5", files={"/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n"}
    )
    controller, topo = answers(root)
    assert controller == CpuController(2, at(root, "/sys/fs/cgroup"))
    assert topo == {(2, controller.path)}
    assert detect_topology(root).quota.path.startswith(controller.path + os.sep)


def test_hybrid_recorded_from_this_machine(host_root):
    """v1 cpu plus v2 at /sys/fs/cgroup/unified without the cpu controller: the quota is v1's."""
    root = host_root("this-host-2c")
    controller, topo = answers(root)
    assert controller == CpuController(1, at(root, "/sys/fs/cgroup/cpu"))
    assert topo == {(1, controller.path), (2, at(root, "/sys/fs/cgroup/unified"))}


@pytest.mark.parametrize("unified", ["", "hugetlb\n"])
def test_hybrid_unified_without_cpu(unified, host_variant):
    root = host_variant(
        "cgroup-v1-host",
        proc_cgroup=V1_CGROUP + "0::/batch.slice\n",
        mounts=V1_MOUNTS + ("/ /sys/fs/cgroup/unified cgroup2 rw",),
        files={"/sys/fs/cgroup/unified/cgroup.controllers": unified},
    )
    controller, topo = answers(root)
    assert controller == CpuController(1, at(root, "/sys/fs/cgroup/cpu,cpuacct"))
    assert topo == {(1, controller.path), (2, at(root, "/sys/fs/cgroup/unified"))}
    assert detect_topology(root).quota.cgroup_version == 1  # batch.slice's 3 CPUs


def test_hybrid_with_cpu_on_unified(host_variant):
    """cpu bound to the v2 side of a hybrid host: quota groups and the quota read are both v2."""
    root = host_variant(
        "cgroup-v1-host",
        proc_cgroup="11:cpuset:/\n1:name=systemd:/job\n0::/job\n",
        mounts=(V1_MOUNTS[0], V1_MOUNTS[2], "/ /sys/fs/cgroup/unified cgroup2 rw"),
        files={
            "/sys/fs/cgroup/unified/cgroup.controllers": "cpu pids\n",
            "/sys/fs/cgroup/unified/job/cpu.max": "150000 100000\n",
        },
        merge_files=False,
    )
    controller, topo = answers(root)
    assert controller == CpuController(2, at(root, "/sys/fs/cgroup/unified"))
    assert topo == {(2, controller.path)}
    quota = detect_topology(root).quota
    assert (quota.cpus, quota.cgroup_version) == (1.5, 2) and quota.path.startswith(controller.path + os.sep)


def test_v1_mounted_elsewhere_is_found_by_both(host_variant):
    root = host_variant(
        "cgroup-v1-host",
        mounts=("/ /cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct",),
        proc_cgroup="4:cpu,cpuacct:/\n",
        files={"/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000\n", "/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
        merge_files=False,
    )
    controller, topo = answers(root)
    assert controller == CpuController(1, at(root, "/cgroup/cpu,cpuacct"))
    assert topo == {(1, controller.path)}
    assert detect_topology(root).quota.cpus == 2.0


def test_bind_mount_elsewhere_comes_after_the_usual_place(host_variant):
    root = host_variant("cgroup-v1-host", mounts=("/ /mnt/cpu cgroup rw,cpu,cpuacct",) + V1_MOUNTS)
    assert [h.mountpoint for h in cpu_hierarchies(HostFS(root))] == ["/sys/fs/cgroup/cpu,cpuacct", "/mnt/cpu"]


def test_no_mountinfo_falls_back_to_the_usual_places(host_variant):
    root = host_variant("cgroup-v1-host", drop=("/proc/self/mountinfo",))
    assert cpu_hierarchies(HostFS(root)) == [Hierarchy(1, "/sys/fs/cgroup/cpu,cpuacct", frozenset({"cpu", "cpuacct"}))]
    assert find_cpu_controller(fs=HostFS(root)) == CpuController(1, at(root, "/sys/fs/cgroup/cpu,cpuacct"))


def test_v2_without_cpu_and_no_v1_is_a_clear_error(host_variant):
    root = host_variant("container-v2-quota-2.5", files={"/sys/fs/cgroup/cgroup.controllers": "memory pids\n"})
    with pytest.raises(CgroupUnavailable, match=r"has no cpu controller; no cgroup v1 cpu controller .* mounted"):
        find_cpu_controller(fs=HostFS(root))
