"""tune(): a real, small tune in fresh processes; the cache round trip and host-key invalidation."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from _runtime_child import ROOT, cpus, run_child

from tf_autopar.runtime import cache


# `tf-autopar` with a small search: the rule's plan and its farthest neighbour (another inter-op and
# intra-op count where the host has them), two rounds. Left alone it measures up to 12 settings
# for up to 4 rounds, a fresh process each; what these tests check needs two settings measured in
# two rounds (a setting is stored only then). Which settings and when to stop: test_tuning_search.py.
SMALL_SEARCH = """
import functools, sys
from tf_autopar.measure import search
from tf_autopar.tuning import tuner
def plan_and_farthest(*args):
    every = search.neighbourhood(*args)
    return every[:1] + every[1:][-1:]
tuner.neighbourhood = plan_and_farthest
tuner.search = functools.partial(search.search, max_rounds=2)
from tf_autopar.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

# Several `tf-autopar` commands in one interpreter (TensorFlow imported once), each one's exit
# status and standard output: for commands that only read, whose process start is not tested.
IN_ONE_PROCESS = """
import contextlib, io, json, sys
from tf_autopar.cli.main import main
out = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        rc = main(argv)
    out.append([rc, buf.getvalue()])
print(json.dumps(out))
"""


def _env(cache_dir: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR")) or k == "TF_AUTOPAR_ENGINES"
    }
    env.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", TF_AUTOPAR_CACHE_DIR=cache_dir)
    return env


def _cli(*args: str, cache_dir: str, small_search: bool = False) -> subprocess.CompletedProcess:
    cmd = ["-c", SMALL_SEARCH] if small_search else ["-m", "tf_autopar.cli.main"]
    return subprocess.run(
        [sys.executable, *cmd, *args], capture_output=True, text=True, env=_env(cache_dir), timeout=600
    )


