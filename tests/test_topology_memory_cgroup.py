"""The memory reader inside real cgroup-v1 memory groups, and OOM kills detected (tests/cgroup_memory.py).

Needs root and a writable cgroup-v1 memory controller; skips otherwise."""

from __future__ import annotations

import json
import os
import sys

import pytest

import cgroup_memory
from cgroup_memory import MemoryCgroup, MemoryCgroupUnavailable, require

MB = 1 << 20

READ = (
    "import dataclasses, json, sys\n"
    "from tf_autopar.topology import MemoryReader\n"
    "reader = MemoryReader()\n"
    "print(json.dumps(dataclasses.asdict(reader.read())), flush=True)\n"
    "sys.stdin.readline()\n"  # the parent resizes the group in between
    "print(json.dumps(dataclasses.asdict(reader.read())), flush=True)\n"
)

ALLOCATE = (
    "import sys\n"
    "n = int(sys.argv[1]) << 20\n"
    "b = bytearray(n)\n"
    "for i in range(0, n, 4096):\n"
    "    b[i] = 1\n"  # touch every page: charged to the group
    "print('survived', flush=True)\n"
)


@pytest.fixture
def parent():
    return require()


def _env() -> dict[str, str]:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_not_root_is_a_clear_reason_and_a_skip(monkeypatch):
    monkeypatch.setattr(cgroup_memory.os, "geteuid", lambda: 1000)
    with pytest.raises(MemoryCgroupUnavailable, match="not root"):
        cgroup_memory.own_memory_group()
    with pytest.raises(pytest.skip.Exception, match="no writable cgroup-v1 memory controller: not root"):
        require()


@pytest.mark.root
def test_reader_in_a_limited_group_reports_its_limit_usage_and_a_resize(parent):
    import subprocess

    with MemoryCgroup(256 * MB, parent) as group:
        proc = group.popen(
            [sys.executable, "-c", READ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        first = json.loads(proc.stdout.readline())
        group.set_limit(192 * MB)
        proc.stdin.write("\n")
        proc.stdin.flush()
        second = json.loads(proc.stdout.readline())
        proc.communicate(timeout=60)
        assert proc.returncode == 0
        path = group.path
    assert not os.path.exists(path)  # removed on exit
    assert first["limit_bytes"] == 256 * MB and first["level"] == 0 and first["cgroup_version"] == 1
    assert first["path"] == os.path.join(path, "memory.limit_in_bytes")
    assert 1 * MB < first["usage_bytes"] < 256 * MB  # the child interpreter itself
    assert first["peak_bytes"] >= first["usage_bytes"]
    assert second["limit_bytes"] == 192 * MB  # re-read through the same reader


@pytest.mark.root
def test_child_beyond_the_limit_is_detected_as_oom_killed(parent):
    with MemoryCgroup(64 * MB, parent) as group:
        result = group.run([sys.executable, "-c", ALLOCATE, "256"], timeout=120)
    assert result.returncode == -9 and result.exit_status == 137
    assert result.oom_killed and result.oom_kills >= 1  # failcnt: counted by some kernels only
    assert "survived" not in result.stdout
    assert result.peak_bytes <= 64 * MB and result.peak_bytes > 32 * MB


@pytest.mark.root
def test_child_within_the_limit_is_not_oom_killed(parent):
    with MemoryCgroup(256 * MB, parent) as group:
        result = group.run([sys.executable, "-c", ALLOCATE, "64"], timeout=120)
    assert result.returncode == 0 and not result.oom_killed and result.oom_kills == 0
    assert "survived" in result.stdout
    assert 64 * MB < result.peak_bytes < 256 * MB
    assert result.to_dict()["peak_of_limit"] < 1
