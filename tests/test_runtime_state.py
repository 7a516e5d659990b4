"""STATE as the one owner of process state: the host (detected once, replaced when the CPU limits
change) and this process's share of it, which plans are made for; and runtime/plans.py, which
feeds the pure rule with them and with what the plan cache holds. No TensorFlow."""

from __future__ import annotations

import ast
import dataclasses
import threading
import time
from pathlib import Path

import pytest

from tf_autopar.coordination import split
from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning.graph_plan import graph_plan
from tf_autopar.runtime import cache, controller, plans, state
from tf_autopar.runtime.state import STATE, Registry
from tf_autopar.topology import detect_topology

HOSTS = Path(__file__).resolve().parent / "fixtures" / "hosts"
PROFILE = GraphProfile(
    heavy_ops=12, depth=3, avg_width=4, max_width=6, typical_op_work=50_000_000, fingerprint="e" * 16
)
TUNED = {"inter_op": 2, "intra_op": 5, "speedup": 1.3, "rounds": 5, "runs": 10, "date": "2026-12-01"}
CALIBRATED = {"small_op_work": 1_000_000, "date": "2026-12-02", "where": "calibrated on this host", "why": "test"}


@pytest.fixture(scope="module")
def skylake():
    return detect_topology(str(HOSTS / "skylake-2s-24c-48t"), cpu_details=False)


@pytest.fixture
def detections(skylake, monkeypatch):
    """detect_topology as STATE calls it, counted (and slow, so that racing threads overlap)."""
    calls = []

    def detect(cpu_details=True):
        calls.append(cpu_details)
        time.sleep(0.05)
        return skylake

    monkeypatch.setattr(state, "detect_topology", detect)
    return calls


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_the_host_is_detected_once_and_kept(detections, skylake):
    registry = Registry()
    assert registry.host is None and registry.share is None
    assert registry.host_topology() is skylake and registry.host_topology() is skylake
    assert registry.topology() is skylake  # no share: the whole host
    assert detections == [False]  # once, without the processor's details


def test_threads_asking_for_the_host_at_once_detect_it_once(detections, skylake):
    registry = Registry()
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(registry.host_topology())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(detections) == 1 and seen == [skylake] * 8


def test_a_share_is_what_plans_are_made_for_until_it_is_given_back(detections, skylake):
    registry = Registry()
    share = split(skylake, 2)[0]
    narrowed = dataclasses.replace(skylake, cpu_budget=share.cores)
    registry.use_share(narrowed)
    assert registry.topology() is narrowed and registry.host_topology() is skylake
    registry.use_share(None)
    assert registry.topology() is skylake


def test_a_new_host_replaces_the_detected_one(detections, skylake):
    registry = Registry()
    registry.host_topology()
    smaller = dataclasses.replace(skylake, cpu_budget=2)
    registry.use_host(smaller)
    assert registry.host_topology() is smaller and registry.topology() is smaller
    share = dataclasses.replace(skylake, cpu_budget=1)
    registry.use_share(share)
    registry.use_host(skylake)  # the share stays what plans are made for (quota_watch re-cuts it)
    assert registry.topology() is share and registry.host_topology() is skylake
    assert len(detections) == 1


def test_a_reset_forgets_the_host_and_the_share(detections, skylake):
    registry = Registry()
    registry.host_topology()
    registry.use_share(dataclasses.replace(skylake, cpu_budget=1))
    registry.reset()
    assert registry.host is None and registry.share is None
    assert registry.topology() is skylake and len(detections) == 2  # detected again


def test_the_cache_is_read_outside_enable_and_as_enable_said_inside():
    registry = Registry()
    assert registry.reads_cache()  # the CLI, tune, optimize() alone
    registry.enabled, registry.use_cache = True, True
    assert registry.reads_cache()
    registry.use_cache = False
    assert not registry.reads_cache()


