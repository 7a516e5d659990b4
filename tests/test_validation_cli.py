"""`tf-autopar validate` as a user runs it: a real harness process, files, Ctrl-C."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from tf_autopar.validation import results
from tf_autopar.measure.cgroup import CgroupUnavailable, check_writable, find_cpu_controller, leftover_groups

from test_validation_harness import STANDIN, alive, read_log

MAIN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli_env(log, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_")}
    env["PYTHONPATH"] = os.pathsep.join([MAIN, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["STANDIN_LOG"] = str(log)
    env.update(extra)
    return env


def validate_cmd(*args):
    runner = shlex.join([sys.executable, STANDIN])
    # real registry names (only their names are checked for infer1 rows); --space none keeps it host-independent;
    # --no-frozen: the frozen path runs tf_autopar's own children, not --runner (test_validation_frozen.py)
    return [
        sys.executable,
        "-m",
        "tf_autopar.cli.main",
        "validate",
        "autoenc",
        "vgg",
        "--modes",
        "infer1",
        "--size",
        "tiny",
        "--runner",
        runner,
        "--plan-threads",
        "1x1",
        "--space",
        "none",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--no-frozen",
        *args,
    ]


def quota_controller():
    try:
        c = find_cpu_controller()
        check_writable(c)
        return c
    except CgroupUnavailable:
        return None


def test_cli_writes_table_json_and_chart(tmp_path):
    out, png = tmp_path / "v.json", tmp_path / "v.png"
    proc = subprocess.run(
        validate_cmd("--rounds", "2", "--json-out", str(out), "--plot", str(png), "--no-progress"),
        env=cli_env(tmp_path / "log"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "geomean" in proc.stdout and "autoenc" in proc.stdout and "vs default" in proc.stdout
    doc = json.loads(out.read_text())
    results.validate_document(doc)
    assert [r["workload"] for r in doc["rows"]] == ["autoenc", "vgg"] and not doc["interrupted"]
    assert doc["rows"][0]["plan"]["source"] == "fixed"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_rejects_bad_input_with_a_message(tmp_path):
    for args, msg in (
        (["--modes", "infer2"], "unknown mode 'infer2'"),
        (["--plan-threads", "2by2"], "INTERxINTRA"),
        (["--plan-threads", "1x1x2"], "no OpenMP"),
    ):
        proc = subprocess.run(
            validate_cmd(*args), env=cli_env(tmp_path / "log"), capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2 and msg in proc.stderr


def test_exit_status_says_when_the_plan_never_ran(tmp_path):
    """Every round of our plan (1x1 here) crashes: the table is printed, and the exit status is 1."""
    proc = subprocess.run(
        validate_cmd("--rounds", "1", "--no-progress"),
        env=cli_env(tmp_path / "log", STANDIN_CRASH="1x1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "geomean" in proc.stdout and "our plan ran cleanly in no round of autoenc/infer1, vgg/infer1" in proc.stderr


@pytest.mark.root
def test_ctrl_c_kills_children_removes_groups_and_keeps_partial_results(tmp_path):
    controller = quota_controller()
    quota = ["--cpu-quota", "1"] if controller else []  # without a controller: still check processes and JSON
    out, log = tmp_path / "v.json", tmp_path / "log"
    # A shell that starts the suite in the background without job control (`bash -c 'pytest &'`)
    # hands every child SIGINT ignored, and Python then installs no KeyboardInterrupt handler:
    # the harness would rightly ignore this test's Ctrl-C. Give it the terminal's default.
    proc = subprocess.Popen(
        validate_cmd("--rounds", "3", "--json-out", str(out), "--no-progress", *quota),
        env=cli_env(log, STANDIN_HANG_AFTER="4"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not log.exists() or len(read_log(log)) < 5):
            time.sleep(0.1)
        assert len(read_log(log)) == 5, "the fifth run never started"
        hung = read_log(log)[-1]["pid"]
        assert alive(hung)
        if controller:
            assert leftover_groups(controller, proc.pid), "the hung run should be inside a quota group"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "INTERRUPTED" in stdout
    assert not any(alive(e["pid"]) for e in read_log(log))
    if controller:
        assert leftover_groups(controller, proc.pid) == []
    doc = json.loads(out.read_text())
    results.validate_document(doc)
    assert doc["interrupted"] is True
    ok = [r for row in doc["rows"] for c in row["configs"].values() for r in c["runs"] if r["status"] == "ok"]
    assert len(ok) == 4


def test_the_harness_process_never_imports_tensorflow(tmp_path):
    # planning the quick run imports the workload registry and model modules (for batch sizes)
    code = (
        "import sys\nfrom tf_autopar.cli.main import main\n"
        "rc = main(['validate', '--quick', '--estimate'])\n"
        "assert rc == 0, rc\nassert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'TF imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=cli_env(tmp_path / "log"), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        "inception_v3/infer," in proc.stdout and "wide_deep/infer1" in proc.stdout and "fresh processes" in proc.stdout
    )


@pytest.mark.root
def test_cpu_quota_without_root_is_a_clear_error(tmp_path):
    import shutil

    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run the command as an unprivileged user")
    cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *validate_cmd("--cpu-quota", "1", "--estimate")]
    proc = subprocess.run(cmd, env=cli_env(tmp_path / "log"), capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 2, proc.stderr
    assert "cannot run under a CPU quota" in proc.stderr and "not root" in proc.stderr
