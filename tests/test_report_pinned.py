"""The text reports, pinned byte for byte on synthetic results: `validate`'s table
(validation/report.format_table) and the characterization's report.md
(characterization/report.render). A refactoring of either must leave these files as they are;
a change meant to alter a report regenerates them (``python tests/test_report_pinned.py``)
and shows the difference in review.

The documents cover every branch the reports take: the frozen and tuned columns, an interrupted
run under a CPU quota (mean statistic, throttling), failed plans and runs, flagged rows, the
details table; a characterization with every image and failures, and one with a single mode and
intra-op count (no training comparison, no scaling).
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest

from tf_autopar.characterization import report as char_report
from tf_autopar.characterization import run
from tf_autopar.characterization.analysis import Run, analyze, summarize_payload
from tf_autopar.validation import report, results

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script too

from test_characterize import _payload, _runs  # noqa: E402
from test_validation_frozen import frozen_row  # noqa: E402
from test_validation_stats import _cfg, _run, hand_row, minimal_doc  # noqa: E402

PINNED = Path(__file__).resolve().parent / "fixtures" / "reports"


# ------------------------------------------------------------------ validate's table


def _finish(doc: dict, statistic: str = "median") -> dict:
    for row in doc["rows"]:
        row["summary"] = results.summarize_row(row, 2, statistic)
    doc["geomean"] = results.geomeans(doc["rows"])
    results.validate_document(doc)
    return doc


def _frozen_doc() -> dict:
    """An inference row with the frozen path, a training row without, one whose export failed
    and one whose live run was not possible."""
    doc = minimal_doc()
    doc["options"] = {"rounds": 3, "steps": 3, "warmup": 1}
    train = copy.deepcopy(hand_row())
    train.update(workload="t", mode="train", frozen_path={"status": "n/a", "reason": "training: no"})
    failed = copy.deepcopy(hand_row())
    failed.update(workload="x", frozen_path={"status": "failed", "reason": "export crashed"})
    keras = frozen_row()
    keras["workload"] = "k"
    del keras["configs"]["live"]
    keras["order"].remove("live")
    keras["frozen_path"]["live_reason"] = "n/a for a .keras file"
    doc["rows"] = [frozen_row(), train, failed, keras]
    return _finish(doc)


def _tuned_doc() -> dict:
    """`--tuned`: one row whose tuning found 2x1, one whose tuning failed, one without."""
    doc = minimal_doc()
    doc["options"] = {"rounds": 3, "steps": 5, "warmup": 0}
    good = hand_row()
    good["configs"]["tuned"] = _cfg(2, 1, same_as="2x1", kind="tuned")
    for i, r in enumerate(good["configs"]["2x1"]["runs"] + good["configs"]["2x2"]["runs"]):
        r["wall_s"] = 2.0 + i
    good["tune"] = {"status": "ok", "tuned": "2x1", "wall_s": 6.0, "runs": [{}, {}, {}]}
    bad = copy.deepcopy(hand_row())
    bad["workload"] = "v"
    bad["tune"] = {"status": "failed", "error": "boom", "wall_s": 3.4, "runs": [{}]}
    plain = copy.deepcopy(hand_row())
    plain["workload"] = "u"
    doc["rows"] = [good, bad, plain]
    return _finish(doc)


def _quota_doc() -> dict:
    """Interrupted under a CPU quota: mean step times, throttling, a failed plan, failed runs
    with their stderr, a row below the optimum."""
    doc = minimal_doc()
    doc["interrupted"] = True
    doc["options"] = {"rounds": 3, "steps": 10, "warmup": 2, "cpu_quota": 1.5}
    row = hand_row()
    for name in ("tf-default", "tf-recommended", "2x1"):
        for k, r in enumerate(row["configs"][name]["runs"]):
            r["cpu_stat"] = {"nr_periods": 100, "nr_throttled": 10 * (k + 1), "throttled_us": 5.0}
    row["configs"]["2x2"]["runs"][0].update(error="exit status -11", stderr_tail="line one\n\nSegmentation fault\n")
    row["configs"]["2x2"]["runs"][1].update(error="after 60 s", stderr_tail="")
    planless = copy.deepcopy(hand_row())
    planless["workload"] = "p"
    planless["mode"] = "infer"
    planless["batch"] = 32
    del planless["configs"]["tf_autopar"]
    planless["plan"] = {"status": "crash", "error": "exit status 1", "stderr_tail": "Traceback\nValueError: no"}
    broken = copy.deepcopy(hand_row())  # our plan ran and crashed every round
    broken["workload"] = "q"
    broken["configs"]["tf_autopar"] = _cfg(1, 2, [_run(r, 20 + r, 0.0, "crash") for r in (1, 2, 3)], kind="plan")
    best = copy.deepcopy(hand_row())  # our plan is the optimum
    best["workload"] = "r"
    for r in best["configs"]["2x1"]["runs"]:
        r["step_times_s"] = [3.0] * 3
        r["median_s"] = 3.0
    doc["rows"] = [row, planless, broken, best]
    return _finish(doc, results.statistic_for(1.5))


VALIDATE_CASES = {
    "validate_minimal.txt": lambda: report.format_table(_finish(minimal_doc())),
    "validate_minimal_details.txt": lambda: report.format_table(_finish(minimal_doc()), details=True),
    "validate_frozen_details.txt": lambda: report.format_table(_frozen_doc(), details=True),
    "validate_tuned.txt": lambda: report.format_table(_tuned_doc()),
    "validate_tuned_details.txt": lambda: report.format_table(_tuned_doc(), details=True),
    "validate_quota_details.txt": lambda: report.format_table(_quota_doc(), details=True),
}


# ------------------------------------------------------------------ the characterization's report.md


HOST = {"processor": "Test CPU @ 2.0GHz", "cpu_budget": 2, "tensorflow": "2.99.0", "python": "3.11.0"}


def _result(settings: run.Settings, runs: list[Run], wall_s: float) -> run.Result:
    analyses = analyze(runs, settings.workloads, settings.modes)
    return run.Result(settings=settings, runs=runs, analyses=analyses, host=HOST, wall_s=wall_s)


def _full_result() -> run.Result:
    """Two workloads measured in both modes at 1 and 2 threads, a third with no data, failures."""
    runs = _runs() + [Run("memnet", "infer", 1, 1, ok=False, error="exit status 1: ImportError")]
    s = run.Settings(workloads=("autoenc", "vgg", "memnet"), threads=(1, 2), modes=("infer", "train"), rounds=1)
    return _result(s, runs, 123.4)


def _narrow_result() -> run.Result:
    """One mode, one intra-op count, a batch and op classes given, an op type no rule places, two
    workloads that group and one alone."""
    runs = [
        summarize_payload(_payload({"MatMul": 0.004, "Mystery": 0.001}, wall=0.006), "autoenc", "infer", 1, 1),
        summarize_payload(_payload({"Conv2D": 0.008, "Relu": 0.001}, wall=0.010), "vgg", "infer", 1, 1),
        summarize_payload(_payload({"MatMul": 0.006, "AddV2": 0.001}, wall=0.008), "memnet", "infer", 1, 1),
    ]
    s = run.Settings(
        workloads=("autoenc", "vgg", "memnet"),
        threads=(1,),
        modes=("infer",),
        inter=(1,),
        batch=4,
        steps=5,
        warmup=1,
        classes=("matrix multiply", "convolution"),
    )
    return _result(s, runs, 9.0)


ALL_IMAGES = (
    "time_by_class.png",
    "train_vs_infer.png",
    "scaling.png",
    "scaling_by_class.png",
    "similarity_infer.png",
    "similarity_train.png",
)

CHARACTERIZE_CASES = {
    "characterize_full.md": lambda: char_report.render(_full_result(), ALL_IMAGES),
    "characterize_full_no_images.md": lambda: char_report.render(_full_result()),
    "characterize_narrow.md": lambda: char_report.render(_narrow_result(), ("time_by_class.png",)),
}

CASES = {**VALIDATE_CASES, **CHARACTERIZE_CASES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_is_as_pinned(name):
    expected = (PINNED / name).read_text(encoding="utf-8")
    assert CASES[name]() == expected


def test_the_pinned_reports_take_every_branch():
    """The documents above still reach what they are meant to cover (so a pin stays a real one)."""
    frozen = (PINNED / "validate_frozen_details.txt").read_text()
    assert "frozen/opt" in frozen and "frozen path failed (export crashed): x/infer1" in frozen
    assert "live n/a for a .keras file: k/infer1" in frozen and "frozen path n/a (training: no): t/train" in frozen
    tuned = (PINNED / "validate_tuned_details.txt").read_text()
    assert "tuned/opt" in tuned and "of sweep" in tuned and "failed" in tuned
    headline = (PINNED / "validate_tuned.txt").read_text()
    assert "tuned (what `tf-autopar tune` chose) reached 1.00 of the optimum" in headline
    assert "6 failed run(s)" in headline
    quota = (PINNED / "validate_quota_details.txt").read_text()
    for text in ("INTERRUPTED", "CPU quota 1.5", "MEAN step", "plan failed", "Segmentation fault", "throttled 20%"):
        assert text in quota, text
    assert "p/infer plan: crash: exit status 1 ValueError: no" in quota and "rows below" in quota
    assert "q         infer1  1      1x2   crash" in quota and " ours " in quota.split("\nr ")[1]
    full = (PINNED / "characterize_full.md").read_text()
    for text in ("## Failed runs", "| memnet | infer | no data |", "![similarity, train]", "Inter-op pools"):
        assert text in full, text
    narrow = (PINNED / "characterize_narrow.md").read_text()
    assert "Not measured: needs both modes" in narrow and "Intra-op scaling not measured" in narrow
    assert "Op types no rule placed (counted as *other*): Mystery." in narrow
    assert "Groups: {autoenc, memnet}; alone: vgg." in narrow


if __name__ == "__main__":  # regenerate the pinned files (a change meant to alter a report)
    PINNED.mkdir(parents=True, exist_ok=True)
    for name, make in sorted(CASES.items()):
        (PINNED / name).write_text(make(), encoding="utf-8")
        print("wrote", PINNED / name)
