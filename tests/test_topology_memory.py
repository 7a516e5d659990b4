"""Memory readers on recorded trees: v1 and v2 limits, the ancestor walk, "unlimited", soft limits,
pressure, garbled files, the cheap re-read, and what inspect and the plan's explanation show."""

from __future__ import annotations

import os

import pytest

from tf_autopar.topology import MemoryReader, detect_topology, read_memory
from tf_autopar.topology._fs import HostFS, Notes
from tf_autopar.topology.memory import parse_bytes, parse_meminfo_total, parse_psi_some_avg10

GIB = 1 << 30
MIB = 1 << 20
V1 = "/sys/fs/cgroup/memory/batch.slice"
V2_CONTAINER = "/sys/fs/cgroup/cri-containerd-3f4e5d6c.scope"


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize("text, value", [("max\n", None), ("1610612736\n", 1610612736), (" 0 ", 0)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "banana", "-1", "1.5G", "12 34"])
def test_parse_bytes_rejects(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_parse_psi():
    text = "some avg10=3.50 avg60=1.00 avg300=0.20 total=99\nfull avg10=1.00 avg60=0 avg300=0 total=9\n"
    assert parse_psi_some_avg10(text) == 3.5
    for bad in ("full avg10=1.0\n", "some avg10=x\n", "some avg60=1\n", "some avg10=250\n"):
        with pytest.raises(ValueError):
            parse_psi_some_avg10(bad)


def test_parse_meminfo_total():
    assert parse_meminfo_total("MemTotal:       24 kB\nMemFree: 1 kB\n") == 24 * 1024
    assert parse_meminfo_total("MemFree: 1 kB\n") is None
    assert parse_meminfo_total("MemTotal: lots\n") is None


# ---------------------------------------------------------------- recorded trees


def test_v1_ancestor_limit_binds_and_unlimited_is_none(host_root):
    root = host_root("cgroup-v1-host")
    m = detect_topology(root).memory
    assert (m.limit_bytes, m.usage_bytes, m.cgroup_version, m.level) == (1536 * MIB, 512 * MIB, 1, 1)
    assert m.path == os.path.join(root, "sys/fs/cgroup/memory/batch.slice/memory.limit_in_bytes")
    assert m.peak_bytes == GIB and m.left_bytes == GIB
    assert m.high_bytes is None  # every soft limit is the "unlimited" number
    assert m.psi_some_avg10 is None  # no v2 group
    assert m.host_bytes == 64 * GIB


def test_v2_nested_limit_at_the_pod_and_container_max(host_root):
    root = host_root("container-v2-quota-2.5")
    m = detect_topology(root).memory
    # the container says "max"; the pod's memory.max (the mount's top, one level up) binds
    assert (m.limit_bytes, m.usage_bytes, m.cgroup_version, m.level) == (4 * GIB, GIB, 2, 1)
    assert m.path == os.path.join(root, "sys/fs/cgroup/memory.max")
    assert m.peak_bytes == 1536 * MIB
    assert m.high_bytes == 3 * GIB and m.high_path.endswith("cri-containerd-3f4e5d6c.scope/memory.high")
    assert m.psi_some_avg10 == 1.25


def test_hosts_without_memory_files_have_none(host_root):
    assert detect_topology(host_root("skylake-2s-24c-48t")).memory is None


def test_v2_all_max_is_no_limit_with_own_usage(host_variant):
    root = host_variant(
        "container-v2-quota-2.5", files={"/sys/fs/cgroup/memory.max": "max\n", "/sys/fs/cgroup/memory.high": "max\n"}
    )
    m = detect_topology(root).memory
    assert m.limit_bytes is None and m.left_bytes is None
    assert m.usage_bytes == 768 * MIB and m.level == 0  # the process's own group
    assert m.path.endswith("cri-containerd-3f4e5d6c.scope/memory.current")
    assert m.high_bytes == 3 * GIB


def test_tightest_limit_wins_when_alone(host_variant):
    root = host_variant("container-v2-quota-2.5", files={f"{V2_CONTAINER}/memory.max": str(2 * GIB) + "\n"})
    m = detect_topology(root).memory
    assert (m.limit_bytes, m.level, m.usage_bytes) == (2 * GIB, 0, 768 * MIB)


def test_looser_ancestor_binds_when_siblings_use_its_room(host_variant):
    # container 3 GiB (0.75 GiB used, 2.25 left); pod 4 GiB but 3.5 GiB used by the pod's containers
    root = host_variant(
        "container-v2-quota-2.5",
        files={f"{V2_CONTAINER}/memory.max": str(3 * GIB) + "\n", "/sys/fs/cgroup/memory.current": "3758096384\n"},
    )
    m = detect_topology(root).memory
    assert (m.limit_bytes, m.level, m.left_bytes) == (4 * GIB, 1, 512 * MIB)


def test_limit_at_or_above_host_ram_is_no_limit(host_variant, make_hosts):
    root = host_variant(
        "cgroup-v1-host",
        files={f"{V1}/memory.limit_in_bytes": str(64 * GIB) + "\n", "/proc/meminfo": make_hosts.MEMINFO_64G},
    )
    m = detect_topology(root).memory
    assert m.limit_bytes is None and m.usage_bytes == 496 * MIB and m.level == 0


def test_without_meminfo_only_the_huge_number_is_unlimited(host_variant):
    root = host_variant("cgroup-v1-host", drop=("/proc/meminfo",))
    m = read_memory(HostFS(root), Notes())
    assert m.limit_bytes == 1536 * MIB and m.host_bytes is None


def test_v1_container_seeing_only_its_group_takes_the_hierarchical_limit(host_variant, make_hosts):
    base = make_hosts.HOSTS["cgroup-v1-host"]
    leaf = "/sys/fs/cgroup/memory"
    root = host_variant(
        "cgroup-v1-host",
        mounts=tuple(m for m in base.mounts if "memory" not in m)
        + ("/batch.slice/job42.service /sys/fs/cgroup/memory cgroup rw,memory",),
        files={
            f"{leaf}/memory.limit_in_bytes": make_hosts.V1_UNLIMITED,
            f"{leaf}/memory.usage_in_bytes": str(300 * MIB) + "\n",
            f"{leaf}/memory.stat": (
                f"cache 1\nrss 2\nhierarchical_memory_limit {GIB}\n"
                f"hierarchical_memsw_limit 9223372036854771712\ntotal_inactive_file {100 * MIB}\n"
            ),
        },
        merge_files=True,
    )
    m = detect_topology(root).memory
    assert (m.limit_bytes, m.usage_bytes, m.level) == (GIB, 300 * MIB, 1)  # above the mount's top
    assert m.path == os.path.join(root, "sys/fs/cgroup/memory/memory.stat")
    assert m.reclaimable_bytes == 100 * MIB and m.working_set_bytes == 200 * MIB


def test_hierarchical_limit_looser_than_a_visible_one_is_not_used(host_variant):
    root = host_variant(
        "cgroup-v1-host",
        files={f"{V1}/job42.service/memory.stat": f"hierarchical_memory_limit {2 * GIB}\ntotal_inactive_file 0\n"},
    )
    m = detect_topology(root).memory
    assert m.limit_bytes == 1536 * MIB and m.path.endswith("batch.slice/memory.limit_in_bytes")


def test_v2_reclaimable_page_cache_of_the_binding_group(host_variant):
    root = host_variant(
        "container-v2-quota-2.5", files={"/sys/fs/cgroup/memory.stat": f"anon 1\ninactive_file {256 * MIB}\n"}
    )
    m = detect_topology(root).memory
    assert m.reclaimable_bytes == 256 * MIB and m.working_set_bytes == 768 * MIB
    assert m.left_bytes == 3 * GIB  # the room is judged on the usage the kernel counts


def test_v1_soft_limit_and_hybrid_pressure(host_variant, make_hosts):
    base = make_hosts.HOSTS["cgroup-v1-host"]
    root = host_variant(
        "cgroup-v1-host",
        proc_cgroup=base.proc_cgroup + "0::/batch.slice/job42.service\n",
        mounts=base.mounts + ("/ /sys/fs/cgroup/unified cgroup2 rw",),
        files={
            f"{V1}/job42.service/memory.soft_limit_in_bytes": str(GIB) + "\n",
            # a hybrid host's unified hierarchy without the memory controller: pressure, no memory.max
            "/sys/fs/cgroup/unified/batch.slice/job42.service/memory.pressure": "some avg10=7.00 avg60=0 avg300=0 total=1\n",
        },
    )
    m = detect_topology(root).memory
    assert m.high_bytes == GIB and m.high_path.endswith("job42.service/memory.soft_limit_in_bytes")
    assert m.psi_some_avg10 == 7.0
    assert (m.limit_bytes, m.cgroup_version) == (1536 * MIB, 1)


@pytest.mark.parametrize(
    "name, text, fragment",
    [
        ("memory.limit_in_bytes", "lots\n", "treating this group as unlimited"),
        ("memory.usage_in_bytes", "-3\n", "its usage is unknown"),
    ],
)
def test_v1_garbled_files_warn_naming_the_file(name, text, fragment, host_variant):
    root = host_variant("cgroup-v1-host", files={f"{V1}/{name}": text})
    t = detect_topology(root)
    hits = [w for w in t.warnings if f"batch.slice/{name}" in w]
    assert hits and fragment in hits[0] and repr(text.strip()) in hits[0], t.warnings
    if name == "memory.limit_in_bytes":
        assert t.memory.limit_bytes is None
    else:  # a limit with an unknown usage still binds (its room is counted as the whole limit)
        assert t.memory.limit_bytes == 1536 * MIB and t.memory.usage_bytes is None and t.memory.left_bytes is None


def test_v2_garbled_max_and_pressure_warn(host_variant):
    root = host_variant(
        "container-v2-quota-2.5",
        files={"/sys/fs/cgroup/memory.max": "4G\n", f"{V2_CONTAINER}/memory.pressure": "nonsense\n"},
    )
    t = detect_topology(root)
    text = "\n".join(t.warnings)
    assert "sys/fs/cgroup/memory.max: '4G'" in text and "memory.pressure" in text
    assert t.memory.limit_bytes is None and t.memory.psi_some_avg10 is None
    assert t.cpu_budget == 2  # the CPU side is untouched


def test_reader_finds_groups_once_and_follows_a_resize(host_variant, tmp_path):
    root = host_variant("container-v2-quota-2.5")
    reader = MemoryReader(HostFS(root))
    assert reader.read().limit_bytes == 4 * GIB
    os.remove(os.path.join(root, "proc/self/cgroup"))  # found once: no longer needed
    with open(os.path.join(root, "sys/fs/cgroup/memory.max"), "w") as fh:
        fh.write(str(6 * GIB) + "\n")  # the pod resized in place
    assert reader.read().limit_bytes == 6 * GIB


def test_inspect_shows_the_limit(host_root):
    from tf_autopar.cli.inspect_cmd import format_report, report

    root = host_root("cgroup-v1-host")
    text = format_report(report(root))
    assert "Memory      limit 1.5 GB (cgroup v1, its parent group) from " in text
    assert "batch.slice/memory.limit_in_bytes" in text
    assert "512 MB used, peak 1.0 GB, 1.0 GB left under it; host RAM 64.0 GB" in text
    assert "reclaimable" not in text  # no memory.stat in the tree
    v2 = format_report(report(host_root("container-v2-quota-2.5")))
    assert "soft limit 3.0 GB" in v2 and "1.25% of the last 10 s" in v2
    assert "no memory cgroup visible" in format_report(report(host_root("skylake-2s-24c-48t")))
    assert report(root)["memory"]["limit_bytes"] == 1536 * MIB  # --json carries the record


def test_plan_explanation_names_the_limit(host_root):
    from tf_autopar.planning.planner import select_budget

    _, facts = select_budget(detect_topology(host_root("cgroup-v1-host")), False)
    assert any(f.startswith("cgroup v1 memory limit 1.5 GB (") and "batch.slice" in f for f in facts), facts
    _, facts = select_budget(detect_topology(host_root("skylake-2s-24c-48t")), False)
    assert not any("memory limit" in f for f in facts)


def test_live_reading_is_sane():
    m = MemoryReader().read()
    if m is None:
        pytest.skip("no memory cgroup visible on this machine")
    assert m.usage_bytes is None or m.usage_bytes > 0
    assert m.limit_bytes is None or m.host_bytes is None or m.limit_bytes < m.host_bytes


def test_live_host_ram_comes_from_the_kernel_not_a_virtualised_meminfo(host_variant, make_hosts, monkeypatch):
    """LXCFS shows a container its own limit as MemTotal: a limit equal to it must stay a limit."""
    import tf_autopar.topology.memory as memory

    root = host_variant("cgroup-v1-host", files={"/proc/meminfo": make_hosts.meminfo(1536 << 10)})
    fs = HostFS(root)
    assert memory.host_memory_bytes(fs) == 1536 * MIB  # a recorded tree: its meminfo
    assert read_memory(fs, Notes()).limit_bytes is None  # the limit equals "the host's RAM"
    fs.live = True  # as if reading the running system, whose kernel has 64 GiB
    monkeypatch.setattr(memory.os, "sysconf", lambda name: {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 16 << 20}[name])
    host = memory.host_memory_bytes(fs)
    assert host == 64 * GIB
    assert read_memory(HostFS(root), Notes(), host_bytes=host).limit_bytes == 1536 * MIB
