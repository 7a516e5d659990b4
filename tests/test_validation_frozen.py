"""`validate`'s frozen path (issue 28) without TensorFlow: the frozen sweep and live beside the
process pools on inference rows, none on training rows, the optimum over both paths, the
report's columns, old documents. The harness runs the stand-in (test_validation_standin.py)
as every child: the workloads runner, the model child and the export child."""

from __future__ import annotations

import copy
import json
import os
import tempfile
import zipfile

import pytest

from tf_autopar.measure.configs import thread_config
from tf_autopar.measure.runner import TRACKER
from tf_autopar.models.bench import FROZEN_ENV
from tf_autopar.models.options import ModelOptions
from tf_autopar.validation import report, results
from tf_autopar.validation.harness import Harness, Options, RowSpec, distinct_slots, fixed_plan_provider
from tf_autopar.validation.space import search_space

from test_validation_harness import RUNNER, read_log
from test_validation_stats import _cfg, _run, hand_row, minimal_doc, topo

OURS_1x2 = fixed_plan_provider(thread_config(1, 2, openmp=False, name="tf_autopar", kind="plan"))
SWEEP = ["frozen:1x1", "frozen:1x2", "frozen:2x1", "frozen:2x2"]
PROCESS_SLOTS = ["tf-default", "tf-recommended", "1x1", "2x1", "2x2"]  # 1x2 and ours: same as tf-recommended


def standin_options(**kw) -> Options:
    """The stand-in as every child; each frozen session a process of its own (``sweep`` off: the
    tests below it check that method; tests/test_validation_headline.py the sweep inside live)."""
    return Options(
        **{"rounds": 2, "steps": 3, "warmup": 0, "timeout_s": 60, "sweep": False, **kw},
        runner=RUNNER,
        model_runner=RUNNER,
        export_runner=RUNNER,
    )


# ------------------------------------------------------------------ the configurations


def test_the_frozen_sweep_is_every_inter_x_intra_of_the_space_once():
    space = search_space(topo())
    assert [c.name for c in space.frozen] == SWEEP
    c = space.frozen[1]
    assert (c.kind, c.inter, c.intra, c.env, c.runner_args) == ("frozen", 1, 2, FROZEN_ENV, ("--frozen", "1x2"))
    assert space.to_dict()["frozen_configs"] == SWEEP
    # OpenMP threads are the process's: a session's pools are inter x intra, swept once each
    omp = search_space(topo(runtime="openmp"))
    assert len(omp.configs) == 8 and [c.name for c in omp.frozen] == SWEEP
    assert search_space(topo(), "none").frozen == ()
    # same environment, other session: never "the same process" as each other or as a pool setting
    t = topo()
    order, same_as = distinct_slots([*space.configs, *space.frozen], t.threading_runtime, t.affinity)
    assert same_as == {} and order == ["1x1", "1x2", "2x1", "2x2", *SWEEP]


def test_estimate_counts_the_frozen_path_of_inference_rows_only():
    h = Harness(topo(), standin_options(rounds=3), plan_provider=OURS_1x2)
    off = Harness(topo(), standin_options(rounds=3, frozen=False), plan_provider=OURS_1x2)
    train, infer = RowSpec("w", "train", 4, "tiny"), RowSpec("w", "infer1", 1, "tiny")
    model = RowSpec("/m", "infer1", 1, "model", ModelOptions())
    assert h.estimate([train])[0] == off.estimate([train])[0] == off.estimate([infer])[0]
    # 4 sessions + ours's + live per round, and one export for a bundled workload
    assert h.estimate([infer])[0] - off.estimate([infer])[0] == 6 * 3 + 1
    assert h.estimate([model])[0] - off.estimate([model])[0] == 6 * 3


# ------------------------------------------------------------------ the harness, real children


