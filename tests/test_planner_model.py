"""`tf-autopar plan MODEL`: the width comes from the graph analysis of a bundled workload.

Runs the command in a fresh process (it imports TensorFlow), on the recorded Skylake host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tf_autopar.planning.planner import SMALL_OP_WORK
from tf_autopar.planning.user_settings import ENV_VARS

pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parents[1]
SKYLAKE = ROOT / "tests" / "fixtures" / "hosts" / "skylake-2s-24c-48t"


def test_plan_takes_the_width_from_a_workload():
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", "plan", "wide_deep", "--root", str(SKYLAKE), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout)
    fact = next(f for f in plan["facts"] if f.startswith("model width"))
    match = re.match(r"model width (\d+) \((\d+) heavy ops / depth (\d+)\), max width (\d+)", fact)
    assert match, fact
    avg, heavy, depth, max_width = map(int, match.groups())
    assert avg == max(1, heavy // depth) and max_width >= avg
    # the rule on 24 physical cores: p = min(avg, max width, 24)
    p = min(avg, max_width, 24)
    assert plan["inter_op"] == p
    work = next(f for f in plan["facts"] if f.startswith("typical heavy op"))  # tiny size: known batch
    number = re.match(r"typical heavy op: ([\d.,]+)( M)?", work)
    mac = float(number.group(1).replace(",", "")) * (1e6 if number.group(2) else 1)
    if mac < SMALL_OP_WORK * 0.99:  # the fact is rounded to 0.1 M
        assert plan["intra_op"] == 1 and "small ops" in plan["settings"]["intra_op"]["reason"]
    elif plan["runtime"] == "eigen":
        assert plan["intra_op"] == (24 if p >= 2 else 12)  # width 1 stays on one socket
    else:
        assert plan["intra_op"] == (24 if p >= 2 else 12) // p


def test_python_snippet_runs_before_tensorflow_starts():
    """The whole snippet, TensorFlow included, in a fresh process: the pools get the plan's sizes."""
    from tf_autopar.planning import plan

    try:
        from test_planner_hosts import hosts
    except ImportError:
        from tests.test_planner_hosts import hosts

    p = plan(hosts()["this"], width=2, tf_data=True, mode="training")  # inter 2, intra 2, binding none
    code = p.python_snippet() + (
        "import json\n"
        "tf.constant(1.0) + 1.0\n"
        "print(json.dumps([tf.config.threading.get_inter_op_parallelism_threads(),"
        " tf.config.threading.get_intra_op_parallelism_threads()]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [p.inter_op, p.intra_op]
