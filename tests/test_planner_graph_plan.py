"""planning/graph_plan.py: a graph's plan from what is given (topology, profile, mode, the user's
environment, what was measured), and the profile summary a plan is kept with. Pure: no
TensorFlow, no plan cache, no process state."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tf_autopar.graph.profile import GraphProfile
from tf_autopar.planning import plan
from tf_autopar.planning.calibrations import MEASURED
from tf_autopar.planning.graph_plan import (
    CACHED_PROFILE_FIELDS,
    cached_profile,
    effective_mode,
    graph_plan,
    host_calibration,
    profile_from_dict,
    profile_summary,
)
from tf_autopar.topology import detect_topology


ROOT = Path(__file__).resolve().parent.parent
SKYLAKE = str(ROOT / "tests" / "fixtures" / "hosts" / "skylake-2s-24c-48t")


@pytest.fixture(scope="module")
def skylake():
    return detect_topology(SKYLAKE, cpu_details=False)


WIDE = GraphProfile(heavy_ops=12, depth=3, avg_width=4, max_width=6, typical_op_work=50_000_000, fingerprint="f" * 16)
TRAINING = dataclasses.replace(WIDE, training=True)
TUNED = {"inter_op": 2, "intra_op": 5, "speedup": 1.3, "rounds": 5, "runs": 10, "date": "2026-12-01"}
CALIBRATED = {"small_op_work": 1_000_000, "date": "2026-12-02", "where": "calibrated on this host", "why": "test"}


def test_a_training_graph_asked_for_latency_gets_the_training_plan():
    assert effective_mode("latency", TRAINING) == "training"
    assert effective_mode("throughput", TRAINING) == "throughput"  # only latency, the default, is read so
    assert effective_mode("latency", WIDE) == "latency"
    assert effective_mode("latency", None) == "latency"


def test_the_plan_is_the_rules_for_the_effective_mode(skylake):
    got = graph_plan(skylake, TRAINING, "latency", env={})
    assert got.mode == "training"
    assert got.to_dict() == plan(skylake, TRAINING, "training", env={}).to_dict()
    host_only = graph_plan(skylake, None, "latency", env={})
    assert host_only.to_dict() == plan(skylake, None, "latency", env={}).to_dict()


def test_streams_count_in_throughput_mode_only(skylake):
    latency = graph_plan(skylake, WIDE, "latency", env={}, streams=3)  # the rule itself refuses streams here
    assert latency.to_dict() == plan(skylake, WIDE, "latency", env={}).to_dict() and latency.instances == 1
    throughput = graph_plan(skylake, WIDE, "throughput", env={}, streams=3)
    assert throughput.instances == 3
    assert throughput.to_dict() == plan(skylake, WIDE, "throughput", env={}, streams=3).to_dict()


def test_a_tuned_setting_replaces_the_rules_pools(skylake):
    rule = graph_plan(skylake, WIDE, "latency", env={})
    tuned = graph_plan(skylake, WIDE, "latency", env={}, tuned=TUNED)
    assert (rule.inter_op, rule.intra_op) != (2, 5)
    assert (tuned.inter_op, tuned.intra_op) == (2, 5)
    assert any(f.startswith("tuned on 2026-12-01: 2x5") for f in tuned.facts), tuned.facts


def test_the_users_environment_is_kept(skylake):
    got = graph_plan(skylake, WIDE, "latency", env={"TF_NUM_INTEROP_THREADS": "7"})
    assert got.to_dict() == plan(skylake, WIDE, "latency", env={"TF_NUM_INTEROP_THREADS": "7"}).to_dict()
    assert got.inter_op == 7 and got.settings["inter_op"].source == "user"


def test_a_calibration_applies_to_a_profiles_plan_only(skylake):
    with_profile = graph_plan(skylake, WIDE, "latency", env={}, calibration=CALIBRATED)
    assert any("calibrated on this host on 2026-12-02" in f for f in with_profile.facts), with_profile.facts
    host_only = graph_plan(skylake, None, "latency", env={}, calibration=CALIBRATED)
    assert host_only.to_dict() == plan(skylake, None, "latency", env={}).to_dict()


def test_the_hosts_calibration_is_its_own_else_its_processors_else_none(skylake):
    assert host_calibration(skylake, CALIBRATED) == CALIBRATED
    assert host_calibration(skylake) is None and host_calibration(skylake, {}) is None  # no entry for a Gold 6136
    listed = next(iter(MEASURED))
    xeon = dataclasses.replace(skylake, cpu=dataclasses.replace(skylake.cpu, model=listed))
    assert host_calibration(xeon) == MEASURED[listed]
    assert host_calibration(xeon, CALIBRATED) == CALIBRATED  # measured here beats the processor's


def test_a_summary_holds_every_field_the_planner_reads_and_comes_back_whole():
    profile = dataclasses.replace(WIDE, lookups=3, lookup_work=4096, assumptions=("unknown batch read as 1",))
    summary = profile_summary(profile)
    assert tuple(summary) == CACHED_PROFILE_FIELDS
    back = cached_profile({**summary, "assumptions": list(summary["assumptions"])})  # JSON gives lists
    assert back is not None
    assert profile_summary(back) == summary and back.assumptions == ("unknown batch read as 1",)


def test_a_summary_without_a_field_the_planner_reads_is_a_miss():
    summary = profile_summary(WIDE)
    for field in ("lookups", "contraction_work", "fingerprint"):
        assert cached_profile({k: v for k, v in summary.items() if k != field}) is None, field
    assert cached_profile(None) is None and cached_profile("garbled") is None and cached_profile([]) is None


def test_a_profile_from_a_dict_drops_what_it_does_not_know():
    got = profile_from_dict({**WIDE.to_dict(), "level_widths": [2, 6, 4], "from_a_newer_version": 1})
    assert got == dataclasses.replace(WIDE, level_widths=(2, 6, 4))


def test_planning_a_graph_imports_no_tensorflow():
    code = (
        "import sys; from tf_autopar.graph.profile import GraphProfile; from tf_autopar.topology import detect_topology; "
        "from tf_autopar.planning.graph_plan import graph_plan, cached_profile, profile_summary; "
        f"t = detect_topology({SKYLAKE!r}, cpu_details=False); p = GraphProfile.from_width(3); "
        "graph_plan(t, cached_profile(profile_summary(p)), 'latency', env={}); "
        "print('tensorflow' in sys.modules, 'numpy' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]
