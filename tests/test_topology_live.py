"""detect_topology on this machine: real affinity, real processes, real cgroups.

The cgroup tests (marked root) create a group under the writable cpu controller
(v1 /sys/fs/cgroup/cpu here; v2 where the cpu controller is delegated), start
`python -m tf_autopar.cli.main inspect --json` inside it, always remove the group, and
skip with the reason when no group can be created.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from tf_autopar.topology import detect_topology

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
INSPECT = [sys.executable, "-m", "tf_autopar.cli.main", "inspect", "--json"]


def test_live_matches_the_kernel():
    t = detect_topology()
    assert t.affinity == tuple(sorted(os.sched_getaffinity(0)))
    assert 1 <= t.cpu_budget <= t.logical_cpus
    assert sorted(c for core in t.cores for c in core.cpus) == list(t.affinity)
    if len(t.affinity) == os.cpu_count():
        import psutil

        assert t.physical_cores == psutil.cpu_count(logical=False)
    assert t.threading_runtime in ("eigen", "openmp", "unknown", "absent")


def test_detection_never_imports_tensorflow():
    code = (
        "import sys\n"
        "from tf_autopar.topology import detect_topology\n"
        "detect_topology()\n"
        "from tf_autopar.cli.main import main\n"
        "main(['inspect', '--json'])\n"
        "assert 'tensorflow' not in sys.modules, sorted(m for m in sys.modules if 'tensorflow' in m)\n"
        "print('ok-no-tf')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok-no-tf")


def _on_cpu_0() -> None:
    os.sched_setaffinity(0, {0})  # what `taskset -c 0` does, without needing util-linux


def test_other_process_by_pid():
    child = subprocess.Popen(["sleep", "30"], preexec_fn=_on_cpu_0)
    try:
        t = detect_topology(pid=child.pid)
        assert t.affinity == (0,) and t.cpu_budget == 1
    finally:
        child.kill()
        child.wait()
    with pytest.raises(ValueError, match="no process"):
        detect_topology(pid=child.pid)


def test_cli_under_a_one_cpu_mask():
    out = subprocess.run(INSPECT, env=ENV, capture_output=True, text=True, timeout=120, preexec_fn=_on_cpu_0)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["affinity"] == [0] and d["cpu_budget"] == 1 and d["logical_cpus"] == 1


_PINNED_BY_A_LIBRARY = """
import json, os, threading
from tf_autopar.topology import detect_topology
from tf_autopar.topology.limits import LimitsReader
everything = sorted(os.sched_getaffinity(0))
ready, done = threading.Event(), threading.Event()
def helper():
    ready.set()
    done.wait()
t = threading.Thread(target=helper)
t.start()
ready.wait()
reader = LimitsReader()
out = {"all": everything, "baseline": list(reader.read().affinity)}
os.sched_setaffinity(0, {everything[0]})  # the calling thread bound (KMP_AFFINITY=compact, OpenVINO's pinning)
out["main"] = sorted(os.sched_getaffinity(0))
out["detected"] = list(detect_topology().affinity)
out["read"] = list(reader.read().affinity)
os.sched_setaffinity(t.native_id, {everything[0]})  # now every thread (a cpuset change, taskset -a)
out["all_moved"] = list(reader.read().affinity)
done.set()
t.join()
print(json.dumps(out))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs in the mask")
def test_the_limits_watch_reads_the_threads_union_so_one_bound_thread_is_no_change():
    """One thread bound to a CPU (the OpenMP plan's KMP_AFFINITY binds the main thread at its first
    eager op) is no change of the limits; every thread moved is. Detection at start keeps the
    calling thread's mask: there it is the user's choice, which TensorFlow's threads inherit."""
    out = subprocess.run(
        [sys.executable, "-c", _PINNED_BY_A_LIBRARY], env=ENV, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["main"] == d["all"][:1]  # the binding happened
    assert d["read"] == d["baseline"] == d["all"]
    assert d["detected"] == d["main"]
    assert d["all_moved"] == d["all"][:1]


# ---------------------------------------------------------------- real cgroups (root)


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _cpu_controller() -> tuple[int, str]:
    """(version, directory under which groups with a cpu controller can be made) or skip."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a cgroup")
    for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
        if os.path.isfile(os.path.join(base, "cpu.cfs_quota_us")) and os.access(base, os.W_OK):
            return 1, base
    base = "/sys/fs/cgroup"
    try:
        with open(os.path.join(base, "cgroup.subtree_control")) as fh:
            if "cpu" in fh.read().split():
                return 2, base
    except OSError:
        pass
    pytest.skip("no writable cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 with cpu delegated)")


@contextlib.contextmanager
def cpu_group(*names: str, limits: dict[str, float | None]):
    """Nested groups names[0]/names[1]/...; limits: name -> CPUs (None = unlimited). Removed at exit."""
    version, base = _cpu_controller()
    made: list[str] = []
    try:
        path = base
        for i, name in enumerate(names):
            path = os.path.join(path, name)
            try:
                os.mkdir(path)
            except OSError as exc:
                pytest.skip(f"cannot create cgroup {path}: {exc}")
            made.append(path)
            if version == 2 and i < len(names) - 1:
                _write(os.path.join(path, "cgroup.subtree_control"), "+cpu")
            cpus = limits.get(name)
            if version == 1:
                _write(os.path.join(path, "cpu.cfs_period_us"), "100000")
                _write(os.path.join(path, "cpu.cfs_quota_us"), str(int(cpus * 100000)) if cpus else "-1")
            else:
                _write(os.path.join(path, "cpu.max"), f"{int(cpus * 100000)} 100000" if cpus else "max 100000")
        yield version, path
    finally:
        for path in reversed(made):
            for _ in range(50):  # the child may take a moment to leave after exiting
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                raise AssertionError(f"could not remove cgroup {path}")


def _inspect_in(group: str) -> dict:
    procs = os.path.join(group, "cgroup.procs")
    cmd = ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh"] + INSPECT
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.root
def test_one_cpu_quota_gives_budget_one():
    name = f"tf_autopar_test_{os.getpid()}"
    with cpu_group(name, limits={name: 1.0}) as (version, group):
        d = _inspect_in(group)
    assert d["cpu_budget"] == 1
    assert d["quota"]["cpus"] == 1.0 and d["quota"]["cgroup_version"] == version
    assert d["quota"]["path"].startswith(group + "/")
    assert not os.path.exists(group)


@pytest.mark.root
def test_ancestor_quota_is_found_from_an_unlimited_child():
    parent, child = f"tf_autopar_test_{os.getpid()}_parent", "child"
    with cpu_group(parent, child, limits={parent: 1.5, child: None}) as (_version, group):
        d = _inspect_in(group)
    assert d["quota"]["cpus"] == 1.5
    assert os.path.dirname(d["quota"]["path"]).endswith(parent)  # the parent's file, not the child's
    assert d["cpu_budget"] == 1  # 1.5 rounds down
