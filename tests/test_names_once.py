"""Names said once: a fifth baseline reaches every reader; one ``looks_like_model``."""

from __future__ import annotations

import os

import pytest

from tf_autopar._model_path import looks_like_model
from tf_autopar.planning import Setting, baselines
from tf_autopar.validation import chart, report, results
from tf_autopar.validation.space import baseline_configs
from tests.test_planner_hosts import hosts


def _one_by_one(h):
    why = "one thread per pool"
    return (
        {"inter_op": Setting(1, "baseline", why), "intra_op": Setting(1, "baseline", why)},
        {"inter_op": 1, "intra_op": 1, "usable_cpus": 1},
    )


FIFTH = baselines.Baseline("one-by-one", "1x1", "#937860", _one_by_one)


@pytest.fixture
def five(monkeypatch):
    extra = (baselines.Baseline("tf-x", "x", "#da8bc3", _one_by_one), FIFTH)
    monkeypatch.setattr(baselines, "BASELINES", (*baselines.BASELINES, *extra))
    return baselines.BASELINES


def _run(times):
    return [{"round": r, "status": "ok", "step_times_s": [t], "median_s": t} for r, t in enumerate(times, 1)]


def _doc(names):
    configs = {
        n: {
            "kind": "baseline",
            "inter": 1,
            "intra": 1,
            "omp": None,
            "env": {},
            "cpus": [],
            "same_as": None,
            "runs": _run([0.02, 0.021, 0.019]),
        }
        for n in names
    }
    configs[results.OURS] = {
        "kind": "plan",
        "inter": 2,
        "intra": 1,
        "omp": None,
        "env": {"TF_NUM_INTEROP_THREADS": "2"},
        "cpus": [],
        "same_as": None,
        "runs": _run([0.01, 0.011, 0.0105]),
    }
    row = {
        "workload": "alexnet",
        "mode": "infer1",
        "batch": 1,
        "size": "tiny",
        "plan": {"status": "ok"},
        "order": list(configs),
        "configs": configs,
    }
    row["summary"] = results.summarize_row(row, 2)
    return {
        "rows": [row],
        "geomean": results.geomeans([row]),
        "options": {"rounds": 3, "steps": 1, "warmup": 0},
        "space": {"description": "no search"},
    }


def test_a_fifth_baseline_is_planned_summarised_tabled_and_drawn(five, tmp_path):
    topology = next(iter(hosts("eigen").values()))
    configs = baseline_configs(topology)
    assert [c.name for c in configs] == [b.name for b in five]
    assert configs[-1].env_dict == {"TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"}
    assert baselines.baseline_plan("one-by-one", topology).to_env()["TF_NUM_INTRAOP_THREADS"] == "1"
    doc = _doc(baselines.names())
    summary = doc["rows"][0]["summary"]
    assert set(summary["speedup"]) == set(baselines.names())
    assert summary["speedup"]["one-by-one"]["value"] == pytest.approx(2.0, rel=0.1)
    table = report.format_table(doc, details=True)
    assert "vs 1x1" in table and "vs x" in table and "vs default" in table
    chart.write(doc, str(tmp_path / "five.png"))  # a colour per record: no IndexError at the fifth
    assert (tmp_path / "five.png").stat().st_size > 0


def test_an_unknown_baseline_names_the_choices(five):
    with pytest.raises(ValueError, match="one-by-one"):
        baselines.get("nope")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("resnet50", False),  # a bundled workload's name
        ("bert-base", False),  # a registered model name
        ("models/sm", True),  # a path, whether or not it exists (a missing file, not an unknown name)
        ("./sm", True),
        ("~/models/sm", True),
        (".hidden", True),
        ("m.keras", True),
        ("graph.pb", True),
        ("graph.pbtxt", True),  # the model files' suffixes
    ],
)
def test_looks_like_model(text, expected):
    assert looks_like_model(text) is expected


def test_an_existing_path_is_a_model_whatever_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not looks_like_model("resnet50")
    os.mkdir("resnet50")  # a SavedModel directory that happens to carry a workload's name
    assert looks_like_model("resnet50")


def _batch_actions(parser, where=""):
    """(where, the --batch action) of ``parser`` and every subparser under it."""
    import argparse

    for action in parser._actions:
        if "--batch" in action.option_strings:
            yield where, action
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _batch_actions(child, f"{where} {name}".strip())


def test_every_batch_flag_is_the_one_helper_with_its_command_s_default():
    """``--batch`` is declared once (_numbers.add_batch_flag): the same bound and message in every
    command and child, each command's own default."""
    import argparse
    import ast
    import pathlib

    from tf_autopar._numbers import BATCH_BOUND
    from tf_autopar.cli.main import build_parser
    from tf_autopar.graph.dims import MAX_BATCH
    from tf_autopar.models import child

    steps = argparse.ArgumentParser()
    child.add_steps_flags(steps)
    found = dict(_batch_actions(build_parser()))
    found.update({"child run": dict(_batch_actions(child._run_parser()))[""]})
    found.update({"child prepare": dict(_batch_actions(child._prepare_parser()))[""]})
    found.update({"child steps": dict(_batch_actions(steps))[""]})
    defaults = {name: action.default for name, action in found.items()}
    assert defaults == {
        "plan": None,
        "analyze": None,
        "run": None,
        "trace": None,
        "characterize": None,
        "validate": None,
        "bench": 1,
        "tune": None,
        "workloads run": None,
        "child run": 1,
        "child prepare": 1,
        "child steps": None,
    }
    for name, action in found.items():
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            action.type(str(MAX_BATCH + 1))
        assert str(exc.value) == f"{MAX_BATCH + 1} is above the bound of {MAX_BATCH} ({BATCH_BOUND})", name
        assert action.type(str(MAX_BATCH)) == MAX_BATCH
    root = pathlib.Path(child.__file__).parents[1]
    declared = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", "") == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value == "--batch" for a in node.args)
            ):
                declared.append(f"{path.relative_to(root)}:{node.lineno}")
    assert len(declared) == 1 and declared[0].startswith("_numbers.py:"), declared
