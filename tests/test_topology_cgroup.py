"""cgroup readers: finding the groups (v1, v2, hybrid, container mounts), the ancestor walk,
the tightest quota, cpusets, garbled files, and the budget rule."""

from __future__ import annotations

import os

import pytest

from tf_autopar.topology import cpu_budget, detect_topology
from tf_autopar.topology._fs import HostFS, Notes
from tf_autopar.topology.cgroup import (
    GroupDir,
    find_groups,
    parse_cpu_max,
    parse_mountinfo,
    parse_proc_cgroup,
    read_cpuset,
    read_quota,
    tightest,
)
from tf_autopar.topology.model import CpuQuota


# ---------------------------------------------------------------- parsing


def test_parse_mountinfo_keeps_cgroup_mounts_and_unescapes():
    text = (
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 /kube\\040pod /sys/fs/my\\040cgroup rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
        "garbage line\n"
    )
    mounts = parse_mountinfo(text)
    assert [(m.root, m.mountpoint, m.fstype) for m in mounts] == [
        ("/", "/sys/fs/cgroup/cpu,cpuacct", "cgroup"),
        ("/kube pod", "/sys/fs/my cgroup", "cgroup2"),
    ]
    assert {"cpu", "cpuacct"} <= mounts[0].options  # optional fields ("shared:9") are skipped


def test_parse_proc_cgroup_v1_v2_hybrid():
    text = "12:cpuset:/\n4:cpu,cpuacct:/a/b\n1:name=systemd:/a/b\n0::/a/b\nnonsense\n"
    ms = parse_proc_cgroup(text)
    assert [(m.hierarchy, m.controllers, m.path) for m in ms] == [
        (12, ("cpuset",), "/"),
        (4, ("cpu", "cpuacct"), "/a/b"),
        (1, ("name=systemd",), "/a/b"),
        (0, (), "/a/b"),
    ]


