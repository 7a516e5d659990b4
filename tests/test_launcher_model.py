"""`tf-autopar run --model PATH`: the launcher plans from the model, and an enable() inside the
command agrees with it instead of keeping the launcher's variables as the user's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _runtime_child import ROOT, cpus

from tf_autopar.runtime import controller


def test_launcher_variables_are_not_the_users():
    env = {
        "TF_NUM_INTEROP_THREADS": "2",
        "TF_NUM_INTRAOP_THREADS": "2",
        "OMP_NUM_THREADS": "4",
        "TF_AUTOPAR_LAUNCHER_VARS": "TF_NUM_INTEROP_THREADS,TF_NUM_INTRAOP_THREADS",
    }
    assert controller.user_env(env) == {"OMP_NUM_THREADS": "4"}  # the user's own stays
    assert controller.user_env({"TF_NUM_INTEROP_THREADS": "3"}) == {"TF_NUM_INTEROP_THREADS": "3"}


@pytest.fixture(scope="module")
def models(user_models: dict[str, str]) -> dict[str, str]:
    """The session's user model (conftest.py): built once for every file that loads it."""
    return user_models


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR")) or k == "TF_AUTOPAR_ENGINES"
    }
    full["PYTHONPATH"] = ROOT
    full["TF_CPP_MIN_LOG_LEVEL"] = "3"
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", *args], capture_output=True, text=True, env=full, timeout=300
    )


@pytest.mark.tf
def test_run_plans_from_the_model_and_enable_inside_agrees(models, tmp_path):
    if cpus() < 2:
        pytest.skip("needs 2 CPUs: on 1 every plan is 1x1")
    out = _cli("run", "--model", models["SM"], "--batch", "1", "--dry-run", "--json", "--", "true")
    assert out.returncode == 0, out.stderr
    spec = json.loads(out.stdout)["instances"][0]
    assert (spec["inter_op"], spec["intra_op"]) == (1, 1)  # the model's plan; the host alone gives 2x2
    assert spec["env_set"]["TF_AUTOPAR_LAUNCHER_VARS"] == "TF_NUM_INTEROP_THREADS,TF_NUM_INTRAOP_THREADS"
    # a server that calls enable() and loads the model, started by the launcher without --model:
    # the child's model-based plan wins over the launcher's host-only variables
    child = tmp_path / "server.py"
    child.write_text(
        "import os, json, tf_autopar\n"
        "st = tf_autopar.enable(batch=1)\n"
        "import tensorflow as tf\n"
        f"m = tf.saved_model.load({models['SM']!r})\n"
        "p = tf_autopar.status().process\n"
        "print('RESULT ' + json.dumps({'planned': [p.planned_inter, p.planned_intra], 'kept': p.kept_user,"
        " 'env': [os.environ['TF_NUM_INTEROP_THREADS'], os.environ['TF_NUM_INTRAOP_THREADS']]}))\n"
    )
    out = _cli("run", "--", sys.executable, str(child), env={"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    res = json.loads(next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))[7:])  # noqa: E741
    assert res["planned"] == [1, 1] and res["env"] == ["1", "1"] and res["kept"] == {}


def test_run_model_bad_path_is_a_clear_error(tmp_path):
    out = _cli("run", "--model", str(tmp_path / "missing_model"), "--", "true")
    assert out.returncode == 2 and "no such file or directory" in out.stderr