def _cli_in_one_process(*argvs: list[str], cache_dir: str) -> list[tuple[int, str]]:
    """(exit status, stdout) of each command, run one after the other by one interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", IN_ONE_PROCESS, json.dumps(argvs)],
        capture_output=True,
        text=True,
        env=_env(cache_dir),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return [(rc, out) for rc, out in json.loads(proc.stdout.splitlines()[-1])]


def test_tuned_entries_round_trip_and_belong_to_one_host(tmp_path):
    path = str(tmp_path / "plans.json")
    entry = {"inter_op": 2, "intra_op": 1, "speedup": 1.2, "rounds": 3, "runs": 9, "date": "2026-11-30"}
    cache.store_tuned("fp", "hostA", "latency", 1, entry, path=path)
    found = cache.lookup_tuned("fp", "hostA", "latency", 1, path=path)
    assert {k: found[k] for k in entry} == entry
    assert cache.lookup_tuned("fp", "hostB", "latency", 1, path=path) is None  # another host: ignored
    assert cache.lookup_tuned("fp", "hostA", "latency", 8, path=path) is None  # another batch
    assert cache.lookup_tuned("fp", "hostA", "training", 1, path=path) is None


def test_host_key_changes_with_the_processor():
    from tf_autopar.topology import detect_topology
    import dataclasses

    t = detect_topology(cpu_details=False)
    other = dataclasses.replace(t, cpu=dataclasses.replace(t.cpu, model="AMD EPYC 7B13"))
    assert cache.host_key(t) != cache.host_key(other)
    assert cache.topology_key(t) == cache.topology_key(other)  # rule-made plans still apply


def test_the_planner_takes_a_tuned_setting_and_says_so(host_root):
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.planning import plan
    from tf_autopar.topology import detect_topology

    t = detect_topology(host_root("skylake-2s-24c-48t"))
    prof = GraphProfile(heavy_ops=50, depth=50, avg_width=1, max_width=1, typical_op_work=20_000_000)
    tuned = {"inter_op": 2, "intra_op": 12, "speedup": 1.18, "rounds": 3, "runs": 10, "date": "2026-11-30"}
    p = plan(t, prof, "latency", env={}, tuned=tuned)
    assert (p.inter_op, p.intra_op) == (2, 12)
    assert "tuned on 2026-11-30: 2x12, 1.18x over the rule's plan 1x12 (3 rounds, 10 runs)" in p.explain()
    kept = plan(t, prof, "latency", env={"TF_NUM_INTRAOP_THREADS": "4"}, tuned=tuned)
    assert kept.intra_op == 4  # the user's own setting still wins
    assert plan(t, prof, "latency", env={}, tuned={"inter_op": 99, "intra_op": 1}).inter_op == 1  # does not fit


@pytest.mark.tf
def test_a_real_tune_is_stored_and_used_by_plan_and_enable(tmp_path, user_models):
    if cpus() < 2:
        pytest.skip("needs 2 CPUs: one CPU has one setting")
    sm = user_models["SM"]
    # the budget only caps the search (it stops once confirmed); a loaded machine makes each run slower
    out = _cli(
        "tune",
        sm,
        "--process-pools",
        "--budget",
        "400",
        "--requests",
        "10",
        "--json",
        cache_dir=str(tmp_path),
        small_search=True,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["search"]["rounds"] >= 2 and res["stored"]["inter_op"] >= 1
    measured = set(res["search"]["medians_s"])
    assert res["rule"] in measured and res["tuned"] in measured and len(measured) >= 2
    chosen = res["tuned"]
    # both plans read the cache the tune wrote, one interpreter for the two
    (rc, tuned), (rc_rule, rule) = _cli_in_one_process(
        ["plan", sm], ["plan", sm, "--no-tuned"], cache_dir=str(tmp_path)
    )
    assert rc == 0 and rc_rule == 0
    assert "tuned on " in tuned and f"inter_op={chosen.split('x')[0]} intra_op={chosen.split('x')[1]}" in tuned
    assert "tuned on" not in rule and "inter_op=" in rule
    # a server's start: enable(), then the load plans from the model and takes the tuned setting
    res2, err, rc = run_child(
        f"import tf_autopar\ntf_autopar.enable()\nimport tensorflow as tf\nm = tf.saved_model.load({sm!r})\n"
        "p = tf_autopar.status().process\nreport(planned=f'{p.planned_inter}x{p.planned_intra}', explain=p.explain,"
        " text=tf_autopar.status().text())",
        {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)},
    )
    assert rc == 0, err
    assert res2["planned"] == chosen and "tuned on" in res2["explain"]
    assert (
        "the numbers: measured by `tf-autopar tune` on this host (tuned on " in res2["text"]
    )  # said, not only in to_dict()


def test_a_budget_too_small_is_a_clear_error_and_keeps_the_plan(tmp_path):
    out = _cli("tune", str(tmp_path / "missing"), "--budget", "60", cache_dir=str(tmp_path))
    assert out.returncode == 2 and "missing" in out.stderr
    out = _cli("tune", "alexnet", "--budget", "0", cache_dir=str(tmp_path))
    assert out.returncode == 2 and "--budget must be a positive number" in out.stderr


@pytest.mark.tf
def test_a_budget_too_small_for_two_runs_is_refused(tmp_path, user_models):
    out = _cli("tune", user_models["SM"], "--budget", "3", cache_dir=str(tmp_path))
    assert out.returncode == 2 and "cannot compare two settings" in out.stderr and "rule's plan" in out.stderr
    assert (
        not os.path.exists(tmp_path / "plans.json")
        or "tuned" not in open(tmp_path / "plans.json").read()
        or json.load(open(tmp_path / "plans.json"))["tuned"] == {}
    )


def test_training_is_tuned_on_workloads_only(tmp_path):
    from tf_autopar.tuning import tune

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(ValueError, match="tuned for inference"):
        tune(str(tmp_path / "m"), mode="training")
    with pytest.raises(ValueError, match="not 'throughput'"):
        tune("alexnet", mode="throughput")
    with pytest.raises(ValueError, match="--batch must be a positive"):
        tune("alexnet", mode="training", batch=0)


@pytest.mark.tf
def test_a_real_training_tune_of_a_workload_is_stored_under_training(tmp_path):
    if cpus() < 2:
        pytest.skip("needs 2 CPUs: one CPU has one setting")
    # the small search's four runs; the budget, as above, only keeps a loaded machine from cutting it short
    out = _cli(
        "tune",
        "autoenc",
        "--mode",
        "training",
        "--batch",
        "16",
        "--budget",
        "400",
        "--requests",
        "5",
        "--json",
        cache_dir=str(tmp_path),
        small_search=True,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["mode"] == "training" and res["batch"] == 16 and res["search"]["runs"] >= 2
    assert res["rule"] in res["search"]["medians_s"]
    if res["stored"]:  # stored only after two rounds: under the budget it may stop after one
        keys = list(json.load(open(tmp_path / "plans.json"))["tuned"])
        assert len(keys) == 1 and keys[0].endswith("|training|16")


def test_the_dispatcher_checks_the_arguments_once_for_both_tuners_before_anything_starts(tmp_path, monkeypatch):
    """tuning.tune routes a model file in an inference mode to one process, the rest to the
    fresh-process search, and refuses bad arguments with check_arguments first: no child started,
    neither tuner called. The CLI goes through it too."""
    from tf_autopar import tuning
    from tf_autopar.cli.main import main
    from tf_autopar.tuning import inprocess, tuner

    def started(*args, **kwargs):
        raise AssertionError(f"started: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.setattr(subprocess, "run", started)
    model = tmp_path / "m"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"")
    cases = [
        (dict(model=str(model), mode="throughput", process_pools=True), "--process-pools tunes latency or training"),
        (dict(model="alexnet", mode="throughput"), "not 'throughput': throughput's streams are tuned in one process"),
        (dict(model="alexnet", mode="serving"), "tune measures latency or training, not 'serving'"),
        (dict(model=str(model), mode="serving"), "in-process tune serves an inference mode"),
        (dict(model=str(model), budget_s=0), "--budget must be a positive number of seconds"),
        (dict(model="alexnet", budget_s=float("inf")), "is beyond"),
        (dict(model=str(model), budget_s=3), "a budget of 3 s cannot compare two settings"),
        (dict(model="alexnet", mode="training", batch=0), "--batch must be a positive integer, got 0"),
        (dict(model=str(model), batch=0), "--batch must be a positive integer, got 0"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            tuning.tune(**kwargs)
    # the same check in each tuner, called directly
    with pytest.raises(ValueError, match=re.escape("in-process tune serves an inference mode")):
        inprocess.tune(str(model), mode="training")
    with pytest.raises(ValueError, match=re.escape("--batch must be a positive integer, got 0")):
        tuner.tune("alexnet", batch=0)
    assert tuning.in_one_process(str(model), "latency") and tuning.in_one_process(str(model), "throughput")
    assert not tuning.in_one_process(str(model), "latency", process_pools=True)
    assert not tuning.in_one_process(str(model), "training") and not tuning.in_one_process("alexnet", "latency")
    # the CLI calls the dispatcher, with each route's arguments
    calls = []
    monkeypatch.setattr(inprocess, "tune", lambda model, **kw: calls.append(("one process", kw)) or _Said())
    monkeypatch.setattr(tuner, "tune", lambda model, **kw: calls.append(("process pools", kw)) or _Said())
    assert main(["tune", str(model), "--batch", "2", "--budget", "30", "--requests", "7"]) == 0
    assert main(["tune", "alexnet", "--size", "paper"]) == 0
    assert [c[0] for c in calls] == ["one process", "process pools"]
    assert calls[0][1]["batch"] == 2 and calls[0][1]["budget_s"] == 30 and "requests" not in calls[0][1]
    assert calls[1][1]["size"] == "paper" and calls[1][1]["requests"] == tuner.DEFAULT_REQUESTS
    assert main(["tune", "alexnet", "--mode", "throughput"]) == 2 and len(calls) == 2


class _Said:
    def text(self) -> str:
        return "tuned"
