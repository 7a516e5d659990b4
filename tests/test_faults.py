"""Fault injection: hostile files where tf_autopar keeps its own, garbled host files, and
the faults a user should hear about once. Each test runs the real code path; the ones that
used to hang run in a child process with a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tf_autopar._files import FileTooLarge, NotRegularFile, read_json, read_regular, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 90  # a hang fails the test instead of stalling the suite


def run_py(code: str, env: dict[str, str], *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (no logging configured), tf_autopar importable."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=full, capture_output=True, text=True, timeout=timeout
    )


# ---------------------------------------------------------------- item 2: only regular files, never blocking


def test_read_regular_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match="named pipe"):
        read_regular(str(fifo), 100)  # would block forever with open()


def test_read_regular_bounds_the_size(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1000)
    with pytest.raises(FileTooLarge, match="larger than 999 bytes"):
        read_regular(str(big), 999)
    assert read_regular(str(big), 10, truncate=True) == b"x" * 10
    assert read_regular(str(big), 1000) == b"x" * 1000


def test_deeply_nested_json_is_a_corrupt_file_not_a_recursion_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200000 + "]" * 200000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_json(str(deep), 1 << 20)


def test_atomic_json_write_replaces_a_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "cache.json"
    link.symlink_to(victim)
    write_json_atomic(str(link), {"a": 1})
    assert victim.read_text() == "keep"
    assert not link.is_symlink() and json.loads(link.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left


def test_fifo_at_the_plan_cache_does_not_hang_enable(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.mkfifo(cache / "plans.json")
    proc = run_py(
        """
        import json, tf_autopar
        st = tf_autopar.enable()
        print(json.dumps(list(st.warnings)))
    """,
        {"TF_AUTOPAR_CACHE_DIR": str(cache), "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease")},
    )
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads(proc.stdout.splitlines()[-1])
    assert any("plans.json" in w and "named pipe" in w for w in warnings), warnings
    assert not (cache / "plans.json").exists()  # moved aside: the next write makes a real file
    assert any(p.name.startswith("plans.json.corrupt-") for p in cache.iterdir())


def test_fifo_at_the_topology_caches_does_not_hang_inspect(tmp_path):
    for name in ("cpuinfo.json", "tf_runtime.json"):
        os.mkfifo(tmp_path / name)
    proc = subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", "inspect", "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TF_AUTOPAR_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cpu_budget"] >= 1


def test_fifo_at_a_lease_slot_does_not_hang_the_claim(tmp_path):
    from tf_autopar.coordination.lease import group_key

    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": "fifo-test",
        "TF_AUTOPAR_INSTANCES": "2",
    }
    code = """
        import json, os, sys
        from tf_autopar.coordination import claim_share
        from tf_autopar.topology import detect_topology
        share = claim_share(detect_topology(cpu_details=False))
        print(json.dumps(share.to_dict()))
    """
    topo_cpus = sorted(os.sched_getaffinity(0))
    group = tmp_path / "lease" / group_key(env, cpus=topo_cpus)
    group.mkdir(parents=True)
    os.mkfifo(group / "slot-1.lock")  # a peer slot: counting peers used to block on it
    proc = run_py(code, env)
    assert proc.returncode == 0, proc.stderr
    share = json.loads(proc.stdout.splitlines()[-1])
    assert share["lease_slot"] == 0

    (group / "slot-0.lock").unlink()
    os.mkfifo(group / "slot-0.lock")  # the slot to take: refused with one clear warning
    proc = run_py(code, env)
    assert proc.returncode == 0, proc.stderr
    share = json.loads(proc.stdout.splitlines()[-1])
    assert share["source"] == "even-split"
    assert "slot-0.lock is a named pipe" in share["note"]


# ---------------------------------------------------------------- item 7: parsers do not trust their input


def test_non_ascii_digits_in_proc_cgroup_are_skipped_not_raised():
    from tf_autopar.topology.cgroup import parse_cpu_max, parse_proc_cgroup

    ms = parse_proc_cgroup("\u00b2:cpu:/a\n0::/b\n")  # '²'.isdigit() is True, int('²') raises
    assert [(m.hierarchy, m.path) for m in ms] == [(0, "/b")]
    with pytest.raises(ValueError, match="period"):
        parse_cpu_max("max \u0661\u0660\u0660")  # Arabic-Indic digits: int() would read them


def test_non_ascii_digits_in_cpuinfo_and_quota_files_warn_not_raise(tmp_path):
    from tf_autopar.topology._fs import HostFS, Notes
    from tf_autopar.topology.cgroup import GroupDir, read_quota
    from tf_autopar.topology.cpus import cpuinfo_processors

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor\t: \u00b2\n\nprocessor\t: 1\nphysical id\t: 0\n")
    assert list(cpuinfo_processors(HostFS(str(tmp_path)))) == [1]
    group = tmp_path / "sys" / "fs" / "cgroup" / "cpu"
    group.mkdir(parents=True)
    (group / "cpu.cfs_quota_us").write_text("\u0665\u0660\u0660\u0660\u0660\n")  # '50000' in Arabic-Indic
    (group / "cpu.cfs_period_us").write_text("100000\n")
    notes = Notes()
    assert read_quota(HostFS(str(tmp_path)), notes, [GroupDir(1, "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu")]) is None
    assert any("is not a number" in w for w in notes.warnings), notes.warnings


def test_huge_cpu_lists_are_refused_before_allocating():
    from tf_autopar.topology.cpulist import MAX_CPU_ID, parse_cpulist

    for text in ("0-4294967295", "0-99999999999", "7,100000", "0-8:99999999999999999999"):
        with pytest.raises(ValueError, match=r"bad cpulist .*(beyond the largest CPU id|not a CPU number)"):
            parse_cpulist(text)
    assert parse_cpulist(f"{MAX_CPU_ID}") == (MAX_CPU_ID,)
    with pytest.raises(ValueError, match="not a CPU number"):
        parse_cpulist("0-\u00b2")


def test_run_cores_with_a_huge_list_is_a_clear_cli_error():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tf_autopar.cli.main",
            "run",
            "--cores",
            "0-99999999999",
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode != 0
    assert "0-99999999999" in proc.stderr and "beyond the largest CPU id" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_deeply_nested_plan_cache_is_moved_aside_with_one_warning(tmp_path, monkeypatch):
    from tf_autopar.runtime import cache
    from tf_autopar.runtime.state import STATE

    path = tmp_path / "plans.json"
    path.write_text("[" * 100000 + "]" * 100000)
    STATE.warned_keys.discard(f"cache-corrupt:{path}")
    data = cache.load(str(path))
    assert data["plans"] == {} and not path.exists()
    assert any("nested too deeply" in w for w in STATE.warnings)


def test_tf_config_nested_too_deeply_is_a_value_error():
    from tf_autopar.coordination.ranks import detect_ranks

    r = detect_ranks({"TF_CONFIG": "[" * 100000 + "]" * 100000})
    assert r.rank is None and any("nested too deeply" in w for w in r.warnings), r.warnings


# ---------------------------------------------------------------- item 6: an unreadable quota is said, not dropped


def _unprivileged(fn):
    """fn() in a forked child without root's power to read anything (uid nobody when root)."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            out = ("ok", fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            out = ("error", repr(exc))
        with os.fdopen(w, "wb") as fh:
            pickle.dump(out, fh)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    assert kind == "ok", value
    return value