def test_an_inference_row_runs_the_frozen_sweep_and_live_a_training_row_does_not(standin_log, monkeypatch, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # the row's export and live's cache dirs: removed after
    monkeypatch.setenv("STANDIN_LIVE_SERVES", "2x1")
    h = Harness(topo(), standin_options(), plan_provider=OURS_1x2)
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny"), RowSpec("wb", "train", 4, "tiny")])
    infer, train = doc["rows"]
    assert infer["order"] == [*PROCESS_SLOTS, "frozen", "frozen:1x1", "frozen:2x1", "frozen:2x2", "live"]
    assert infer["configs"]["frozen:1x2"]["same_as"] == "frozen"  # our plan's pools are 1x2
    assert infer["configs"]["frozen"]["runner_args"] == ["--frozen", "1x2"]
    fp = infer["frozen_path"]
    assert fp["status"] == "ok" and fp["export"]["status"] == "ok" and fp["configs"][-1] == "live"
    assert train["order"] == PROCESS_SLOTS and not any(c.startswith(("frozen", "live")) for c in train["configs"])
    assert train["frozen_path"] == {
        "status": "n/a",
        "reason": "training: a frozen graph's variables are constants, they do not train",
    }

    log = [e for e in read_log(standin_log) if e["workload"] != "wb"]
    frozen_runs = [e for e in log if e["threads"].startswith(("frozen", "live"))]
    # every round runs the whole row, pools and frozen path interleaved
    assert [e["threads"] for e in log][: len(log) // 2] == [e["threads"] for e in log][len(log) // 2 :]
    assert {e["threads"] for e in frozen_runs} == {"frozen:1x2", "frozen:1x1", "frozen:2x1", "frozen:2x2", "live"}
    exported = frozen_runs[0]["workload"]
    assert exported.endswith(os.path.join("export", "saved_model")) and exported.startswith(str(tmp))
    assert all(e["workload"] == exported and e["inputs"].endswith("inputs.npz") for e in frozen_runs)
    assert all(e["env"].get("TF_OVERRIDE_GLOBAL_THREADPOOL") == "1" for e in frozen_runs if e["threads"] != "live")
    live = [e for e in frozen_runs if e["threads"] == "live"]
    caches = [e["env"]["TF_AUTOPAR_CACHE_DIR"] for e in live]
    assert len(set(caches)) == 2 and all(c.startswith(str(tmp)) for c in caches)  # a first start each round
    assert "TF_OVERRIDE_GLOBAL_THREADPOOL" not in live[0]["env"]
    assert os.listdir(tmp) == [] and not os.path.exists(exported)  # nothing left behind

    runs = infer["configs"]["live"]["runs"]
    assert [r["served"] for r in runs] == [["2x1"], ["2x1"]] and runs[0]["tuned_s"] == 0.01
    assert infer["configs"]["frozen:2x1"]["runs"][0]["frozen_session"] == "2x1"
    s = infer["summary"]
    assert s["configs"]["live"]["threads"] == [2, 1] and s["configs"]["live"]["served"] == ["2x1"]
    assert s["frozen_vs_optimum"]["value"] > 0 and s["live_vs_optimum"]["value"] > 0
    assert set(s["best_by_path"]) == {"process", "frozen", "live"}
    assert doc["geomean"]["live_vs_optimum"] == pytest.approx(s["live_vs_optimum"]["value"])
    results.validate_document(json.loads(report.to_json(doc)))
    assert not TRACKER.live


def test_a_faster_frozen_session_is_the_optimum_and_named_as_such(standin_log, monkeypatch):
    monkeypatch.setenv("STANDIN_FAST", "frozen:1x2")  # a quarter of the work: the frozen path wins
    h = Harness(topo(), standin_options(), plan_provider=OURS_1x2)
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny")])
    s = doc["rows"][0]["summary"]
    assert s["optimum"] == "frozen" and s["optimum_path"] == "frozen" and "frozen:1x2" in s["optimum_aliases"]
    assert s["best_by_path"]["frozen"] == "frozen" and s["best_by_path"]["process"] in PROCESS_SLOTS
    assert s["ours_vs_optimum"]["value"] < 0.6 and s["frozen_vs_optimum"]["value"] == 1.0
    assert s["below_optimum"] and s["reasons"][0].startswith("the optimum is on the frozen path (session 1x2)")
    text = report.format_table(doc, details=True)  # the optimum and each path's share: --details
    line = next(ln for ln in text.splitlines() if ln.startswith("wa"))
    assert "frozen 1x2 = ours" in line and "1.00" in line
    assert "frozen/opt" in text and "live/opt" in text and "live serves" in text


def test_a_failed_export_is_recorded_and_the_row_goes_on(standin_log, monkeypatch):
    monkeypatch.setenv("STANDIN_EXPORT_FAIL", "1")
    h = Harness(topo(), standin_options(rounds=1), plan_provider=OURS_1x2)
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny")])
    row = doc["rows"][0]
    assert row["order"] == PROCESS_SLOTS and row["frozen_path"]["status"] == "failed"
    assert "export as a SavedModel failed" in row["frozen_path"]["reason"]
    assert "simulated export failure" in row["frozen_path"]["stderr_tail"]
    assert "frozen_vs_optimum" not in row["summary"] and row["summary"]["optimum_path"] == "process"
    text = report.format_table(doc, details=True)
    assert "frozen path failed (the export as a SavedModel failed" in text
    assert next(ln for ln in text.splitlines() if ln.startswith("wa")).count("failed") == 2
    results.validate_document(json.loads(report.to_json(doc)))


def test_a_model_file_row_runs_its_own_file_and_a_keras_file_has_no_live_run(standin_log, tmp_path):
    sm = tmp_path / "sm"
    sm.mkdir()
    (sm / "saved_model.pb").write_bytes(b"")
    keras = tmp_path / "m.keras"
    with zipfile.ZipFile(keras, "w") as z:
        z.writestr("config.json", "{}")
    h = Harness(topo(), standin_options(rounds=1, space="none"), plan_provider=OURS_1x2)
    opts = ModelOptions(int_max=5)
    doc = h.run([RowSpec(str(sm), "infer1", 1, "model", opts), RowSpec(str(keras), "infer", 2, "model", opts)])
    saved, ker = doc["rows"]
    assert saved["order"][-2:] == ["frozen", "live"] and "export" not in saved["frozen_path"]
    assert ker["order"][-1] == "frozen" and "live" not in ker["configs"]
    assert "predict()" in ker["frozen_path"]["live_reason"]
    assert all(r["status"] == "ok" for row in doc["rows"] for c in row["configs"].values() for r in c["runs"])
    log = read_log(standin_log)
    assert {e["workload"] for e in log if e["threads"] in ("frozen:1x2", "live")} == {str(sm), str(keras)}
    text = report.format_table(doc, details=True)
    assert "live n/a for a .keras file" in text and str(keras) in text.split("live n/a for a .keras file")[1]


# ------------------------------------------------------------------ summaries and report, by hand


def frozen_row(frozen_ms=(0.5, 0.55, 0.45), live_ms=(0.6, 0.6, 0.6), sweep_ms=0.7):
    """hand_row() (ours 1x2 at ~1.0, process optimum 2x1 at ~0.8) with a frozen path."""
    row = hand_row()
    row["order"] += ["frozen", "frozen:2x1", "live"]
    row["configs"]["frozen"] = _cfg(1, 2, [_run(r, 20 + r, m) for r, m in enumerate(frozen_ms, 1)], kind="frozen")
    row["configs"]["frozen:1x2"] = _cfg(1, 2, same_as="frozen", kind="frozen")
    row["configs"]["frozen:2x1"] = _cfg(2, 1, [_run(r, 30 + r, sweep_ms) for r in (1, 2, 3)], kind="frozen")
    live = _cfg(0, 0, [_run(r, 40 + r, m) for r, m in enumerate(live_ms, 1)], kind="live")
    for run in live["runs"]:
        run["served"] = ["1x1"]
    row["configs"]["live"] = live
    row["frozen_path"] = {"status": "ok", "reason": None}
    return row


def test_the_optimum_is_the_best_of_both_paths_with_the_path_named():
    s = results.summarize_row(frozen_row(), logical_cpus=2)
    assert s["optimum"] == "frozen" and s["optimum_path"] == "frozen"
    assert s["best_by_path"] == {"process": "2x1", "frozen": "frozen", "live": "live"}
    assert s["ours_vs_optimum"]["value"] == pytest.approx(0.5)  # as before: optimum time / our time
    assert s["frozen_vs_optimum"]["value"] == pytest.approx(1.0)
    assert s["live_vs_optimum"]["value"] == pytest.approx(0.5 / 0.6, rel=0.1)
    # ours is 1x2 too: the path is the difference, not "other settings"
    assert s["reasons"] == ["the optimum is on the frozen path (session 1x2): no process-pool setting reaches it"]
    assert s["configs"]["live"]["threads"] == [1, 1] and s["configs"]["live"]["path"] == "live"
    # live fastest: it is the optimum, with the session it served
    s = results.summarize_row(frozen_row(live_ms=(0.3, 0.3, 0.3)), logical_cpus=2)
    assert s["optimum"] == "live" and s["optimum_path"] == "live" and s["live_vs_optimum"]["value"] == 1.0
    assert s["reasons"][0].startswith("the optimum is on the live path (live tuning, serving 1x1)")
    # the frozen path slower than the pools: the process optimum stands
    s = results.summarize_row(
        frozen_row(frozen_ms=(2.0, 2.0, 2.0), live_ms=(2.0, 2.0, 2.0), sweep_ms=2.0), logical_cpus=2
    )
    assert s["optimum"] == "2x1" and s["optimum_path"] == "process"
    assert s["reasons"] == ["width misjudged (optimum inter-op 2, ours 1)"]
    assert s["frozen_vs_optimum"]["value"] == pytest.approx(0.4)


def test_report_shows_the_frozen_columns_and_geomeans():
    doc = minimal_doc()
    infer = frozen_row()
    train = copy.deepcopy(hand_row())
    train.update(workload="t", mode="train", frozen_path={"status": "n/a", "reason": "training: no"})
    doc["rows"] = [infer, train]
    for row in doc["rows"]:
        row["summary"] = results.summarize_row(row, 2)
    doc["geomean"] = results.geomeans(doc["rows"])
    results.validate_document(doc)
    assert doc["geomean"]["frozen_vs_optimum"] == pytest.approx(1.0)
    text = report.format_table(doc, details=True)
    header = next(ln for ln in text.splitlines() if ln.startswith("workload"))
    assert (
        header.index("ours/opt") < header.index("frozen/opt") < header.index("live/opt") < header.index("live serves")
    )
    w = next(ln for ln in text.splitlines() if ln.startswith("w "))
    assert "frozen 1x2 = ours  0.50 (0.50-0.50)  1.00 (1.00-1.00)  0.83 (0.75-0.92)" in w
    assert "0.83 (0.75-0.92)  1x1          enable(): 1x1" in w  # live served 1x1, and it is what the line delivers
    assert w.split()[-3:] == ["(0.75-0.92)", "<", "0.95"]  # ours is flagged against the frozen optimum
    t = next(ln for ln in text.splitlines() if ln.startswith("t "))
    assert t.count("n/a") == 2 and "pools 2x1" in t  # the process optimum, named by its path
    assert "frozen path n/a (training: no): t/train" in text
    assert "live 1x1" in text and "frozen 2x1" in text  # the details name each path's threads


def test_an_old_document_without_frozen_entries_renders_as_before():
    doc = json.loads(json.dumps(minimal_doc()))
    for row in doc["rows"]:
        row.pop("frozen_path", None)
        row["summary"] = {k: v for k, v in row["summary"].items() if k not in ("optimum_path", "best_by_path")}
        for c in row["summary"]["configs"].values():
            c.pop("path", None)
    results.validate_document(doc)
    text = report.format_table(doc, details=True)
    assert "frozen/opt" not in text and "live/opt" not in text and "live serves" not in text and "pools 2x1" not in text
    assert "plan: pools 1x2" in text  # the headline: no live run, so the plan
    line = next(ln for ln in text.splitlines() if ln.startswith("w "))
    assert " 2x1 " in line and "0.80" in line
    # and a saved document re-summarised by today's code
    row = doc["rows"][0]
    assert results.summarize_row(row, 2)["optimum_path"] == "process"


def test_the_schema_checks_the_frozen_path():
    doc = minimal_doc()
    doc["rows"][0] = frozen_row()
    results.validate_document(doc)
    for mutate, message in (
        (lambda d: d["rows"][0]["frozen_path"].update(status="maybe"), "frozen_path.status"),
        (lambda d: d["rows"][0]["frozen_path"].pop("status"), "missing key 'status'"),
        (lambda d: d["rows"][0]["configs"]["frozen"].update(runner_args="--frozen 1x2"), "runner_args"),
    ):
        d = copy.deepcopy(doc)
        mutate(d)
        with pytest.raises(ValueError, match=message):
            results.validate_document(d)
