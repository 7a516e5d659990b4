"""End to end with the real pieces: the workloads runner, the graph analysis and the planner
in child processes (TensorFlow runs only in the children), under a real quota when possible."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tf_autopar.validation import results
from tf_autopar.measure.cgroup import CgroupUnavailable, check_writable, find_cpu_controller, leftover_groups

pytestmark = pytest.mark.tf  # ~35 s on a 2-core host (plan child, 3 fresh TF processes, the export, frozen, live)

MAIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_validate_a_real_workload_with_the_real_plan(tmp_path):
    try:
        controller = find_cpu_controller()
        check_writable(controller)
    except CgroupUnavailable:
        controller = None
    out = tmp_path / "v.json"
    cmd = [
        sys.executable,
        "-m",
        "tf_autopar.cli.main",
        "validate",
        "autoenc",
        "--modes",
        "infer1",
        "--size",
        "tiny",
        "--rounds",
        "1",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--space",
        "none",
        "--json-out",
        str(out),
        "--no-progress",
    ]
    if controller:
        cmd += ["--cpu-quota", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (MAIN, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    doc = json.loads(out.read_text())
    results.validate_document(doc)
    row = doc["rows"][0]
    assert row["plan"]["status"] == "ok", row["plan"]
    assert row["plan"]["profile"]["heavy_ops"] > 0
    ours = row["configs"]["tf_autopar"]
    for name in row["order"]:
        run = row["configs"][name]["runs"][0]
        assert run["status"] == "ok", run
        assert len(run["step_times_s"]) == 2 and run["path"] == "function"
    assert row["summary"]["ours"] == "tf_autopar" and "tf-default" in row["summary"]["speedup"]
    # the frozen path of a bundled workload: exported once as a SavedModel, then the model child on it
    fp = row["frozen_path"]
    assert fp["status"] == "ok" and fp["export"]["status"] == "ok", fp
    assert fp["export"]["input_shapes"] == {"input_0": [1, 64]}
    assert row["order"][-2:] == ["frozen", "live"]  # the runs' status and step times are checked above
    assert row["configs"]["frozen"]["runs"][0]["frozen_session"] == "{}x{}".format(
        *row["summary"]["configs"]["tf_autopar"]["threads"]
    )
    assert row["configs"]["live"]["runs"][0]["tuned_s"] is not None
    assert row["summary"]["live_vs_optimum"]["value"] > 0
    if controller:
        # the plan was computed inside the quota group and saw the quota: one CPU's worth of threads
        assert row["plan"]["quota_source"] == "detected"
        assert (ours["inter"] or 99) * (ours["intra"] or 99) <= 1
        assert row["configs"]["tf-default"]["runs"][0]["cpu_stat"]["nr_periods"] > 0
        assert leftover_groups(controller, proc.pid) == []
