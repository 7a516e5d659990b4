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


def test_workers_forked_without_a_count_still_split_the_host(tmp_path):
    host = sorted(os.sched_getaffinity(0))
    if len(host) < 2:
        pytest.skip("needs 2 CPUs for two disjoint shares")
    (tmp_path / "lease").mkdir()
    env = {
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": "fork-nocount-test",
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
    }
    proc = run_py(PRELOAD_PROGRAM, env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    a, b = out["kids"]
    assert a["share"]["source"] == b["share"]["source"] == "rendezvous", out
    assert not set(a["mask"]) & set(b["mask"]), out
    assert a["warnings"] == b["warnings"] == [], out