def test_the_plan_for_a_topology_batch_and_cache_use(skylake, own_cache):
    """What `tune` measured counts for its own batch only, and only when the cache is read; the
    host's calibration likewise."""
    host = cache.host_key(skylake)
    cache.store_tuned(PROFILE.fingerprint, host, "latency", 8, TUNED)
    cache.store_calibration(host, CALIBRATED)
    rule = graph_plan(skylake, PROFILE, "latency", env={})

    def planned(batch, use_cache):
        return plans.measured_plan(skylake, PROFILE, "latency", env={}, batch=batch, use_cache=use_cache)

    at_8 = planned(8, True)
    assert (at_8.inter_op, at_8.intra_op) == (2, 5)
    assert any("calibrated on this host on 2026-12-02" in f for f in at_8.facts), at_8.facts
    at_1 = planned(1, True)
    assert (at_1.inter_op, at_1.intra_op) == (rule.inter_op, rule.intra_op) != (2, 5)
    assert at_1.to_dict() == graph_plan(skylake, PROFILE, "latency", env={}, calibration=CALIBRATED).to_dict()
    assert planned(8, False).to_dict() == rule.to_dict()  # no cache: the rule, uncalibrated
    frozen = plans.measured_plan(
        skylake,
        dataclasses.replace(PROFILE, fingerprint="0" * 16),
        "latency",
        env={},
        batch=8,
        use_cache=True,
        tuned_fingerprint=PROFILE.fingerprint,
    )
    assert (frozen.inter_op, frozen.intra_op) == (2, 5)  # a frozen graph's plan uses its model file's tuning


def test_the_measured_lookups_take_everything_explicitly(skylake, own_cache):
    host = cache.host_key(skylake)
    cache.store_tuned(PROFILE.fingerprint, host, "latency", 8, TUNED)
    cache.store_calibration(host, CALIBRATED)
    assert plans.tuned_for(PROFILE.fingerprint, "latency", skylake, 8)["intra_op"] == 5
    assert plans.tuned_for(PROFILE.fingerprint, "latency", skylake, 8, use_cache=False) is None
    assert plans.tuned_for(PROFILE.fingerprint, "throughput", skylake, 8) is None
    assert plans.tuned_for("", "latency", skylake, 8) is None
    assert plans.calibration_for(skylake)["small_op_work"] == 1_000_000
    assert plans.calibration_for(skylake, use_cache=False) is None  # no entry for this processor model


def test_this_processs_plan_reads_states_topology_batch_and_cache_use(skylake, own_cache, monkeypatch):
    host = cache.host_key(skylake)
    cache.store_tuned(PROFILE.fingerprint, host, "latency", 8, TUNED)
    monkeypatch.setattr(STATE, "share", skylake)
    monkeypatch.setattr(STATE, "batch", 8)
    monkeypatch.setattr(STATE, "enabled", False)
    expected = plans.measured_plan(skylake, PROFILE, "latency", env=controller.user_env(), batch=8, use_cache=True)
    got = plans.plan_for(PROFILE, "latency")
    assert got.to_dict() == expected.to_dict() and (got.inter_op, got.intra_op) == (2, 5)
    at_1 = plans.plan_for(PROFILE, "latency", batch=1)  # the batch given beats enable()'s
    assert (at_1.inter_op, at_1.intra_op) != (2, 5)
    monkeypatch.setattr(STATE, "enabled", True)
    monkeypatch.setattr(STATE, "use_cache", False)  # enable(cache=False)
    off = plans.plan_for(PROFILE, "latency")
    assert (
        off.to_dict()
        == plans.measured_plan(
            skylake, PROFILE, "latency", env=controller.user_env(), batch=8, use_cache=False
        ).to_dict()
    )
    assert (off.inter_op, off.intra_op) != (2, 5)


def test_state_imports_no_runtime_module_above_it():
    """Every runtime module imports state.py; it imports only the record (applied.py) and the
    records defined on first use (records.py), in function bodies too (not under TYPE_CHECKING)."""
    tree = ast.parse(Path(state.__file__).read_text())
    checking = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    imported = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        imported |= {n for n in names if n.startswith("tf_autopar.runtime.")}
    runtime_modules = {m for m in imported if (Path(state.__file__).parent / f"{m.rsplit('.', 1)[-1]}.py").exists()}
    assert runtime_modules <= {"tf_autopar.runtime.applied", "tf_autopar.runtime.records"}, runtime_modules
