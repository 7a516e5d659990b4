"""benchmarks/conversion_cost.py: the child's priority it sets (real child processes) and the
arithmetic of its summary, which docs/serving.md quotes ("The child's priority")."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("conversion_cost", ROOT / "benchmarks" / "conversion_cost.py")
conversion_cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conversion_cost)


def run(priority: str = "idle", r: float = 1.2, cpus: float = 0.25, cpu_s: float = 10.0, **kw) -> dict:
    return dict(
        model="m",
        batch=1,
        priority=priority,
        converted=True,
        running_over_stopped=r,
        child_cpus_while_running=cpus,
        child_cpu_s_while_running=cpu_s,
        **kw,
    )


def test_the_share_and_the_paced_time_follow_the_pacings_rule():
    rows = conversion_cost.summary_rows(
        [
            run("idle", r=1.2),
            run("idle", r=1.3, cpus=0.35),
            run("idle", r=1.25, cpus=0.3),  # medians: r 1.25, 0.3 CPUs, 10 CPU s
            run("nice19", r=1.05),  # budget / (r - 1) = 2: held at the most, 0.9
            run("normal", r=3.0, cpus=0.8),  # 0.05: held at the least, 0.1
            run("normal", r=1.0) | {"converted": False},  # no conversion: not counted
        ]
    )
    by = {row["priority"]: row for row in rows}
    assert by["idle"]["runs"] == 3 and by["idle"]["ratio"] == 1.25 and by["idle"]["cpus"] == 0.3
    assert by["idle"]["share"] == pytest.approx(0.4) and by["idle"]["paced_s"] == pytest.approx(10 / (0.4 * 0.3))
    assert by["nice19"]["share"] == pytest.approx(0.9)
    assert by["normal"]["runs"] == 1 and by["normal"]["share"] == pytest.approx(0.1)
    assert by["normal"]["paced_s"] == pytest.approx(10 / (0.1 * 0.8))
    # the runner serving beside it keeps rows apart
    both = conversion_cost.summary_rows([run(served_by="openvino"), run()])
    assert [row["served_by"] for row in both] == ["openvino", "tensorflow"]


@pytest.mark.parametrize(
    "priority, nice, idle",
    [("idle", 19, True), ("nice19", 19, False), ("normal", None, False)],
)
def test_the_child_runs_at_the_priority_asked_whatever_it_sets_itself(tmp_path, priority, nice, idle):
    # a stand-in for conversion.py's child: it lowers itself as the real one does, then reports
    (tmp_path / "fake_child.py").write_text(
        "import os, sys\n"
        "os.nice(19); os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0) == os.SCHED_IDLE, sys.argv[1:])\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    fake = types.SimpleNamespace(
        __name__="fake_child",
        child_command=lambda kind, directory, guarded=False: (
            [sys.executable, "-m", "fake_child", kind, directory],
            env,
        ),
    )
    conversion_cost._child_priority(fake, priority)
    cmd, env = fake.child_command("onnx", "/some/dir")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
    assert int(out[0]) == (os.getpriority(os.PRIO_PROCESS, 0) if nice is None else nice)
    assert out[1] == str(idle)
    assert out[2].strip() == "['onnx', '/some/dir']"
