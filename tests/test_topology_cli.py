"""`tf-autopar inspect`: human summary and --json, on recorded trees and on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tf_autopar.cli.main import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_json_on_container_fixture(capsys, host_root):
    assert main(["inspect", "--json", "--root", host_root("container-v2-quota-2.5")]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cpu_budget"] == 2 and d["quota"]["cpus"] == 2.5 and d["quota"]["cgroup_version"] == 2
    assert d["physical_cores"] == 64 and d["logical_cpus"] == 128 and d["sockets"] == [0, 1]
    assert d["smt"] is True and d["threads_per_core"] == 2
    assert d["budget_rule"].startswith("budget = max(1, min(")
    assert d["tf_runtime"]["runtime"] == d["threading_runtime"]
    assert d["affinity_list"] == "0-127" and d["cpuset_list"] is None


def test_human_summary_on_cpuset_fixture(capsys, host_root):
    assert main(["inspect", "--root", host_root("container-cpuset")]) == 0
    out = capsys.readouterr().out
    assert "Sockets     1 (socket 0: 2 cores)" in out
    assert "NUMA nodes  1 (node 0: CPUs 4-5,36-37)" in out
    assert "Cores       2 physical, 2 thread(s)/core (SMT 2)" in out
    assert "Logical     4 usable of 64 online on the host" in out
    assert "Cpuset      4-5,36-37" in out
    assert "Budget      4 CPU(s) = max(1, min(4 affinity, no quota))" in out
    assert "Gold 6226R" in out and "avx512_vnni" in out


def test_human_summary_shows_quota_file_and_warnings(capsys, host_root):
    main(["inspect", "--root", host_root("cgroup-v1-host")])
    out = capsys.readouterr().out
    assert "Quota       3 CPUs (300000/100000 us, cgroup v1) from " in out
    assert "cpu,cpuacct/batch.slice/cpu.cfs_quota_us" in out
    assert "floor(3)" in out
    main(["inspect", "--root", host_root("garbled")])
    out = capsys.readouterr().out
    assert "Warnings    " in out and "banana" in out


def test_console_entry_and_bad_root():
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ok = subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", "inspect", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["logical_cpus"] == len(os.sched_getaffinity(0))
    bad = subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", "inspect", "--root", "/no/such/dir"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "/no/such/dir" in bad.stderr and "not a directory" in bad.stderr


def test_inspect_shows_the_core_complexes(capsys, host_root):
    assert main(["inspect", "--root", host_root("epyc-2s-128c-16ccx")]) == 0
    out = capsys.readouterr().out
    assert "Caches      16 L3 domains of 8 cores (socket 0: 8, socket 1: 8)" in out
    assert "L3 1: CPUs 8-15,136-143 (8 cores, NUMA node 0, cache id 1)" in out
    assert "... 8 more (--json lists every domain)" in out
    assert "Core types  one" in out
    main(["inspect", "--json", "--root", host_root("epyc-2s-128c-16ccx")])
    d = json.loads(capsys.readouterr().out)
    assert len(d["cache_domains"]) == 16 and d["cores"][8]["cache_domain"] == 1 and d["hybrid"] is False


def test_inspect_shows_sub_numa_clusters_sharing_a_socket_cache(capsys, host_root):
    main(["inspect", "--root", host_root("xeon-snc2-2s-80c")])
    out = capsys.readouterr().out
    assert "L3 0: CPUs 0-39,80-119 (40 cores, NUMA nodes 0-1, cache id 0)" in out


def test_inspect_says_which_cores_are_which_on_hybrid_hosts(capsys, host_root):
    main(["inspect", "--root", host_root("alderlake-i7-12700")])
    out = capsys.readouterr().out
    assert "Core types  8 performance (CPUs 0-15); 4 efficiency (CPUs 16-19)  [/sys/devices/cpu_core/cpus" in out
    assert "latency plans use the performance cores" in out
    main(["inspect", "--root", host_root("arm-rk3588-biglittle")])
    out = capsys.readouterr().out
    assert "4 performance (CPUs 4-7, capacity 1024); 4 efficiency (CPUs 0-3, capacity 414)" in out
    assert "L3 0: CPUs 0-7 (8 cores, NUMA node 0)" in out  # no kernel cache id on device-tree kernels
    main(["inspect", "--json", "--root", host_root("arm-rk3588-biglittle")])
    d = json.loads(capsys.readouterr().out)
    assert d["hybrid"] is True and [c["kind"] for c in d["cores"]][:1] == ["efficiency"]


def test_inspect_on_a_tree_without_caches_says_so(capsys, host_root):
    main(["inspect", "--root", host_root("skylake-2s-24c-48t")])
    assert "Caches      no last-level cache information" in capsys.readouterr().out
