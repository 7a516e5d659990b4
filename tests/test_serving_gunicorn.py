"""The example FastAPI server (examples/serving/app.py) under real gunicorn with uvicorn workers:
real processes, real sockets on 127.0.0.1, the workers' own /status.

Plain `uvicorn --workers N` too. Skips (with the reason) where gunicorn, uvicorn or fastapi is missing: ``pip install '.[serve]'``.
"""

from __future__ import annotations

import os
import signal

import pytest

for _name in ("gunicorn", "uvicorn", "fastapi"):
    pytest.importorskip(_name, reason=f"{_name} is not installed (pip install '.[serve]')")

from examples.serving.harness import Server, fast_path_decided, warm_until_served  # noqa: E402
from tf_autopar.measure.cgroup import CgroupUnavailable, QuotaGroup, check_writable, find_cpu_controller  # noqa: E402

BODY = {"inputs": [[[[0.25, 0.5, 0.75]] * 32] * 32]}  # one 32x32x3 image: the small user model's input


def need_cpus(n: int) -> None:
    if len(os.sched_getaffinity(0)) < n:
        pytest.skip(f"needs {n} CPUs, this process has {len(os.sched_getaffinity(0))}")


@pytest.fixture()
def env(tmp_path, monkeypatch) -> dict[str, str]:
    """A clean environment: a lease of the test's own, no worker count, no thread variables."""
    lease = tmp_path / "lease"
    lease.mkdir(mode=0o700)
    e = dict(os.environ)
    for var in (
        "WEB_CONCURRENCY",
        "TF_AUTOPAR_INSTANCES",
        "TF_NUM_INTEROP_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "OMP_NUM_THREADS",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "TF_AUTOPAR_DISABLE",
        "TF_AUTOPAR_GROUP",
    ):
        e.pop(var, None)
    e.update(
        TF_AUTOPAR_LEASE_DIR=str(lease),
        TF_AUTOPAR_CACHE_DIR=str(tmp_path / "cache"),
        TF_AUTOPAR_FAST_PATH_DIR=str(tmp_path / "fastpath"),
    )
    return e


def disjoint(statuses: dict[int, dict]) -> bool:
    sets = [set(s["affinity"]) for s in statuses.values()]
    return all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])


def test_workers_take_disjoint_shares_served_and_a_killed_worker_takes_its_slot_back(user_models, env, tmp_path):
    """Two workers, no count given: disjoint CPUs, 1 inter-op thread each, the fast path serving
    in both; kill -9 one, gunicorn respawns it, and the new worker takes the freed CPUs."""
    need_cpus(2)
    with Server(user_models["SM"], 2, env=env, log_path=str(tmp_path / "server.log")) as server:
        st = warm_until_served(server, BODY, timeout_s=120)
        assert len(st) == 2 and disjoint(st), st
        for s in st.values():
            assert s["share"]["source"] == "rendezvous" and s["share"]["count"] == 2, s["share"]
            assert s["bound_cpus"] == s["affinity"] and s["planned"].startswith("1x"), s
            assert fast_path_decided(s), s["served"]  # the fast path, inside the worker
        victim, survivor = sorted(st)
        os.kill(victim, signal.SIGKILL)
        new = server.statuses(2, timeout_s=120, exclude=(victim,))
        assert set(new) - {survivor}, new
        (pid,) = set(new) - {survivor}
        assert pid in server.worker_pids() and victim not in server.worker_pids()
        assert new[pid]["affinity"] == st[victim]["affinity"], (new[pid], st[victim])  # its slot back
        assert disjoint(new), new
        assert (
            "reclaimed from pid" in new[pid]["share"]["note"]
            or new[pid]["share"]["index"] == st[victim]["share"]["index"]
        )
        code, out = server.request("POST", "/predict", BODY)
        assert code == 200 and len(out["outputs"]["output_0"][0]) == 10


@pytest.mark.slow  # the fork without a count is in the default suite: tests/test_coordination_preload.py
def test_preload_with_the_model_loaded_in_the_workers_keeps_disjoint_shares(user_models, env, tmp_path):
    """--preload: enable() and the TensorFlow import run in the master before the fork (the app
    loads its model in the lifespan, in each worker): the workers still split the host."""
    need_cpus(2)
    with Server(user_models["SM"], 2, env=env, preload=True, log_path=str(tmp_path / "server.log")) as server:
        st = server.statuses(2)
        assert disjoint(st), st
        assert all(s["phase"] == "before-start" and s["planned"].startswith("1x") for s in st.values()), st


PRELOAD_STARTS_TF = """
from examples.serving.app import app  # enable() first
import tensorflow as tf
tf.constant(1.0) + 1.0  # TensorFlow's runtime starts here, in gunicorn's master under --preload
"""


def test_preload_that_starts_tensorflow_in_the_master_tells_the_user_what_to_do(user_models, env, tmp_path):
    """An app that runs TensorFlow at import, under --preload: the workers cannot re-plan (pools
    are fixed before the fork) and each says so once, naming the fix."""
    (tmp_path / "preload_app.py").write_text(PRELOAD_STARTS_TF)
    with Server(
        user_models["SM"],
        2,
        env=env,
        preload=True,
        app="preload_app:app",
        pythonpath=(str(tmp_path),),
        log_path=str(tmp_path / "server.log"),
    ) as server:
        st = server.statuses(2)
        for s in st.values():
            told = [w for w in s["warnings"] if "forked from pid" in w]
            assert told, s["warnings"]
            assert "after TensorFlow's runtime started" in told[0] and "not with --preload" in told[0], told
            assert "post_fork" in told[0], told


def quota_group(cpus: float) -> QuotaGroup:
    try:
        controller = find_cpu_controller()
        check_writable(controller)
    except CgroupUnavailable as exc:
        pytest.skip(f"no writable cgroup cpu controller: {exc}")
    return QuotaGroup(controller, cpus, tag="gunicorn")


def test_workers_under_a_real_cpu_quota_plan_for_the_quota(user_models, env, tmp_path):
    """gunicorn inside a cgroup with a 1-CPU quota: the two workers plan for the one CPU the
    quota pays for (one core, shared, 1 x 1 each), not for the host's cores."""
    need_cpus(2)
    with quota_group(1.0) as group:
        with Server(user_models["SM"], 2, env=env, preexec=group.join, log_path=str(tmp_path / "server.log")) as server:
            st = server.statuses(2)
            assert set(server.worker_pids()) <= set(group.pids())
            for s in st.values():
                assert s["share"]["budget"] == 1 and s["planned"] == "1x1", s
                assert s["share"]["shared_with"] == 2 and len(s["affinity"]) == 1, s["share"]
            assert len({tuple(s["affinity"]) for s in st.values()}) == 1  # the one core the quota pays for


def test_plain_uvicorn_workers_take_disjoint_shares(user_models, env, tmp_path):
    """`uvicorn --workers 2` (spawned workers, each importing the app): disjoint CPUs, no count."""
    need_cpus(2)
    with Server(user_models["SM"], 2, env=env, server="uvicorn", log_path=str(tmp_path / "server.log")) as server:
        st = server.statuses(2)
        assert disjoint(st), st
        assert all(s["share"]["source"] == "rendezvous" and s["planned"].startswith("1x") for s in st.values()), st
        code, out = server.request("POST", "/predict", BODY)
        assert code == 200 and len(out["outputs"]["output_0"][0]) == 10