def _quota_host(kind: str) -> str:
    """A recorded host tree (under /tmp, readable by everyone) whose cgroup quota file is mode 000."""
    import tempfile

    root = tempfile.mkdtemp(prefix="tfap-quota-", dir="/tmp")
    os.chmod(root, 0o755)
    files = {
        "proc/self/cgroup": "0::/job\n" if kind == "v2" else "4:cpu,cpuacct:/job\n",
        "proc/self/mountinfo": (
            "30 20 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
            if kind == "v2"
            else "30 20 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
        ),
        "proc/self/status": "Cpus_allowed_list:\t0-3\n",
        "sys/devices/system/cpu/online": "0-3\n",
    }
    if kind == "v2":
        files["sys/fs/cgroup/job/cpu.max"] = "100000 100000\n"
    else:
        files["sys/fs/cgroup/cpu/job/cpu.cfs_quota_us"] = "100000\n"
        files["sys/fs/cgroup/cpu/job/cpu.cfs_period_us"] = "100000\n"
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)
    for rel in files:
        os.chmod(os.path.join(root, rel), 0o644)
    return root


@pytest.mark.parametrize("kind,quota_file", [("v2", "cpu.max"), ("v1", "cpu.cfs_quota_us")])
def test_an_unreadable_quota_is_a_warning_in_the_topology_and_the_plan(kind, quota_file):
    import shutil

    from tf_autopar.planning import plan
    from tf_autopar.topology import detect_topology

    def detect():
        topo = detect_topology(root, cpu_details=False)
        return topo.cpu_budget, list(topo.warnings), plan(topo).explain()

    root = _quota_host(kind)
    try:
        assert detect()[0] == 1  # imports what the child needs (uid nobody cannot read root's stdlib)
        assert _unprivileged(detect)[0] == 1  # the quota (1 CPU) applies when the file can be read
        qpath = next(os.path.join(d, quota_file) for d, _, names in os.walk(root) if quota_file in names)
        os.chmod(qpath, 0)

        budget, warnings, explain = _unprivileged(detect)
        assert budget == 4
        assert [w for w in warnings if quota_file in w] == [
            f"cannot read {qpath} (Permission denied); this group's CPU quota is unknown and not applied: "
            "the CPU budget may exceed the quota and the process be throttled"
        ]
        assert f"cannot read {qpath}" in explain

        os.chmod(os.path.join(root, "proc/self/cgroup"), 0)
        budget, warnings, explain = _unprivileged(detect)
        assert any(
            "proc/self/cgroup (Permission denied); no cgroup CPU quota or cpuset is known" in w for w in warnings
        ), warnings
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- item 8: warnings reach the user, once

