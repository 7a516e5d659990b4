"""Ray replicas plan for the CPUs Ray granted them (coordination/ray_grant.py), on a real local
2-node Ray cluster. Skips (with the reason) where Ray is missing: ``pip install '.[serve]'``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tf_autopar.coordination import claim_share
from tf_autopar.coordination.ray_grant import RayGrant, grant_layout, in_ray_worker, read_grant

from test_coordination_slices import make_topology

HERE = Path(__file__).resolve().parent


def test_grant_layout_whole_fractional_and_bad_grants():
    assert grant_layout(1, 2) == grant_layout(1.0, 2) and grant_layout(1, 2).count == 2
    assert (grant_layout(2, 8).budget, grant_layout(2, 8).count) == (2, 4)
    assert (grant_layout(0.5, 2).budget, grant_layout(0.5, 2).count) == (1, 4)  # two replicas per core
    assert (grant_layout(1.5, 2).budget, grant_layout(1.5, 2).count) == (1, 1)  # planned for the floor
    assert grant_layout(16, 4).budget == 4  # a grant above the host's cores: the cores
    for bad in (0, -1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="Ray CPU grant"):
            grant_layout(bad, 2)


def test_read_grant_outside_ray_is_none():
    assert not in_ray_worker({"RAY_RAYLET_PID": "1"}, modules={})
    assert not in_ray_worker({}, modules={"ray": object()})
    assert read_grant({}) is None


def test_claim_share_with_a_grant_takes_disjoint_slots(tmp_path):
    topology = make_topology(cores_per_node=4)
    a = claim_share(topology, {}, lease_dir=str(tmp_path), grant=RayGrant(2.0))
    b = claim_share(topology, {}, lease_dir=str(tmp_path), grant=RayGrant(2.0))
    with a, b:
        assert (a.source, a.budget, a.count, b.budget) == ("ray", 2, 2, 2)
        assert not set(a.cpus) & set(b.cpus) and len(a.cpus) == len(b.cpus) == 2
        assert "Ray granted 2 CPUs" in a.note


def ray_child(tmp_path, *args: str) -> dict:
    """Run tests/_ray_child.py (a local 2-node cluster) and return what it printed."""
    pytest.importorskip("ray", reason="ray is not installed (pip install '.[serve]')")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    lease = tmp_path / "lease"
    lease.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR_INSTANCES", "RAY_"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.run(
        [sys.executable, str(HERE / "_ray_child.py"), str(lease), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_replicas_on_a_local_two_node_ray_cluster_plan_for_their_grant(tmp_path):
    out = ray_child(tmp_path)
    whole, half = out["whole"], out["half"]
    assert len({r["node"] for r in whole + half}) == 2  # two Ray nodes
    for r in whole:  # num_cpus=1 on the 2-CPU node: one core each, disjoint, 1 x 1 threads
        assert r["share"]["source"] == "ray" and r["share"]["budget"] == 1 and r["planned"] == "1x1", r
        assert len(r["affinity"]) == 1, r
    assert not set(whole[0]["affinity"]) & set(whole[1]["affinity"]), whole
    host = sorted(os.sched_getaffinity(0))
    for r in half:  # num_cpus=0.5: four slots of half a core on the two cores, 1 x 1 threads, unpinned over both
        assert r["share"]["source"] == "ray" and r["planned"] == "1x1" and r["share"]["shared_with"] == 4, r
        assert "Ray granted 0.5 CPUs" in r["share"]["note"] and r["affinity"] == host, r
    assert half[0]["share"]["index"] != half[1]["share"]["index"], half  # two slots of the lease


@pytest.mark.slow
def test_the_ray_serve_example_on_two_nodes_plans_each_replica_for_its_grant(tmp_path, user_models):
    """The Ray Serve example (examples/serving/ray_serve_app.py), 2 nodes of 1 CPU, 4 replicas of
    num_cpus=0.5: every replica plans 1 x 1 for its half CPU, unpinned over both cores."""
    pytest.importorskip("ray.serve", reason="ray[serve] is not installed (pip install '.[serve]')")
    replicas = ray_child(tmp_path, "serve", user_models["SM"])["replicas"]
    assert len(replicas) == 4, replicas
    host = sorted(os.sched_getaffinity(0))
    for r in replicas:
        assert r["share"]["source"] == "ray" and r["planned"] == "1x1" and r["affinity"] == host, r
    assert len({r["share"]["index"] for r in replicas}) == 4, replicas  # four slots of the lease
