"""A master that forks its workers right after enable(), with no worker count (gunicorn
``--preload`` without WEB_CONCURRENCY): the fork hook runs in the first worker before the second
exists, so a slot handed over by the parent must not count as alone (rendezvous.handed_by_parent)."""

from __future__ import annotations

import json
import os

import pytest

from test_faults import FORK_PROGRAM, run_py

# gunicorn --preload: the app (TensorFlow's import) runs between the master's enable() and its
# first fork, and the master does its own work between two forks: the first worker looks for
# siblings before the second exists
PRELOAD_PROGRAM = FORK_PROGRAM.replace("    pipes = []\n", "    time.sleep(1.5)\n    pipes = []\n", 1).replace(
    "        os.close(w)\n", "        os.close(w)\n        time.sleep(0.3)\n", 1
)


def _two_workers_meet(program: str, tmp_path, group: str) -> None:
    """Run ``program`` (it forks two workers, no count) and check that they met: disjoint CPUs, no warning."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs for two disjoint shares")
    (tmp_path / "lease").mkdir()
    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": group,
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
    }
    proc = run_py(program, env)
    assert proc.returncode == 0, proc.stderr
    a, b = json.loads(proc.stdout.splitlines()[-1])["kids"]
    assert a["share"]["source"] == b["share"]["source"] == "rendezvous", (a["share"], b["share"])
    assert not set(a["mask"]) & set(b["mask"]), (a, b)
    assert a["warnings"] == b["warnings"] == [], (a, b)


def test_workers_forked_without_a_count_still_split_the_host(tmp_path):
    _two_workers_meet(PRELOAD_PROGRAM, tmp_path, "fork-nocount-test")


# gunicorn's master without --preload: each worker imports the app and calls enable() itself, the
# first before the master forks the second (gunicorn sleeps up to 0.1 s between forks)
WORKERS_PROGRAM = """
    import json, os, sys, time
    import tf_autopar                          # imported, not enabled: nothing to hand over
    pipes = []
    for _ in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            st = tf_autopar.enable()
            os.write(w, json.dumps({"share": st.process.share, "mask": sorted(os.sched_getaffinity(0)),
                                    "warnings": list(st.warnings)}).encode())
            time.sleep(1.5)                    # both workers alive together
            os._exit(0)
        os.close(w)
        pipes.append((pid, r))
        time.sleep(0.4)
    kids = [json.loads(os.read(r, 1 << 20).decode()) for _, r in pipes]
    for pid, _ in pipes:
        os.waitpid(pid, 0)
    print(json.dumps({"kids": kids}))
"""


def test_a_worker_forked_before_its_sibling_exists_is_not_alone(tmp_path):
    """The first worker used to find no sibling and no peer, take the whole host without waiting,
    and leave the second to overlap it (4 of 24 gunicorn starts, benchmarks/soak_server_start.py):
    a process its parent forked without exec waits out the window."""
    _two_workers_meet(WORKERS_PROGRAM, tmp_path, "fork-workers-test")


def test_a_fork_is_told_from_a_program_its_parent_started():
    from tf_autopar.coordination.rendezvous import forked_by_own_program

    assert not forked_by_own_program()  # pytest's worker: started by a program, not forked from it
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(w, b"1" if forked_by_own_program() else b"0")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