WARN_PROGRAM = """
    import json, os, sys
    if sys.argv[1] == "configured":
        import logging
        logging.basicConfig(format="LOGGED %(name)s %(message)s")
    import tf_autopar
    st = tf_autopar.enable()
    tf_autopar.disable()
    st = tf_autopar.enable()          # a second start meets the same faults: no new lines
    print(json.dumps(list(st.warnings)))
"""


def _faulty_env(tmp_path) -> dict[str, str]:
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    (cache / "plans.json").write_text("{not json")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    return {"TF_AUTOPAR_CACHE_DIR": str(cache), "TF_AUTOPAR_LEASE_DIR": str(blocker / "lease")}


def test_warnings_reach_stderr_once_in_a_program_without_logging(tmp_path):
    proc = run_py(WARN_PROGRAM, _faulty_env(tmp_path), "bare")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    lease = [ln for ln in lines if "lease unusable" in ln]
    cache = [ln for ln in lines if "plan cache" in ln]
    assert len(lease) == 1 and len(cache) == 1, proc.stderr
    assert len(lines) == 2, proc.stderr  # nothing else, nothing twice
    assert all(ln.startswith("tf_autopar") for ln in lines)
    warnings = json.loads(proc.stdout.splitlines()[-1])
    assert any("lease unusable" in w for w in warnings) and any("plan cache" in w for w in warnings), warnings


def test_a_program_that_configured_logging_gets_each_warning_once_through_it(tmp_path):
    proc = run_py(WARN_PROGRAM, _faulty_env(tmp_path), "configured")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and all(ln.startswith("LOGGED tf_autopar.") for ln in lines), proc.stderr


