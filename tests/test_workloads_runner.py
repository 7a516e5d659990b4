"""Registry, generic runner and `tf-autopar workloads` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tf_autopar_workloads as workloads

pytestmark = pytest.mark.tf
ROOT = Path(__file__).resolve().parents[1]
ALL = {
    "seq2seq",
    "memnet",
    "speech",
    "autoenc",
    "residual",
    "vgg",
    "alexnet",
    "deepq",
    "inception_v3",
    "resnet50",
    "densenet",
    "squeezenet",
    "ncf",
    "transformer",
    "wide_deep",
}
RUN_KEYS = {
    "workload",
    "mode",
    "size",
    "batch",
    "steps",
    "path",
    "step_times_s",
    "median_s",
    "p10_s",
    "p90_s",
    "losses",
    "peak_rss_mb",
    "build_s",
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_names_lists_all_fifteen_sorted():
    assert workloads.names() == sorted(ALL)


def test_get_unknown_names_it_and_the_choices():
    with pytest.raises(ValueError, match=r"'nope'.*autoenc"):
        workloads.get("nope")


def test_every_registered_module_defines_its_workload():
    for name in workloads.names():
        assert workloads.get(name).name == name


def test_import_workloads_does_not_import_tensorflow():
    code = (
        "import sys, tf_autopar_workloads, tf_autopar_workloads.runner; tf_autopar_workloads.names(); "
        "print(any(m.split('.')[0] in ('tensorflow', 'keras') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True)
    assert out.stdout.strip() == "False"


def test_bad_arguments_raise_value_error():
    from tf_autopar_workloads import runner

    with pytest.raises(ValueError, match="size"):
        runner.run("autoenc", size="huge")
    with pytest.raises(ValueError, match="mode"):
        runner.run("autoenc", mode="fit")
    with pytest.raises(ValueError, match="path"):
        runner.run("autoenc", path="xla")
    with pytest.raises(ValueError, match="steps"):
        runner.run("autoenc", steps=0)


def test_run_function_and_session_paths_report_the_same_losses():
    from tf_autopar_workloads import runner

    a = runner.run("autoenc", mode="train", steps=3, warmup=1, path="function")
    b = runner.run("autoenc", mode="train", steps=3, warmup=1, path="session")
    for r in (a, b):
        assert set(r) == RUN_KEYS
        assert len(r["step_times_s"]) == 3 and all(t > 0 for t in r["step_times_s"])
        assert r["p10_s"] <= r["median_s"] <= r["p90_s"]
        assert r["peak_rss_mb"] > 50
    assert a["losses"] == pytest.approx(b["losses"], rel=1e-5)
    assert a["losses"][-1] < a["losses"][0]


def test_session_uses_the_given_config():
    """The session path builds its Session with the caller's ConfigProto (what per-session pools need)."""
    import tensorflow as tf

    from tf_autopar_workloads import runner

    built = runner.build("deepq")
    config = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=1, intra_op_parallelism_threads=1, use_per_session_threads=True
    )
    config.session_inter_op_thread_pool.add().num_threads = 1
    with built.session("infer", config) as sess:
        out = sess.run(run_options=tf.compat.v1.RunOptions(inter_op_thread_pool=0))
        assert out.shape == (built.batch, built.hparams["actions"])
        with pytest.raises(Exception, match="[Ii]nvalid inter_op_thread_pool"):
            sess.run(run_options=tf.compat.v1.RunOptions(inter_op_thread_pool=5))
    with built.session("train", config) as tsess:
        assert tsess.run(run_options=tf.compat.v1.RunOptions(inter_op_thread_pool=0)) > 0


def test_module_level_graph_def_has_function_library():
    from tf_autopar_workloads import runner

    gd = runner.graph_def("speech", mode="infer")  # RNN loops live in the library
    assert len(gd.library.function) >= 2
    assert any(n.op in ("While", "StatelessWhile") for n in gd.node)


def test_cli_run_json_schema_and_stdout_only_json():
    env = _env()
    env["TF_NUM_INTEROP_THREADS"] = "1"
    env["TF_NUM_INTRAOP_THREADS"] = "1"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tf_autopar.cli.main",
            "workloads",
            "run",
            "memnet",
            "--mode",
            "train",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--size",
            "tiny",
            "--path",
            "session",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)  # nothing but the JSON object on stdout
    assert set(result) == RUN_KEYS
    assert (result["workload"], result["mode"], result["path"], result["steps"]) == ("memnet", "train", "session", 2)
    assert len(result["losses"]) == 2 and result["batch"] == 32


def test_cli_list_without_building_and_unknown_run():
    env = _env()
    out = subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", "workloads", "list", "--no-build", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["name"] for r in rows} == ALL
    assert {r["name"]: r["default_batch"] for r in rows}["vgg"] == 8
    bad = subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", "workloads", "run", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown workload 'nope'" in bad.stderr