def test_find_groups_hybrid_separate_and_comounted_controllers():
    mounts = parse_mountinfo(
        "1 0 0:1 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
        "2 0 0:2 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
        "3 0 0:3 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
        "4 0 0:4 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    )
    ms = parse_proc_cgroup("3:cpuset:/\n2:cpuacct:/x\n1:cpu:/x/y\n0::/x/y\n")
    groups = find_groups(ms, mounts, "cpu")
    assert groups == [
        GroupDir(1, "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu/x/y"),
        GroupDir(2, "/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified/x/y"),
    ]
    assert groups[0].chain() == ["/sys/fs/cgroup/cpu/x/y", "/sys/fs/cgroup/cpu/x", "/sys/fs/cgroup/cpu"]
    assert find_groups(ms, mounts, "cpuset")[0] == GroupDir(1, "/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/cpuset")


def test_mount_root_that_is_the_group_itself_and_namespace_fallback():
    mounts = parse_mountinfo("1 0 0:1 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    same = find_groups(parse_proc_cgroup("0::/docker/abc\n"), mounts, "cpu")
    assert same == [GroupDir(2, "/sys/fs/cgroup", "/sys/fs/cgroup")] and same[0].chain() == ["/sys/fs/cgroup"]
    # a cgroup-namespace path the mount root does not show ("/../x"): read the mount's top
    other = find_groups(parse_proc_cgroup("0::/../x\n"), mounts, "cpu")
    assert other == [GroupDir(2, "/sys/fs/cgroup", "/sys/fs/cgroup")]


def test_longest_mount_root_wins():
    mounts = parse_mountinfo(
        "1 0 0:1 / /host/cgroup rw - cgroup2 cgroup2 rw\n2 0 0:1 /pod /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    )
    assert find_groups(parse_proc_cgroup("0::/pod/c1\n"), mounts, "cpu")[0].leaf == "/sys/fs/cgroup/c1"


@pytest.mark.parametrize(
    "text, expected",
    [("max 100000", (None, 100000)), ("250000 100000\n", (250000, 100000)), ("50000", (50000, 100000))],
)
def test_parse_cpu_max(text, expected):
    assert parse_cpu_max(text) == expected


@pytest.mark.parametrize("text", ["banana 100000", "100000 0", "", "1 2 3", "-5 100000", "max x"])
def test_parse_cpu_max_rejects(text):
    with pytest.raises(ValueError):
        parse_cpu_max(text)


# ---------------------------------------------------------------- budget rule


def q(quota, period=100000):
    return CpuQuota(cpus=quota / period, quota_us=quota, period_us=period, cgroup_version=2, path="x")


@pytest.mark.parametrize(
    "affinity, quota, budget",
    [
        (128, q(250000), 2),  # 2.5 rounds down
        (8, q(299999), 2),  # 2.99999 still 2
        (8, q(300000), 3),
        (8, q(50000), 1),  # below one CPU: minimum 1
        (2, q(400000), 2),  # affinity is tighter
        (8, None, 8),
        (0, None, 1),
        (64, q(150000, 50000), 3),  # other period
    ],
)
def test_cpu_budget_rounds_down_min_one(affinity, quota, budget):
    assert cpu_budget(affinity, quota) == budget


def test_tightest_compares_ratios_not_quotas():
    loose = q(200000, 50000)  # 4 CPUs with a bigger quota number below
    tight = q(250000, 100000)  # 2.5 CPUs
    assert tightest([loose, tight]) is tight
    assert tightest([]) is None


# ---------------------------------------------------------------- ancestor walk on trees


def test_v2_tighter_ancestor_wins(host_variant):
    root = host_variant("container-v2-quota-2.5", files={"/sys/fs/cgroup/cpu.max": "150000 100000\n"})
    t = detect_topology(root)
    assert t.quota.cpus == 1.5 and t.cpu_budget == 1
    assert t.quota.path == os.path.join(root, "sys/fs/cgroup/cpu.max")


def test_v2_looser_ancestor_loses(host_variant):
    root = host_variant("container-v2-quota-2.5", files={"/sys/fs/cgroup/cpu.max": "max 100000\n"})
    assert detect_topology(root).quota.cpus == 2.5


def test_v2_container_mount_root_is_own_group(host_variant, make_hosts):
    leaf = make_hosts.K8S_CONTAINER
    root = host_variant(
        "container-v2-quota-2.5",
        mounts=(f"{leaf} /sys/fs/cgroup cgroup2 rw,nsdelegate",),
        files={"/sys/fs/cgroup/cpu.max": "350000 100000\n"},
        merge_files=False,
    )
    t = detect_topology(root)
    assert t.quota.cpus == 3.5 and t.cpu_budget == 3


def test_v1_leaf_tighter_than_ancestor(host_variant):
    leaf = "/sys/fs/cgroup/cpu,cpuacct/batch.slice/job42.service"
    root = host_variant(
        "cgroup-v1-host", files={f"{leaf}/cpu.cfs_quota_us": "50000\n", f"{leaf}/cpu.cfs_period_us": "20000\n"}
    )
    t = detect_topology(root)
    assert (t.quota.cpus, t.quota.cgroup_version, t.cpu_budget) == (2.5, 1, 2)
    assert t.quota.path.endswith("job42.service/cpu.cfs_quota_us")


def test_v1_unlimited_everywhere(host_variant):
    root = host_variant("cgroup-v1-host", files={"/sys/fs/cgroup/cpu,cpuacct/batch.slice/cpu.cfs_quota_us": "-1\n"})
    t = detect_topology(root)
    assert t.quota is None and t.cpu_budget == 16


@pytest.mark.parametrize(
    "v1_quota, v2_max, cpus, version", [("400000", "150000 100000", 1.5, 2), ("100000", "300000 100000", 1.0, 1)]
)
def test_hybrid_v1_and_v2_tightest_wins(v1_quota, v2_max, cpus, version, host_variant, make_hosts):
    root = host_variant(
        "cgroup-v1-host",
        proc_cgroup=make_hosts.HOSTS["cgroup-v1-host"].proc_cgroup + "0::/batch.slice/job42.service\n",
        mounts=make_hosts.HOSTS["cgroup-v1-host"].mounts + ("/ /sys/fs/cgroup/unified cgroup2 rw",),
        files={
            "/sys/fs/cgroup/cpu,cpuacct/batch.slice/cpu.cfs_quota_us": v1_quota + "\n",
            "/sys/fs/cgroup/unified/batch.slice/cpu.max": v2_max + "\n",
        },
    )
    t = detect_topology(root)
    assert (t.quota.cpus, t.quota.cgroup_version) == (cpus, version)


@pytest.mark.parametrize(
    "quota, period, fragment",
    [("abc", "100000", "'abc' is not a number"), ("200000", "0", "period"), ("0", "100000", "quota 0")],
)
def test_v1_garbled_quota_warns_and_is_ignored(quota, period, fragment, host_variant):
    d = "/sys/fs/cgroup/cpu,cpuacct/batch.slice"
    root = host_variant(
        "cgroup-v1-host", files={f"{d}/cpu.cfs_quota_us": quota + "\n", f"{d}/cpu.cfs_period_us": period + "\n"}
    )
    t = detect_topology(root)
    assert t.quota is None and t.cpu_budget == 16
    assert any(fragment in w and "batch.slice" in w for w in t.warnings), t.warnings


def test_v1_cpuset_intersects_ancestors(host_variant):
    root = host_variant(
        "cgroup-v1-host",
        proc_cgroup="11:cpuset:/pinned/job\n4:cpu,cpuacct:/\n",
        files={
            "/sys/fs/cgroup/cpuset/pinned/cpuset.cpus": "0-7\n",
            "/sys/fs/cgroup/cpuset/pinned/job/cpuset.cpus": "2-9\n",
        },
    )
    t = detect_topology(root)
    assert t.cpuset == tuple(range(2, 8)) and t.affinity == tuple(range(2, 8))
    assert t.physical_cores == 6 and t.threads_per_core == 1  # siblings 10-15 are outside the cpuset


def test_v2_cpuset_nearest_effective(host_variant):
    root = host_variant(
        "container-v2-quota-2.5",
        files={"/sys/fs/cgroup/cri-containerd-3f4e5d6c.scope/cpuset.cpus.effective": "0-3,64-67\n"},
    )
    t = detect_topology(root)
    assert t.cpuset == (0, 1, 2, 3, 64, 65, 66, 67)
    assert t.physical_cores == 4 and t.cpu_budget == 2


def test_garbled_cpuset_is_ignored_with_warning(host_variant):
    root = host_variant("container-cpuset", files={"/sys/fs/cgroup/cpuset.cpus.effective": "4-x\n"})
    t = detect_topology(root)
    assert t.cpuset is None and t.affinity == (4, 5, 36, 37)  # the affinity mask still limits
    assert any("cpuset.cpus.effective" in w for w in t.warnings)


def test_no_proc_cgroup_means_no_limits(host_variant):
    root = host_variant("skylake-2s-24c-48t", drop=("/proc/self/cgroup",))
    t = detect_topology(root)
    assert t.quota is None and t.cpuset is None and t.cpu_budget == 48


def test_read_quota_directly_on_groups(host_variant):
    root = host_variant("container-v2-quota-2.5")
    fs = HostFS(root)
    notes = Notes()
    quota = read_quota(fs, notes, [GroupDir(2, "/sys/fs/cgroup", "/sys/fs/cgroup")])  # the pod only
    assert quota.cpus == 4.0 and notes.warnings == []
    assert read_cpuset(fs, notes, []) is None