def test_tf_autopar_log_quiet_silences_the_fallback(tmp_path):
    proc = run_py(WARN_PROGRAM, {**_faulty_env(tmp_path), "TF_AUTOPAR_LOG": "quiet"}, "bare")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert len(json.loads(proc.stdout.splitlines()[-1])) == 2  # still in status()


# ---------------------------------------------------------------- item 3: disable() undoes enable()

UNDO_PROGRAM = """
    import json, os
    from tf_autopar.coordination import lease_status
    import tf_autopar

    def snapshot():
        held = [s["slot"] for d in os.listdir(os.environ["TF_AUTOPAR_LEASE_DIR"])
                for s in lease_status(os.path.join(os.environ["TF_AUTOPAR_LEASE_DIR"], d)) if s["held"]]
        return {"mask": sorted(os.sched_getaffinity(0)), "held": held,
                "inter": os.environ.get("TF_NUM_INTEROP_THREADS"), "intra": os.environ.get("TF_NUM_INTRAOP_THREADS")}

    out = {"before": snapshot()}
    st = tf_autopar.enable()
    out["enabled"] = snapshot()
    out["share"] = st.process.share
    tf_autopar.disable()
    out["disabled"] = snapshot()
    st = tf_autopar.enable()
    out["again"] = snapshot()
    out["share_again"] = st.process.share
    print(json.dumps(out))
"""


