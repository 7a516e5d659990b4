"""The validation harness with real child processes (a stand-in runner, no TensorFlow):
interleaving, raw timings in JSON, crash/timeout tolerance, plan failures, report and chart."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tf_autopar.validation import chart, report, results
from tf_autopar.validation.harness import ChildPlanProvider, Harness, Options, RowSpec, fixed_plan_provider
from tf_autopar.measure.runner import TRACKER
from tf_autopar.measure.configs import thread_config

from test_validation_stats import topo

STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_validation_standin.py")
RUNNER = (sys.executable, STANDIN)
OURS_1x2 = fixed_plan_provider(thread_config(1, 2, openmp=False, name="tf_autopar", kind="plan"))


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_rounds_are_interleaved_and_every_timing_is_kept(standin_log, tmp_path):
    t = topo()
    h = Harness(
        t, Options(rounds=2, steps=3, warmup=1, runner=RUNNER, timeout_s=60, frozen=False), plan_provider=OURS_1x2
    )
    rows = [RowSpec("wa", "infer1", 1, "tiny"), RowSpec("wb", "train", 4, "tiny")]
    doc = h.run(rows)
    assert "TF_NUM_INTRAOP_THREADS" in doc["scrubbed_env"] and "OMP_NUM_THREADS" in doc["scrubbed_env"]
    slots = ["tf-default", "tf-recommended", "1x1", "2x1", "2x2"]
    expected = [(w, name) for w in ("wa", "wb") for _ in range(2) for name in slots]
    log = read_log(standin_log)
    threads = {"tf-default": "0x0", "tf-recommended": "1x2", "1x1": "1x1", "2x1": "2x1", "2x2": "2x2"}
    assert [(e["workload"], e["threads"]) for e in log] == [(w, threads[n]) for w, n in expected]
    assert all(e["omp"] is None for e in log)
    assert [(e["mode"], e["batch"]) for e in log][-1] == ("train", 4)
    for row in doc["rows"]:
        assert row["order"] == slots
        runs = sorted(((run["seq"], run["round"], name) for name, c in row["configs"].items() for run in c["runs"]))
        assert [(rnd, name) for _, rnd, name in runs] == [(r, n) for r in (1, 2) for n in slots]
        assert row["configs"]["tf_autopar"]["same_as"] == "tf-recommended"
        assert row["configs"]["intel-recommended"]["same_as"] == "tf-recommended"
        for name in slots:
            for run in row["configs"][name]["runs"]:
                assert run["status"] == "ok" and len(run["step_times_s"]) == 3
        s = row["summary"]
        assert s["ours"] == "tf_autopar" and s["speedup"]["tf-recommended"]["value"] == 1.0
        assert s["optimum"] in slots
    # the JSON written is the JSON promised
    out = tmp_path / "v.json"
    report.write_json(doc, str(out))
    loaded = json.loads(out.read_text())
    results.validate_document(loaded)
    assert loaded["space"]["searched"] == 4 and loaded["space"]["kind"] == "full"
    table = report.format_table(loaded, details=True)
    assert "geomean" in table and "wa" in table and "same as tf-recommended" in table
    png = tmp_path / "v.png"
    chart.write(loaded, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not TRACKER.live


def test_crashes_timeouts_and_garbage_are_recorded_and_the_run_goes_on(standin_log, monkeypatch):
    monkeypatch.setenv("STANDIN_CRASH", "2x1")
    monkeypatch.setenv("STANDIN_HANG", "2x2")
    monkeypatch.setenv("STANDIN_BADJSON", "1x1")
    h = Harness(
        topo(), Options(rounds=2, steps=2, warmup=0, runner=RUNNER, timeout_s=2.0, frozen=False), plan_provider=OURS_1x2
    )
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny")])
    row = doc["rows"][0]
    statuses = {name: [r["status"] for r in c["runs"]] for name, c in row["configs"].items() if not c["same_as"]}
    assert statuses == {
        "tf-default": ["ok", "ok"],
        "tf-recommended": ["ok", "ok"],
        "1x1": ["crash", "crash"],
        "2x1": ["crash", "crash"],
        "2x2": ["timeout", "timeout"],
    }
    crash = row["configs"]["2x1"]["runs"][0]
    assert crash["returncode"] == 3 and "simulated crash" in crash["stderr_tail"]
    assert "unusable output" in row["configs"]["1x1"]["runs"][0]["error"]
    assert "killed after 2 s" in row["configs"]["2x2"]["runs"][0]["error"]
    s = row["summary"]
    assert s["configs"]["2x2"]["status"] == "timeout" and s["configs"]["1x1"]["status"] == "crash"
    assert s["optimum"] in ("tf-default", "tf-recommended")
    results.validate_document(json.loads(json.dumps(doc)))
    table = report.format_table(doc, details=True)  # the default view counts them: "6 failed run(s)"
    assert "failed runs" in table and "2x2 round 2: timeout" in table
    assert "6 failed run(s)" in report.format_table(doc)
    # the hung children were killed, not left behind
    assert not any(alive(e["pid"]) for e in read_log(standin_log))
    assert not TRACKER.live


def test_plan_computed_in_a_child_and_a_failed_plan_does_not_stop_the_run(standin_log, tmp_path):
    CPU = min(os.sched_getaffinity(0))
    payload = {
        "plan": {"inter_op": 2, "intra_op": 1, "omp_threads": None, "cpus": [[CPU]]},
        "env": {"TF_NUM_INTEROP_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "1"},
        "plan_mode": "latency",
    }
    good = ChildPlanProvider(command=[sys.executable, "-c", f"print({json.dumps(json.dumps(payload))})"])
    h = Harness(
        topo(), Options(rounds=1, steps=2, warmup=0, runner=RUNNER, space="none", frozen=False), plan_provider=good
    )
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny")])
    row = doc["rows"][0]
    assert row["plan"]["status"] == "ok" and row["order"] == ["tf-default", "tf-recommended", "tf_autopar"]
    ours = row["configs"]["tf_autopar"]
    assert (ours["inter"], ours["intra"], ours["cpus"], ours["env"]) == (2, 1, [CPU], payload["env"])
    assert row["summary"]["configs"]["tf_autopar"]["threads"] == [2, 1]
    log = read_log(standin_log)
    assert [e["threads"] for e in log] == ["0x0", "1x2", "2x1"]
    assert log[2]["affinity"] == [CPU] and log[0]["affinity"] == sorted(os.sched_getaffinity(0))

    bad = ChildPlanProvider(
        command=[sys.executable, "-c", "import sys; print('no graph', file=sys.stderr); sys.exit(4)"]
    )
    h = Harness(
        topo(), Options(rounds=1, steps=2, warmup=0, runner=RUNNER, space="none", frozen=False), plan_provider=bad
    )
    doc = h.run([RowSpec("wb", "train", 2, "tiny")])
    row = doc["rows"][0]
    assert row["plan"]["status"] == "crash" and "no graph" in row["plan"]["stderr_tail"]
    assert "tf_autopar" not in row["configs"] and row["order"] == ["tf-default", "tf-recommended"]
    assert row["summary"]["reasons"] == ["our plan is unavailable"]
    assert all(r["status"] == "ok" for r in row["configs"]["tf-default"]["runs"])
    results.validate_document(json.loads(json.dumps(doc)))
    assert "plan failed" in report.format_table(doc)


def test_bad_options_are_rejected_with_a_clear_message():
    for opts, msg in (
        (Options(rounds=0), "--rounds"),
        (Options(cpu_quota=0), "--cpu-quota"),
        (Options(timeout_s=-1), "--timeout"),
    ):
        with pytest.raises(ValueError, match=msg):
            Harness(topo(), opts, plan_provider=OURS_1x2)


def test_tuned_finds_the_faster_neighbour_and_reports_its_cost(standin_log, monkeypatch):
    monkeypatch.setenv("STANDIN_FAST", "2x1")  # 2x1 does a quarter of the work: the setting to find
    h = Harness(
        topo(),
        Options(rounds=2, steps=5, warmup=1, runner=RUNNER, timeout_s=60, tune_runs=12, frozen=False),
        plan_provider=OURS_1x2,
    )
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny")])
    row = doc["rows"][0]
    tune = row["tune"]
    assert tune["status"] == "ok" and tune["rule"] == "1x2" and tune["tuned"] == "2x1"
    assert tune["search"]["stopped"].startswith("decided")  # a 4x win in every round ends it early
    assert {r["config"] for r in tune["runs"]} == {"1x2", "2x2", "2x1", "1x1"}  # the plan's neighbourhood
    assert len(tune["runs"]) < 12 and tune["wall_s"] == pytest.approx(sum(r["wall_s"] for r in tune["runs"]), abs=0.01)
    # the tuning's runs are not the rounds': the tuned setting is measured again beside the others
    tuned = row["configs"]["tuned"]
    assert (tuned["inter"], tuned["intra"], tuned["same_as"]) == (2, 1, "2x1") or (
        (tuned["inter"], tuned["intra"]) == (2, 1) and row["configs"]["2x1"]["same_as"] == "tuned"
    )
    s = row["summary"]
    assert s["tuned_vs_optimum"]["value"] == pytest.approx(1.0, abs=0.15)
    assert s["ours_vs_optimum"]["value"] < 0.6  # the rule's 1x2 does four times the work
    cost = s["tune_cost"]
    assert cost["runs"] == len(tune["runs"]) and cost["sweep_runs"] == 4 * 2  # 4 search configs x 2 rounds
    assert 0 < cost["share"] == pytest.approx(cost["wall_s"] / cost["sweep_wall_s"])
    assert doc["geomean"]["tuned_vs_optimum"] == pytest.approx(s["tuned_vs_optimum"]["value"])
    text = report.format_table(doc, details=True)
    assert "tuned/opt" in text and "of sweep" in text
    results.validate_document(doc)


def test_tune_runs_must_pay_for_two_settings():
    with pytest.raises(ValueError, match="--tune-runs must be 0"):
        Options(tune_runs=1).check()