@pytest.mark.parametrize("count", ["2", None])
def test_disable_gives_back_the_slot_the_affinity_and_the_variables(tmp_path, count):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs to pin a worker to half of them")
    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": "undo-test",
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "TF_NUM_INTRAOP_THREADS": "7",
        "TF_AUTOPAR_LAUNCHER_VARS": "TF_NUM_INTRAOP_THREADS",
    }
    if count:
        env["TF_AUTOPAR_INSTANCES"] = count
    (tmp_path / "lease").mkdir()
    proc = run_py(UNDO_PROGRAM, env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    before = out["before"]
    assert before["held"] == [] and before["inter"] is None and before["intra"] == "7"
    assert out["enabled"]["held"] == [0]
    assert out["enabled"]["inter"] is not None
    assert out["enabled"]["intra"] != "7" or out["share"]["budget"] == 7  # the launcher's value is re-planned
    if count:  # worker 0 of 2: pinned to its half
        assert out["share"]["pin"] and len(out["enabled"]["mask"]) < len(before["mask"])
    assert out["disabled"] == before  # slot free, mask and variables as they were
    assert out["again"]["held"] == [0]  # the same slot again, not a second one
    assert out["share_again"]["lease_slot"] == 0
    if not count:
        assert out["share_again"]["source"] == "single", out["share_again"]  # its old slot is no peer
    assert out["again"]["mask"] == out["enabled"]["mask"]


# ---------------------------------------------------------------- item 9: the tracer library and its logs


def _sh_plan(tmp_path, script: str):
    """A build plan whose 'compiler' is a shell line writing the output ({out} = $0): no TensorFlow."""
    from tf_autopar.tracing.build import BuildPlan

    return BuildPlan(
        source=tmp_path / "src.cc",
        compiler="sh",
        command=("sh", "-c", script, "{out}"),
        tf_version="test",
        key="k",
        cache_dir=tmp_path / "native" / "k",
    )


def test_a_cached_library_others_could_write_is_rebuilt_not_loaded(tmp_path):
    from tf_autopar.tracing.build import build

    plan = _sh_plan(tmp_path, 'printf built > "$0"')
    plan.cache_dir.mkdir(parents=True)
    plan.library.write_text("planted")
    os.chmod(plan.library, 0o666)
    assert build(plan=plan).read_text() == "built"
    assert not os.stat(plan.library).st_mode & 0o022

    victim = tmp_path / "victim.so"
    victim.write_text("someone else's")
    plan.library.unlink()
    plan.library.symlink_to(victim)  # a symlink is replaced, its target untouched
    assert build(plan=plan).read_text() == "built" and not plan.library.is_symlink()
    assert victim.read_text() == "someone else's"


def test_a_library_owned_by_another_user_is_refused_at_load(tmp_path):
    from tf_autopar.tracing.build import NativeBuildError, open_library

    lib = tmp_path / "lib.so"
    lib.write_text("x")
    os.chmod(lib, 0o644)
    os.close(open_library(lib))
    os.chmod(lib, 0o664)
    with pytest.raises(NativeBuildError, match="writable by group or others"):
        open_library(lib)
    link = tmp_path / "link.so"
    link.symlink_to(lib)
    with pytest.raises(NativeBuildError, match="cannot open"):
        open_library(link)
    if os.geteuid() == 0:
        os.chmod(lib, 0o644)
        os.chown(lib, 65534, 65534)
        with pytest.raises(NativeBuildError, match="belongs to uid 65534"):
            open_library(lib)


def test_a_failed_build_log_is_not_written_through_a_symlink(tmp_path):
    from tf_autopar.tracing.build import FAILED_MARKER, NativeBuildError, build

    plan = _sh_plan(tmp_path, "echo broken >&2; exit 3")
    plan.cache_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (plan.cache_dir / FAILED_MARKER).symlink_to(victim)
    with pytest.raises(NativeBuildError):
        build(plan=plan, force=True)
    assert victim.read_text() == "keep"
    log_file = plan.cache_dir / FAILED_MARKER
    assert not log_file.is_symlink() and "broken" in log_file.read_text()


def test_a_cache_directory_others_can_write_is_not_used(tmp_path):
    from tf_autopar.tracing.build import NativeBuildError, build

    plan = _sh_plan(tmp_path, 'printf built > "$0"')
    plan.cache_dir.mkdir(parents=True)
    os.chmod(plan.cache_dir, 0o777)
    with pytest.raises(NativeBuildError, match="writable by group or others"):
        build(plan=plan)


# ---------------------------------------------------------------- item 4: fork after enable()

FORK_PROGRAM = """
    import json, os, sys, time
    import tf_autopar
    parent = tf_autopar.enable()
    pipes = []
    for _ in range(2):                         # gunicorn's master: it forks its workers, serves nothing
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            st = tf_autopar.status()           # no enable() in the worker
            out = {"mask": sorted(os.sched_getaffinity(0)), "share": st.process.share,
                   "warnings": list(st.warnings), "intra": os.environ.get("TF_NUM_INTRAOP_THREADS"),
                   "again": tf_autopar.enable().process.share}
            os.write(w, json.dumps(out).encode())
            time.sleep(1)                      # both workers alive together
            os._exit(0)
        os.close(w)
        pipes.append((pid, r))
    kids = [json.loads(os.read(r, 1 << 20).decode()) for _, r in pipes]
    for pid, _ in pipes:
        os.waitpid(pid, 0)
    print(json.dumps({"parent": parent.process.share, "kids": kids, "tf": "tensorflow" in sys.modules,
                      "parent_warnings": list(tf_autopar.status().warnings)}))
"""


def test_a_parent_that_only_forks_has_its_workers_split_the_host(tmp_path):
    host = sorted(os.sched_getaffinity(0))
    if len(host) < 2:
        pytest.skip("needs 2 CPUs for two disjoint shares")
    (tmp_path / "lease").mkdir()
    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": "fork-test",
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "WEB_CONCURRENCY": "2",
        "TF_AUTOPAR_LOG": "info",
    }
    proc = run_py(FORK_PROGRAM, env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["tf"] is False and out["parent"]["lease_slot"] == 0
    a, b = out["kids"]
    assert sorted([a["share"]["lease_slot"], b["share"]["lease_slot"]]) == [0, 1]  # the master's slot handed over
    assert a["mask"] == a["share"]["cpus"] and b["mask"] == b["share"]["cpus"]  # really re-bound
    assert not set(a["mask"]) & set(b["mask"]), out  # disjoint CPUs
    assert a["share"]["budget"] == b["share"]["budget"] == len(host) // 2  # a clean split, not doubled up
    assert a["again"] == a["share"]  # a later enable() in the worker changes nothing
    assert a["warnings"] == b["warnings"] == [] and out["parent_warnings"] == []
    assert proc.stderr.count("forks before TensorFlow started") == 1  # said once, by the master
    assert proc.stderr.count("planned for this worker's own share") == 2


STARTED_FORK_PROGRAM = """
    import json, os
    import tensorflow as tf
    import tf_autopar
    tf_autopar.enable()
    tf.constant(1.0) + 1.0                     # the parent's runtime starts: its pools are fixed
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, json.dumps(list(tf_autopar.status().warnings)).encode())
        os._exit(0)
    os.close(w)
    child = json.loads(os.read(r, 1 << 20).decode())
    os.waitpid(pid, 0)
    print(json.dumps({"child": child, "parent": list(tf_autopar.status().warnings)}))
"""


@pytest.mark.tf
def test_a_child_forked_after_tensorflow_started_is_told_it_keeps_the_parent_pools(tmp_path):
    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": "fork-tf-test",
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "WEB_CONCURRENCY": "2",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    proc = run_py(STARTED_FORK_PROGRAM, env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    told = [w for w in out["child"] if "forked from pid" in w]
    assert (
        len(told) == 1
        and "after TensorFlow's runtime started" in told[0]
        and "keeps the parent's thread pools" in told[0]
    )
    assert not any("forked" in w for w in out["parent"])


HELPER_FORK_PROGRAM = """
    import json, os, threading
    import tensorflow as tf
    import tf_autopar
    tf_autopar.enable()
    tf.constant(1.0) + 1.0                     # the parent's runtime starts
    r, w = os.pipe()
    def helper():                              # a library forking from one of its own threads
        pid = os.fork()                        # (OpenVINO's telemetry does, at every convert_model)
        if pid == 0:
            os.write(w, json.dumps(list(tf_autopar.status().warnings)).encode())
            os._exit(0)
        os.waitpid(pid, 0)
    t = threading.Thread(target=helper)
    t.start()
    t.join()
    os.close(w)
    print(json.dumps({"child": json.loads(os.read(r, 1 << 20).decode())}))
"""


@pytest.mark.tf
def test_a_child_a_library_forks_from_a_helper_thread_is_not_warned_about_pools_it_never_uses(tmp_path):
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = run_py(HELPER_FORK_PROGRAM, env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert not any("forked" in w for w in out["child"]), out
    assert "forked from pid" not in proc.stderr


# ---------------------------------------------------------------- item 5: workers started together, no count

TOGETHER_PROGRAM = """
    import json, os, sys, time
    import tf_autopar
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.001)
    st = tf_autopar.enable()
    print(json.dumps({"share": st.process.share, "mask": sorted(os.sched_getaffinity(0)), "ms": st.enable_ms,
                      "warnings": list(st.warnings)}), flush=True)
    sys.stdin.read()                           # hold the slot until every worker has reported
"""


def _start(code: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    """A worker without a count or ranks, whatever the test runner's environment holds."""
    from tf_autopar.coordination.ranks import COUNTS, PAIRS

    full = {k: v for k, v in os.environ.items() if k not in {x for pair in PAIRS for x in pair} | set(COUNTS)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**full, "PYTHONPATH": str(ROOT), **env},
    )


def test_three_workers_started_together_without_a_count_split_the_host(tmp_path):
    from tf_autopar.coordination import split
    from tf_autopar.topology import detect_topology

    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": "together-test",
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
    }
    go = tmp_path / "go"
    procs = [_start(TOGETHER_PROGRAM, env, str(go)) for _ in range(3)]
    try:
        time.sleep(0.5)
        go.touch()
        outs = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(TIMEOUT)
    assert sorted(o["share"]["index"] for o in outs) == [0, 1, 2]
    assert all((o["share"]["count"], o["share"]["source"], o["warnings"]) == (3, "rendezvous", []) for o in outs)
    expected = split(detect_topology(), 3)  # the sharing rule when 3 > cores: worker i on core i mod cores
    for o in outs:
        assert o["mask"] == o["share"]["cpus"] == list(expected[o["share"]["index"]].cpus), o
    for x in outs:
        for y in outs:
            i, j = x["share"]["index"], y["share"]["index"]
            if i != j and set(expected[i].cpus).isdisjoint(expected[j].cpus):
                assert set(x["mask"]).isdisjoint(y["mask"])  # pairwise disjoint wherever the rule says so
    if len(os.sched_getaffinity(0)) >= 3:
        assert len({c for o in outs for c in o["mask"]}) == sum(len(o["mask"]) for o in outs)


def test_only_a_process_with_company_waits_for_the_rendezvous(tmp_path):
    """A lone script must not pay the window (enable() would cost a second); a process whose
    parent runs another process of the same executable (workers started together) waits."""
    base = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "TF_AUTOPAR_RENDEZVOUS_S": "3",
    }
    program = "import json, tf_autopar; st = tf_autopar.enable(); print(json.dumps([st.enable_ms, st.process.share]))"
    lone = run_py(program, {**base, "TF_AUTOPAR_GROUP": "lone"})
    ms, share = json.loads(lone.stdout.splitlines()[-1])
    assert ms < 2000 and share["source"] == "single" and "without waiting" in share["note"], (ms, share)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # same parent, same executable
    try:
        company = run_py(program, {**base, "TF_AUTOPAR_GROUP": "company"})
    finally:
        sibling.kill()
        sibling.wait()
    ms, share = json.loads(company.stdout.splitlines()[-1])
    assert ms >= 3000 and share["source"] == "single" and "within 3 s" in share["note"], (ms, share)
    counted = run_py(program, {**base, "TF_AUTOPAR_GROUP": "counted", "TF_AUTOPAR_INSTANCES": "1"})
    ms, share = json.loads(counted.stdout.splitlines()[-1])
    assert ms < 3000 and share["source"] == "lease"  # a count decides: no wait


# ---------------------------------------------------------------- the kill switch


def test_the_kill_switch_makes_enable_change_nothing_and_says_so_once(tmp_path):
    program = """
        import json, os
        import tf_autopar
        before = (dict(os.environ), sorted(os.sched_getaffinity(0)))
        st = tf_autopar.enable(mode="latency")
        st = tf_autopar.enable()
        after = (dict(os.environ), sorted(os.sched_getaffinity(0)))
        print(json.dumps({"same": before == after, "enabled": st.enabled, "by": st.disabled_by, "text": st.text(),
                          "lease": os.listdir(os.environ["TF_AUTOPAR_LEASE_DIR"]), "warnings": list(st.warnings)}))
    """
    (tmp_path / "lease").mkdir()
    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "TF_AUTOPAR_INSTANCES": "2",
        "TF_AUTOPAR_DISABLE": "1",
        "TF_AUTOPAR_LOG": "info",
    }
    proc = run_py(program, env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["same"] and out["enabled"] is False and out["lease"] == [] and out["warnings"] == []
    assert out["by"] == "TF_AUTOPAR_DISABLE=1" and "switched off by TF_AUTOPAR_DISABLE=1" in out["text"]
    assert proc.stderr.count("TF_AUTOPAR_DISABLE=1") == 1, proc.stderr  # said once, at info
    off = run_py(program, {**env, "TF_AUTOPAR_DISABLE": "0"})
    assert json.loads(off.stdout.splitlines()[-1])["enabled"] is True
